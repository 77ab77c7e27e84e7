"""``report.md`` and its charts for :mod:`textwm.experiments.wm_comparison`, from the run's recorded state
alone (nothing hand-copied): the settings, the data checks, one metric table per regime, which arm leads
each metric, learning curves and a metric chart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textwm.eval.episodes import fmt_ci
from textwm.experiments import pretrained_report
from textwm.experiments.comparison_agents import grpo_agents, stage2_plan, wm_arms
from textwm.experiments.comparison_config import SAME_DATA
from textwm.experiments.report_writer import fmt, image, pyplot, stage_times, table, write_markdown
from textwm.metrics import report
from textwm.rl.step_chart import GRPOCurves, steps_chart

#: Arms whose greedy outputs are mostly empty are left out of the diversity leads (empty is not diverse).
EMPTY_LIMIT = 0.5
DIVERSITY = ("Self-BLEU", "Distinct")
#: (label, where in an eval record, higher is better?)
METRICS = (
    ("empty outputs", ("empty_share",), False),
    ("exact match", ("scores", "exact_match"), True),
    ("ROUGE-L", ("scores", "rouge_l_f1"), True),
    ("BLEU-1", ("scores", "bleu_1"), True),
    ("MAUVE", ("scores", "mauve"), True),
    ("Self-BLEU (greedy, corpus)", ("scores", "self_bleu"), False),
    ("Distinct-2 (greedy)", ("scores", "distinct_2"), True),
    ("Self-BLEU within prompt (sampled)", ("diversity", "self_bleu_within_prompt"), False),
    ("Distinct-1 (sampled)", ("diversity", "distinct_1_samples"), True),
    ("Distinct-2 (sampled)", ("diversity", "distinct_2_samples"), True),
    ("decode tok/s (greedy, the decoding loop)", ("decode_tokens_per_second",), True),
    ("decode tok/s (sampled passes, warm)", ("sampled_decode_tokens_per_second",), True),
)


def _get(record: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        record = record.get(key) if isinstance(record, dict) else None
    return record


def _fmt(value: Any) -> str:
    return fmt(value, whole_from=10)


def regime_table(comparison: Any, regime: str) -> tuple[str, list[str]]:
    """The markdown table of one regime's scored arms and a 'who leads' line per metric."""
    done = comparison.done
    arms = [a for a in comparison.arms if a.regime == regime and a.scored]
    head = [a for a in comparison.arms if a.regime == regime and not a.scored]
    # Rows the scores leave out are counted, not hidden: ERROR / overlong greedy rows, failed sampled decodings.
    columns = (["arm", "steps", "answer tokens", "train loss (mean of logged)", "train s", "rows scored", "greedy rows dropped",
                "sampled rows dropped"] + [m[0] for m in METRICS])
    rows = []
    for arm in arms:
        train, ev = done[f"train/{arm.name}"], done[f"eval/{arm.name}"]
        extra = sum(done[f"train/{h.name}"]["steps"] for h in head)
        tokens = train["answer_tokens_seen"] + sum(done[f"train/{h.name}"]["answer_tokens_seen"] for h in head)
        seconds = train["seconds"] + sum(done[f"train/{h.name}"]["seconds"] for h in head)
        dropped = sum(ev["scores"].get(k) or 0 for k in ("num_dropped_errors", "num_skipped_overlong"))
        row = [arm.name, f"{train['steps'] + extra}", f"{tokens:,}", _fmt(train["train_loss"]), f"{seconds:.0f}",
               f"{ev['scores'].get('num_samples')}", f"{dropped}", f"{ev['diversity']['dropped_samples']}"]
        rows.append(row + [_fmt(_get(ev, path)) for _, path, _ in METRICS])
    leads = []
    mostly_empty = {a.name for a in arms if (_get(done[f"eval/{a.name}"], ("empty_share",)) or 0) > EMPTY_LIMIT}
    for label, path, higher in METRICS:
        values = {a.name: _get(done[f"eval/{a.name}"], path) for a in arms}
        left_out = sorted(mostly_empty & set(values)) if label.startswith(DIVERSITY) else []
        values = {k: v for k, v in values.items() if v is not None and k not in left_out}
        note = f"; left out, mostly empty outputs: {', '.join(left_out)}" if left_out else ""
        if len(set(values.values())) == 1 and len(values) > 1:
            leads.append(f"- {label}: tie at {_fmt(next(iter(values.values())))}{note}")
        elif len(values) > 1:
            best = (max if higher else min)(values, key=values.get)
            leads.append(f"- {label}: **{best}** ({_fmt(values[best])}; "
                         + ", ".join(f"{k} {_fmt(v)}" for k, v in values.items() if k != best) + f"){note}")
    return "\n".join(table(columns, rows)), leads


