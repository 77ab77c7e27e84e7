"""The pretrained regime's part of the comparison's ``report.md``, from the run's recorded state alone: every
epoch's held-out loss and greedy scores with their bootstrap intervals, best against last epoch, SDAR at each
number of denoising steps, diversity against fidelity over temperatures, and two charts."""

from __future__ import annotations

from typing import Any

from textwm.experiments.common import BLOCKS
from textwm.experiments.comparison_config import SAME_DATA
from textwm.experiments.report_writer import fmt, image, pyplot, table

#: (label, scorer summary key)
SCORES = (("exact match", "exact_match"), ("ROUGE-L", "rouge_l_f1"), ("BLEU-1", "bleu_1"), ("MAUVE", "mauve"),
          ("Self-BLEU (corpus)", "self_bleu"), ("Distinct-2", "distinct_2"))


def _fmt(value: Any) -> str:
    return fmt(value, digits=3)


def _with_interval(scores: dict[str, Any], key: str) -> str:
    interval = scores.get(f"{key}_ci95")
    text = _fmt(scores.get(key))
    return f"{text} [{interval[0]:.3f}, {interval[1]:.3f}]" if interval else text


def _arms(comparison: Any) -> list[Any]:
    return [a for a in comparison.arms if a.regime == "pretrained" and f"eval/{a.name}" in comparison.done]


def epoch_table(comparison: Any) -> list[str]:
    """One row per arm, epoch and greedy pass: held-out loss and the scores with their 95% intervals."""
    done = comparison.done
    columns = ["arm", "epoch", "pass", "held-out loss", "rows", "empty", *[label for label, _ in SCORES],
               "decode tok/s"]
    rows = []
    for arm in _arms(comparison):
        ev, train = done[f"eval/{arm.name}"], done[f"train/{arm.name}"]
        for epoch in ev["epochs"]:
            k = epoch["epoch"]
            mark = " (best)" if k == train["best_epoch"] else ""
            mark += " (last)" if k == train["epochs_trained"] else ""
            rates = done[f"generate/{arm.name}/epoch{k}"]["passes"]
            for name, scored in epoch["passes"].items():
                s = scored["scores"]
                rows.append([arm.name, f"{k}{mark}", name, f"{epoch['eval_loss']:.4f}", s.get("num_samples"),
                             _fmt(scored["empty_share"]), *[_with_interval(s, key) for _, key in SCORES],
                             f"{rates[name]['decode_tokens_per_second']:,.0f}"])
    return table(columns, rows)


def temperature_table(comparison: Any) -> list[str]:
    done = comparison.done
    rows = []
    for arm in _arms(comparison):
        ev = done[f"eval/{arm.name}"]
        rows += [[f"{arm.name} (epoch {ev['best_epoch']})", f"{row['temperature']:g}", _fmt(row["rouge_l_f1"]),
                  _fmt(row["self_bleu_within_prompt"]), _fmt(row["distinct_1_samples"]),
                  _fmt(row["distinct_2_samples"]), row["dropped_samples"]] for row in ev["temperature_sweep"]]
    return table(["arm (best epoch)", "temperature", "ROUGE-L (mean of samples)", "Self-BLEU within prompt",
                  "Distinct-1", "Distinct-2", "dropped samples"], rows)


def best_greedy(comparison: Any, arm: Any) -> dict[str, Any]:
    """The best epoch's scores of the arm's first greedy pass (SDAR: its first denoising-steps setting)."""
    ev = comparison.done[f"eval/{arm.name}"]
    epoch = ev["epochs"][ev["best_epoch"] - 1]
    return next(iter(epoch["passes"].values()))["scores"]


def leads(comparison: Any) -> list[str]:
    """Per metric, the arm that leads at its best epoch, and whether its interval clears the others'."""
    arms = _arms(comparison)
    out = []
    for label, key in SCORES[:4]:
        values = {a.name: best_greedy(comparison, a) for a in arms}
        ranked = sorted((v.get(key) or 0.0, name) for name, v in values.items())
        if len(ranked) < 2:
            continue
        (_, top), (_, second) = ranked[-1], ranked[-2]
        lo, hi = values[top].get(f"{key}_ci95") or [None, None], values[second].get(f"{key}_ci95") or [None, None]
        separate = lo[0] is not None and hi[1] is not None and lo[0] > hi[1]
        out.append(f"- {label}: **{top}** {_with_interval(values[top], key)}, then {second} "
                   f"{_with_interval(values[second], key)}: "
                   + ("the intervals do not overlap." if separate else "the intervals overlap: not a clear lead."))
    return out


