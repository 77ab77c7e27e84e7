"""``report.md`` of the demo: what ran, with which settings, every figure under its metric name."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from textwm.envs.registry import get_env
from textwm.eval.episodes import fmt_ci
from textwm.experiments.report_writer import fmt, image, stage_times, table
from textwm.experiments.stages import StageRecord
from textwm.metrics.scorer import METRIC_LABELS
from textwm.rl.step_chart import GRPOCurves, steps_chart


def _fmt(v: Any) -> str:
    return fmt(v, missing="n/a")


#: The accuracy metrics the demo's verdict counts (higher is better for each).
VERDICT_METRICS = ("exact_match", "rouge_l_f1", "bleu_1", "mauve")


def budget_winner(scores: dict[str, dict[str, Any]], families: list[str]) -> list[str]:
    """Which trained family leads on each accuracy metric at the demo's budget, said plainly, and why it says
    little about the paper's claim."""
    leads: dict[str, list[str]] = {}
    for metric in VERDICT_METRICS:
        values = {f: scores.get(f"wm_{f}", {}).get(metric) for f in families}
        values = {f: v for f, v in values.items() if v is not None}
        if len(values) < 2:
            continue
        best = max(values.values())
        winners = [f for f, v in values.items() if v == best]
        leads.setdefault(" and ".join(winners) if len(winners) > 1 else winners[0], []).append(metric)
    if not leads:
        return []
    ranked = sorted(leads.items(), key=lambda kv: -len(kv[1]))
    verdict = "; ".join(f"{who} {'tie' if ' and ' in who else 'leads'} on {', '.join(metrics)}" for who, metrics in ranked)
    return [f"**Which won at this budget:** {verdict}.",
            "Why that says little about the paper: these are tiny models trained from random weights for minutes "
            "on a few hundred transitions, where masked-diffusion objectives typically need more steps than AR "
            "(each step takes its loss on a random share of the answer tokens). The paper's SDAR and "
            "WeDLM models started from pretrained Qwen3 checkpoints of 1.7B-30B parameters. "
            "`scripts/wm_comparison.py` puts the question at equal size, rows and steps, from scratch and from "
            "an AR head start."]


def agent_verdict(agent: dict[str, Any], reward_per_step: list[float], agent_init: str = "") -> list[str]:
    """The agent's real-env successes before and after GRPO, said plainly: what each stage of its training did."""
    def real(name: str) -> dict[str, Any]:
        return (agent.get(name) or {}).get("real") or {}

    before_name = next((n for n in ("agent_sft", "agent_init") if n in agent), None)
    before, after = real(before_name or ""), real("agent_grpo")
    if not before or not after:
        return []

    def said(r: dict[str, Any]) -> str:
        return f"{r['successes']} of {r['episodes']} held-out tasks ({fmt_ci(r.get('success_ci95'))})"

    start = ("after its SFT on the gold demos" if before_name == "agent_sft" else
             "as its start, before any training" if agent_init else "as a random agent (no SFT)")
    change = ("no change" if before["successes"] == after["successes"] else
              "up" if after["successes"] > before["successes"] else "down")
    paired = (agent.get("agent_grpo") or {}).get("paired_with_before")
    test = ("" if not paired else f" No paired comparison: {paired['error']}." if "error" in paired else
            f" Pair by pair on the same tasks: difference {paired['difference']:+.3f}, 95% bootstrap interval "
            f"{fmt_ci(paired['difference_ci95'])}, {paired['only_after']} tasks won only after and "
            f"{paired['only_before']} only before, exact McNemar p = {paired['p_value']:.3g}.")
    return [f"**The agent in the real env:** {said(before)} {start}, then {said(after)} after "
            f"{len(reward_per_step)} GRPO steps inside the world model ({change}; a handful of steps on a few tasks "
            f"moves an agent little).{test}", ""]