def learning_curves(comparison: Any, path: Path) -> Path | None:
    """Training loss against step for every arm (a convert arm drawn after its head start)."""
    plt = pyplot()
    if plt is None:
        return None
    done = comparison.done
    regimes = sorted({a.regime for a in comparison.arms}, key=["scratch", "convert"].index)
    fig, axes = plt.subplots(1, len(regimes), figsize=(6 * len(regimes), 4), squeeze=False)
    for ax, regime in zip(axes[0], regimes):
        offset = 0
        for arm in (a for a in comparison.arms if a.regime == regime):
            curve = done[f"train/{arm.name}"]["loss_curve"]
            if arm.start != "init":
                offset = done[f"train/{arm.start}"]["steps"]
            ax.plot([s + (offset if arm.start != "init" else 0) for s, _ in curve], [x for _, x in curve],
                    label=arm.name, linestyle="--" if not arm.scored else "-")
        ax.set_title(f"{regime}: training loss")
        ax.set_xlabel("step")
        ax.set_yscale("log")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def shared_device_note(comparison: Any, regime: str) -> list[str]:
    """Say so when arms trained at once (``parallel``): their train seconds are then not solo figures."""
    done = comparison.done
    shared = {a.name: done[f"train/{a.name}"].get("concurrent_arms", 1) for a in comparison.arms
              if a.regime == regime}
    if max(shared.values()) == 1:
        return []
    return ["Train s is wall clock with arms sharing the device: "
            + ", ".join(f"{name} trained alongside {n - 1} other(s)" for name, n in shared.items() if n > 1)
            + ".\n"]


def stage2_chart(comparison: Any, path: Path) -> Path | None:
    """Stage 2 as bars with their 95% Wilson intervals: each agent's real-env success (before GRPO and after GRPO
    inside each world model), and the SFT agent's Real / WM / W2R success with each world model. None when
    matplotlib is missing or no real-env run is done."""
    plt = pyplot()
    if plt is None:
        return None
    done = comparison.done
    agents = [("before GRPO", done.get("agent/eval/sft"))]
    agents += [(f"GRPO in {a.label}" + (f", seed {a.seed}" if len(comparison.config.grpo_seeds) > 1 else ""),
                done.get(f"agent/eval/{a.name}")) for a in grpo_agents(comparison)]
    agents = [(label, r) for label, r in agents if r]
    fidelity = [(a.name, done[f"fidelity/{a.name}"]) for a in wm_arms(comparison) if f"fidelity/{a.name}" in done]
    if not agents:
        return None

    def bar(ax: Any, x: float, record: dict[str, Any], width: float, color: str, label: str | None = None) -> None:
        rate, (low, high) = record["success_rate"], record.get("success_ci95") or (record["success_rate"],) * 2
        ax.bar(x, rate, width, yerr=[[rate - low], [high - rate]], capsize=4, color=color, label=label)

    fig, axes = plt.subplots(1, 2 if fidelity else 1, figsize=(12 if fidelity else 6, 4), squeeze=False)
    ax = axes[0][0]
    for i, (_, record) in enumerate(agents):
        bar(ax, i, record, 0.6, f"C{i}")
    ax.set_xticks(range(len(agents)), [label for label, _ in agents], rotation=20, ha="right", fontsize=8)
    ax.set_title("real-env success (95% Wilson interval)")
    ax.set_ylim(0, 1)
    if fidelity:
        ax = axes[0][1]
        for j, mode in enumerate(("real", "wm", "w2r")):
            for i, (_, f) in enumerate(fidelity):
                bar(ax, i + (j - 1) * 0.25, f[mode], 0.25, f"C{j}", label=mode.upper() if i == 0 else None)
        ax.set_xticks(range(len(fidelity)), [name for name, _ in fidelity])
        ax.set_title("SFT agent: Real / WM / W2R success")
        ax.set_ylim(0, 1)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def grpo_steps_chart(comparison: Any, path: Path) -> Path | None:
    """Each GRPO run's curves per optimizer step and its agents' real success on the calibration rows
    (:func:`textwm.rl.step_chart.steps_chart`)."""

    done = comparison.done
    return steps_chart([GRPOCurves(a.name, done.get(a.grpo_key, {}).get("steps") or [],
                                   (done.get(f"calibration/{a.name}") or {}).get("points") or [])
                        for a in grpo_agents(comparison)], path)