def charts(comparison: Any) -> list[str]:
    """Held-out loss per epoch, and ROUGE-L against within-prompt Self-BLEU over temperatures (none without
    matplotlib)."""
    done = comparison.done
    arms = _arms(comparison)
    plt = pyplot()
    if not arms or plt is None:
        return []
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for arm in arms:
        epochs = done[f"train/{arm.name}"]["epochs"]
        left.plot([e["epoch"] for e in epochs], [e["eval_loss"] for e in epochs], marker="o", label=arm.name)
        sweep = done[f"eval/{arm.name}"]["temperature_sweep"]
        xs, ys = [r["self_bleu_within_prompt"] for r in sweep], [r["rouge_l_f1"] for r in sweep]
        right.plot(xs, ys, marker="o", label=arm.name)
        for r, x, y in zip(sweep, xs, ys):
            if x is not None:
                right.annotate(f"T={r['temperature']:g}", (x, y), fontsize=7)
    left.set(xlabel="epoch", ylabel="held-out loss (each objective's own)", title="Held-out loss")
    right.set(xlabel="Self-BLEU within prompt (lower = more diverse)", ylabel="ROUGE-L",
              title="Fidelity against diversity, best epoch")
    for ax in (left, right):
        ax.legend(fontsize=8)
    fig.tight_layout()
    path = comparison.path("pretrained.png")
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return image("held-out loss and fidelity against diversity", path)


def section(comparison: Any) -> list[str]:
    c, done = comparison.config, comparison.done
    init = done["init"]
    arms = _arms(comparison)
    summary = []
    for arm in arms:
        train = done[f"train/{arm.name}"]
        summary.append(f"- {arm.name}: {train['epochs_trained']} epoch(s), {train['steps']} steps, "
                       f"{train.get('train_seconds', 0):.0f} s of training; best held-out loss at epoch "
                       f"{train['best_epoch']}; stopped: {train['stopped_because']}")
    boot = next((best_greedy(comparison, a).get("bootstrap") for a in arms), None)
    boot_note = (f"Intervals: 95% percentile bootstrap over the held-out rows ({boot['resamples']} resamples; MAUVE "
                 f"{boot['mauve_resamples']})." if boot else "No bootstrap intervals (bootstrap 0).")
    return [
        "# A pretrained start: AR fine-tuned, SDAR and WeDLM converted and fine-tuned\n",
        f"Start: `{init['start']}` ({init['model_type']}, {init['parameters']:,} parameters, a "
        f"{init['vocabulary']:,}-token vocabulary; weights from the {init['source']}). The AR arm is fine-tuned from "
        f"it; the SDAR (block {BLOCKS['sdar']}) and WeDLM (masking block {BLOCKS['wedlm']}) arms are converted from it (one mask token and its embedding row "
        f"added) and fine-tuned. Data: {done['data']['source']} ({done['data']['train_rows']:,} training "
        f"transitions; {done['data']['eval_rows']:,} held-out transitions for the held-out loss and the scores). "
        f"Batches of {c.batch_size} rows (cutoff {c.cutoff_len}), learning rate {c.learning_rate:g} constant after "
        f"a warm-up, seed {c.seed}; each arm trains epoch by epoch until its held-out loss has not improved for "
        f"{c.patience} epoch(s), at most {c.max_epochs}. Greedy decoding of every epoch's model (at most "
        f"{c.gen_length} new tokens; SDAR blocks of 4 at {', '.join(map(str, c.sdar_denoising_steps))} denoising "
        f"step(s) per block); the best epoch sampled {c.samples} times per prompt at temperatures "
        f"{', '.join(f'{t:g}' for t in c.temperatures)}. {boot_note}\n",
        "Same data, checked (the trainer's digest of the answer tokens in training order):\n",
        *[f"- {line}" for line in comparison.done.get(SAME_DATA, {}).get("lines", [])], "",
        "Training:\n", *summary, "",
        "## Every epoch, greedy\n", *epoch_table(comparison), "",
        "Each objective's held-out loss is its own (AR: next-token cross-entropy; SDAR and WeDLM: their masked "
        "losses): it chooses an arm's best epoch, it does not compare the families.\n",
        "Leads at the best epochs:\n", *leads(comparison), "",
        "## Diversity against fidelity\n", *temperature_table(comparison), "",
        *charts(comparison),
        "## What this says and what would change it\n",
        f"These world models start from a pretrained LM of {init['parameters'] / 1e6:.0f}M parameters and are "
        "fine-tuned on one environment's transitions until their held-out loss stops improving, as the paper's were "
        "(an arm stopped by max_epochs may not have finished improving: its line under Training says so); the paper's "
        "SDAR and WeDLM were converted from Qwen3 at 8B, and SDAR's own conversion used ~50B tokens before any "
        "fine-tuning, where here conversion and fine-tuning are one run on this dataset. A lead whose interval "
        "clears the others' is a measured difference at this size and budget; overlapping intervals are not. A "
        "larger start, a conversion stage on general text before the fine-tuning, and other environments are what "
        "would change it.\n",
    ]