def render(config: Any, records: Mapping[str, StageRecord], out: Path) -> list[str]:
    """The lines of ``report.md`` from the run's stage ``records`` (its ``state.json``)."""
    spec = get_env(config.env)
    fig = {name: rec.result or {} for name, rec in records.items() if rec.status == "done"}
    agent_start = (f"the agent is the pretrained `{config.agent_init}` fine-tuned on the gold demos"
                   if config.agent_init else "the agent is a tiny random model fine-tuned on the gold demos")
    lines = ["# textwm demo: the two-stage pipeline in miniature", "",
             "Everything below ran on this machine's CPU in minutes: the world models are tiny random models "
             f"trained on the demo's rows, {agent_start}. The figures show that every stage works end to end, not "
             "that the world models are useful.", "",
             "## Settings", "", "```", *(f"{k}: {v}" for k, v in dataclasses.asdict(config).items()), "```", "",
             "## Wall time per stage", "", *stage_times(records)]

    data = fig.get("data", {})
    lines += [f"## 1. Data (real {spec.title} env)", "",
              f"- task types: {', '.join(data.get('tasks', []))}",
              f"- transitions per split: {data.get('transitions')}; held-out rows scored: {data.get('eval_rows')}",
              "- files: data/wm_{train,test}.jsonl, data/rl_*.jsonl, data/dataset_card.md", ""]

    train = fig.get("train", {})
    lines += ["## 2. World models (same size, same tokenizer, same rows, same steps)", "",
              *table(["family", "parameters", "steps", "train_loss"],
                     [(k, v.get("parameters"), v.get("steps"), v.get("train_loss")) for k, v in train.items()])]
    lines += ["", "(The SDAR loss is the 1/p-weighted masked-token loss and the WeDLM loss averages it with an AR "
              "term; neither is comparable to the AR loss.)", ""]

    scores = fig.get("wm_eval", {}).get("scores", {})
    lines += ["## 3. World-model scores on held-out transitions", "",
              *table(["model", "num_samples", *METRIC_LABELS],
                     [(name, s.get("num_samples"), *(_fmt(s.get(k)) for k in METRIC_LABELS)) for name, s in scores.items()])]
    if scores:
        trained = [n[3:] for n in scores if n.startswith("wm_")]
        beat = [f"{n}: exact_match {_fmt(scores[f'init_{n}'].get('exact_match'))} untrained -> "
                f"{_fmt(scores[f'wm_{n}'].get('exact_match'))} trained" for n in trained if f"init_{n}" in scores]
        rates = ", ".join(f"{_fmt(scores[f'wm_{n}'].get('exact_match'))} ({n})" for n in trained)
        lines += ["", *(f"- {b}" for b in beat),
                  f"- how far from useful: the trained models get {rates} of the observations exactly right; a "
                  "world model an agent can train in needs most of them right (the paper's 8B models), so these "
                  "tiny models mostly reproduce frequent short observations.",
                  "- chart: wm_eval/comparison.png; table: wm_eval/comparison.md", "",
                  *budget_winner(scores, trained), ""]

    grpo = fig.get("grpo", {})
    sft = grpo.get("agent_sft") or {}
    agent_init = f"`{config.agent_init}`" if config.agent_init else "a tiny random agent"
    start = (f"{agent_init} trained on {sft['demos']} gold demos first ({sft['turn_rows']} turn rows, {sft['steps']} "
             f"steps, final loss {sft['train_loss']})" if "demos" in sft else
             f"{agent_init} as it is ({sft.get('skipped', 'no SFT step')})")
    agent_rows = data.get("agent_rows")
    agent_tasks = (f"{', '.join(config.agent_tasks)} ({agent_rows['rl_train.jsonl']} task rows to train on, "
                   f"{agent_rows['rl_test.jsonl']} held out; the world models learned every type)"
                   if config.agent_tasks and agent_rows else "every type of the data")
    lines += [f"## 4. GRPO inside the world model (swift rlhf, {spec.title} plugin)", "",
              f"- agent task types: {agent_tasks}",
              f"- start: {start}",
              f"- {grpo.get('reward_metric', 'reward')} per step: {grpo.get('reward_per_step')}",
              f"- turns per step: {grpo.get('turns_per_step')}; episodes: {grpo.get('episodes')}",
              f"- steps answered by the local responder: {grpo.get('local_answered_steps')}, by the world model: "
              f"{grpo.get('wm_answered_steps')}, WM errors: {grpo.get('wm_errors')}", ""]

    chart = steps_chart([GRPOCurves("agent_grpo", grpo.get("steps") or [])], out / "grpo_steps.png")
    lines += [f"Per step (reward, groups with no reward spread, token entropy, KL): {line}" for line in
              image("GRPO per step", chart)]

    agent = fig.get("agent_eval", {})
    rows = []
    for name, r in agent.items():
        f = r.get("fidelity") or {}
        rate = {m: (f.get(m) or {}).get("success_rate") for m in ("real", "wm", "w2r")}
        rows.append((name, _fmt(rate["real"]), fmt_ci((f.get("real") or {}).get("success_ci95")), _fmt(rate["wm"]),
                     _fmt(rate["w2r"]), _fmt(f.get("cr")), _fmt((f.get("real") or {}).get("mean_score"))))
    lines += ["## 5. Agent before / after, real env vs world model (Word2World fidelity)", "",
              *table(["agent", "Real success", "Real 95% interval (Wilson)", "WM success", "W2R success",
                      "CR = W2R / Real", "Real mean score"], rows),
              "", *agent_verdict(agent, grpo.get("reward_per_step") or [], config.agent_init),
              f"Details: agent_eval/<agent>/eval_{spec.name}.md (episodes in episodes_{{real,wm,w2r}}.jsonl).", ""]
    return lines