def _calibration_lines(comparison: Any) -> list[str]:
    """The SFT stop chosen on the calibration rows, and each GRPO run's calibration curve, as text."""

    c, done = comparison.config, comparison.done
    lines = []
    stop = done.get("agent/sft_stop")
    if stop:
        tried = ", ".join(f"step {t['step']}: {t['successes']}/{t['episodes']}" for t in stop["tried"])
        lines.append(f"SFT stop, chosen on the {c.calibration_episodes} calibration rows (the first kept step with "
                     f"success >= {stop['target_success']:g}, else the most successful): step {stop['step']} "
                     f"({tried}).")
    for agent in grpo_agents(comparison):
        curve = done.get(f"calibration/{agent.name}")
        if curve:
            lines.append(f"`{agent.name}` on the calibration rows by GRPO step: "
                         + ", ".join(f"{p['step']}: {p['successes']}/{p['episodes']}" for p in curve["points"]) + ".")
    return [*lines, ""] if lines else []


def stage2_section(comparison: Any) -> list[str]:
    """Stage 2: the SFT agent and each GRPO-in-WM agent in the real env, with 95% Wilson intervals."""

    c, done = comparison.config, comparison.done
    if not c.stage2:
        return []
    title = ("## Stage 2: GRPO inside each world model, success in the real env\n" if wm_arms(comparison) else
             "## Stage 2: GRPO in the real env, success in the real env\n")
    missing = [stage.name for stage in stage2_plan(comparison) if stage.name not in done]
    not_run = [f"Not run yet: {', '.join(f'`{key}`' for key in missing)}.\n"] if missing else []
    if "agent/sft" not in done:
        return [title, *not_run]
    sft = done["agent/sft"]
    lines = [title, *not_run,
             f"{f'The agent `{c.agent_init}`' if c.agent_init else f'One AR agent (`{c.agent_size}` shape)'} "
             f"trained on {sft['demos']} gold demos ({sft['turn_rows']} "
             f"turn rows, {sft['steps']} steps, final loss {_fmt(sft['train_loss'])}"
             + (f"; GRPO starts from its step {done['agent/sft_stop']['step']}" if "agent/sft_stop" in done else "")
             + f"), then {c.grpo_steps} GRPO "
             f"steps of up to {c.grpo_turns} turns "
             + " and ".join((["inside each world model (the env's local responder first)"] if wm_arms(comparison)
                             else []) + (["in the real env"] if "real" in c.grpo_families else []))
             + " ("
             f"{c.grpo_generations} rollouts per task, {c.grpo_tasks_per_step} task(s) per step, dynamic sampling "
             f"{'on' if c.grpo_dynamic_sample else 'off'}, {c.grpo_completion_length} tokens per reply, learning "
             f"rate {c.grpo_learning_rate:g}, seeds {', '.join(map(str, c.grpo_seeds))}). "
             f"Task types: {', '.join(c.agent_tasks) if c.agent_tasks else 'every type of the data'}. "
             f"Real env: {_real_episodes(done)} held-out task rows (at most {c.agent_episodes}), up to "
             f"{c.agent_turns} turns, greedy.\n",
             "| agent | GRPO inside | episodes | successes | success rate | 95% interval (Wilson) | mean score | "
             "failed episodes (agent / env errors), unparseable replies | reward per GRPO step | "
             "WM-answered / local steps, WM errors | GRPO seconds |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    rows = [("sft", "none (before GRPO)", "agent/eval/sft", None)]
    rows += [(a.name, a.label, f"agent/eval/{a.name}", a.grpo_key) for a in grpo_agents(comparison)]
    for name, inside, key, grpo_key in rows:
        if key not in done:
            continue
        r, g = done[key], done.get(grpo_key, {}) if grpo_key else {}
        seconds = comparison.runner.records[grpo_key].seconds if g else ""
        steps = (f"{g.get('real_answered_steps', 0)} real" if g.get("rollout_env") == "real" else
                 f"{g['wm_answered_steps']} / {g['local_answered_steps']}, {g['wm_errors']}") if g else ""
        lines.append(f"| {name} | {inside} | {r['episodes']} | {r['successes']} | {_fmt(r['success_rate'])} | "
                     f"{fmt_ci(r.get('success_ci95'))} | {_fmt(r['mean_score'])} | "
                     f"{r.get('agent_errors')} / {r.get('env_errors')}, {r.get('unparseable_replies')} | "
                     f"{_reward_trend(g.get('reward_per_step') or [])} | {steps} | {seconds} |")
    if wm_arms(comparison):
        lines += ["", "The SFT agent as the fixed agent, with each world model (Word2World fidelity: WM = success "
                  "inside the world model, W2R = the WM episodes' actions replayed in the real env, CR = W2R / "
                  "Real):\n", "| world model | Real | WM | W2R | CR | WM errors |", "|---|---|---|---|---|---|"]
    for arm in wm_arms(comparison):
        f = done.get(f"fidelity/{arm.name}")
        if f:
            cells = [f"{_fmt(f[m]['success_rate'])} ({f[m]['successes']}/{f[m]['episodes']}) "
                     f"{fmt_ci(f[m].get('success_ci95'))}" for m in ("real", "wm", "w2r")]
            cr = _fmt(f["cr"]) if f["cr"] is not None else f"n/a ({f['cr_note']})"
            lines.append(f"| {arm.name} | {' | '.join(cells)} | {cr} | {f['wm'].get('wm_errors', 0)} |")
    probed = [(arm.name, done[f"probes/{arm.name}"]) for arm in wm_arms(comparison) if f"probes/{arm.name}" in done]
    if any("rows" in p for _, p in probed):
        lines += ["", "Each world model on the facts the held-out tasks turn on, asked from the real history "
                  "(`probes/<arm>/`): the objects it lists outside against the real env's, and whether it accepts a "
                  "focus on an animal that is not there (the real env never does) and on the right one:\n",
                  "| world model | rows | listing exact | listing precision / recall | absent focus accepted (real / "
                  "WM) | right focus accepted (real / WM) | WM failures |", "|---|---|---|---|---|---|---|"]
        for name, p in probed:
            if "rows" in p:
                lines.append(f"| {name} | {p['rows']} | {_fmt(p['look_exact'])} | {_fmt(p['look_precision'])} / "
                             f"{_fmt(p['look_recall'])} | {_fmt(p['absent_accepted_real'])} / "
                             f"{_fmt(p['absent_accepted_wm'])} | {_fmt(p['right_accepted_real'])} / "
                             f"{_fmt(p['right_accepted_wm'])} | {p['wm_failures']} |")
    paired = done.get("agent/paired")
    lines += ["", f"Decision rule, fixed before the runs: GRPO {'in an arm ' if len(grpo_agents(comparison)) > 1 else ''}"
              "improved the agent when its agent succeeds on more of the same held-out tasks than the SFT agent with "
              "an exact McNemar p < 0.05; otherwise the data do not show an improvement (whichever way the counts "
              "lean)."]
    if paired:
        lines += ["", "Each GRPO agent against the SFT agent on the same held-out tasks, pair by pair "
                  "(`stage2_summary.json`):\n",
                  "| agent | trained in | successes before -> after | difference [95% bootstrap] | won only after / "
                  "only before | exact McNemar p |", "|---|---|---|---|---|---|"]
        for name, p in paired["agents"].items():
            lines.append(f"| {name} | {p['inside']} | {p['successes_before']} -> {p['successes_after']} of "
                         f"{p['episodes']} | {p['difference']:+.3f} {fmt_ci(p['difference_ci95'])} | "
                         f"{p['only_after']} / {p['only_before']} | {p['p_value']:.3g} |")
        for inside, arm in paired.get("arms", {}).items():
            if len(arm["seeds"]) > 1:
                lines.append(f"| all seeds ({', '.join(map(str, arm['seeds']))}; p: sign test over tasks) | "
                             f"{inside} | {arm['success_before']} -> {arm['success_after']} of {arm['episodes']} | | "
                             f"| {arm['p_value']:.3g} |")
    chart = stage2_chart(comparison, comparison.path("stage2.png"))
    steps_chart = grpo_steps_chart(comparison, comparison.path("stage2_steps.png"))
    return [*lines, "", *_calibration_lines(comparison), *image("Stage 2", chart), *image("GRPO per step", steps_chart)]


def _reward_trend(rewards: list[float], window: int = 10) -> str:
    """A run's reward per step: every value for a short run, else the mean of its first and last ``window`` steps."""
    if len(rewards) <= window:
        return ", ".join(f"{r:g}" for r in rewards)
    first, last = sum(rewards[:window]) / window, sum(rewards[-window:]) / window
    return f"{first:.3f} (first {window} steps) -> {last:.3f} (last {window})"


def _real_episodes(done: dict[str, Any]) -> Any:
    """Episodes of the SFT agent's real-env run ('not run yet' before it)."""
    return done["agent/eval/sft"]["episodes"] if "agent/eval/sft" in done else "(not run yet)"


def run_section(comparison: Any) -> list[str]:
    """The run's stages from its ``state.json`` with their wall time (and any that failed)."""
    return ["## Stages and wall time\n", "Every stage of the run recorded in `state.json`:\n",
            *stage_times(comparison.runner.records)]


def write_report(comparison: Any) -> Path:
    """``report.md`` of the comparison's regimes (or of Stage 2 alone), from the run's ``state.json``."""
    c, done = comparison.config, comparison.done
    out = comparison.path("report.md")
    if not c.stage1:
        return write_markdown(out, [f"# Stage 2 alone: GRPO in the real env ({c.env})\n", *stage2_section(comparison),
                                    *run_section(comparison)])
    if c.init:
        return write_markdown(out, [*pretrained_report.section(comparison), "", *stage2_section(comparison),
                                    *run_section(comparison)])
    init = done["init"]
    parts = [
        "# AR vs SDAR vs WeDLM world models at equal size, rows and steps\n",
        f"Data: {done['data']['source']} ({done['data']['train_rows']:,} training transitions; "
        f"{done['data']['eval_rows']} held-out transitions scored). Every arm: {init['parameters']:,} parameters "
        f"(`{c.size}` shape, one tokenizer of {init['vocabulary']:,} tokens), {c.steps} steps of {c.batch_size} rows "
        f"(cutoff {c.cutoff_len}), learning rate {c.learning_rate:g} with a cosine schedule, seed {c.seed}. "
        f"Decoding: greedy for the overlap metrics and MAUVE; {c.samples} samples per prompt at temperature "
        f"{c.temperature:g} for the within-prompt diversity; at most {c.gen_length} new tokens, SDAR blocks of 4 "
        f"at {c.denoising_steps} denoising step(s) per block.\n",
        "Same data, checked (the trainer's digest of the answer tokens in training order):\n",
        *[f"- {line}" for line in comparison.done.get(SAME_DATA, {}).get("lines", [])], "",
    ]
    summaries = {}
    for regime in (r for r in ("scratch", "convert") if r in c.regimes):
        metrics_table, leads = regime_table(comparison, regime)
        title = ("from scratch (same random init shape)" if regime == "scratch" else
                 f"the SDAR / WeDLM recipe: AR for {c.head_steps} steps, then each family for the rest")
        parts += [f"## {regime}: {title}\n", metrics_table, "", *shared_device_note(comparison, regime),
                  "Leads at this budget:\n", *leads, ""]
        summaries.update({a.name: done[f"eval/{a.name}"]["scores"] for a in comparison.arms
                          if a.regime == regime and a.scored})
    curves = learning_curves(comparison, comparison.path("learning_curves.png"))
    charts = report.write_report({k: v for k, v in summaries.items()}, comparison.out, stem="metrics",
                                 title="Held-out transitions, greedy", first_column="arm")
    parts += [*image("learning curves", curves), *image("metrics", charts.get("chart"))]
    parts += stage2_section(comparison)
    parts += [
        "## What this says and what would change it\n",
        "These are small models trained from random weights on one environment's rows for a short budget. "
        "The paper's SDAR and WeDLM checkpoints were continued from Qwen3 models pretrained on trillions of "
        "tokens, at 8B-30B parameters; its claim is about that scale. A lead here says which objective learns "
        "these rows faster at this size and budget; it does not confirm or refute the paper. More steps, the "
        "full datasets, larger shapes and pretrained starts are what would change it.\n",
        "Not in this report yet: GRPO in the real env as the upper reference of Stage 2.\n",
        *run_section(comparison),
    ]
    return write_markdown(out, parts)
