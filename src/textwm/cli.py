"""``textwm``: one command over every tool of the library, a verb each.

    textwm --help                          # the verbs
    textwm data build --env sciworld --out-dir runs/sciworld_data --tasks boil --train-variations 1
    textwm train --config sdar/configs/tiny_cpu.yaml
    textwm train swift --print-command     # the swift sft line of llm_training/train.sh's knobs
    textwm serve stack start --model-path runs/tiny_sdar_sft --port 30000 --backend-port 30001
    textwm <verb> --help                   # every flag of that verb, with its default

A verb runs the same ``main`` as the module or script it names (``python -m textwm.eval`` is ``textwm eval``,
``sdar/train.py`` is ``textwm train``), with the rest of the command line; the paper-named scripts stay where they
are, as shims of the same code. Modules are imported only when their verb runs, so ``textwm --help`` needs no
optional dependency.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Verb:
    words: tuple[str, ...]     # ("data", "build")
    module: str                # where its entry lives
    summary: str
    function: str = "main"     # the entry: ``function(argv)`` (and ``prog=`` where it takes one)

    @property
    def name(self) -> str:
        return " ".join(self.words)


VERBS: tuple[Verb, ...] = (
    Verb(("data", "build"), "textwm.envs.build",
         "real env episodes -> world-model transitions, RL task rows and SFT demos (--env alfworld|sciworld|appworld)"),
    Verb(("data", "prepare"), "textwm.data.cli",
         "chat JSONL -> a trainer's format (LlamaFactory rows and dataset_info.json, bare arrays, ms-swift rows)"),
    Verb(("data", "hub"), "textwm.data.cli", "a Hugging Face dataset or local data -> train/test JSONL for ms-swift",
         function="hub"),
    Verb(("data", "wm-prompt"), "textwm.envs.wm_prompt", "print one step's world-model query in the paper's layout"),
    Verb(("models", "pretrained"), "textwm.models.pretrained",
         "named pretrained starts made offline (SmolLM2-135M-Instruct from its PyPI wheel)"),
    Verb(("train",), "textwm.training.cli", "SFT of an AR, SDAR or WeDLM world model (YAML config and/or flags)"),
    Verb(("train", "swift"), "textwm.training.swift_sft",
         "full-parameter SFT of an AR world model with ms-swift (llm_training/train.sh; swift sft)"),
    Verb(("generate",), "textwm.generation.cli", "batched world-model generation over held-out rows"),
    Verb(("score",), "textwm.metrics.cli", "score predictions: exact/JSON match, ROUGE-L, BLEU-1, diversity, MAUVE"),
    Verb(("serve",), "textwm.serving.cli",
         "the world-model server, the proxy, or the stack of both: serve server|proxy|stack ..."),
    Verb(("env", "server"), "textwm.envs.server", "the real-env server: sessions of any env over HTTP"),
    Verb(("eval",), "textwm.eval.run",
         "agent success in the real env and in the world model, W2R, fidelity (agent-real|agent-wm|fidelity|all|w2r)"),
    Verb(("eval", "paired"), "textwm.eval.paired", "did an agent get better: two real-env runs compared pair by pair"),
    Verb(("eval", "loss"), "textwm.training.swift_eval",
         "loss-only eval of an AR world model with ms-swift: cross-entropy and token accuracy (llm_training/eval.sh)"),
    Verb(("agent", "demos"), "textwm.eval.agent_sft", "agent SFT demos from a chat agent played in the real env"),
    Verb(("agent", "sft"), "textwm.rl.sft_launch", "SFT of an agent on demonstrations, the warm start (ms-swift swift sft)"),
    Verb(("agent", "grpo"), "textwm.rl.launch", "GRPO of an agent inside the world model (ms-swift swift rlhf)"),
    Verb(("demo",), "textwm.demo_cli", "the whole two-stage pipeline in miniature on a CPU (resumable)"),
    Verb(("compare",), "textwm.experiments.comparison_cli",
         "AR vs SDAR vs WeDLM world models at equal size, rows and steps, through Stage 2"),
)


def find(argv: Sequence[str]) -> tuple[Verb | None, list[str]]:
    """The verb ``argv`` starts with (the longest match of its words) and the arguments after it."""
    best = None
    for verb in VERBS:
        n = len(verb.words)
        if tuple(argv[:n]) == verb.words and (best is None or n > len(best.words)):
            best = verb
    return best, list(argv[len(best.words):]) if best else list(argv)


def usage() -> str:
    width = max(len(v.name) for v in VERBS)
    lines = ["usage: textwm <verb> [flags]   (textwm <verb> --help: every flag of the verb, with its default)", "",
             "Text world models for agent RL: data from real envs, AR / SDAR / WeDLM world models, serving, GRPO "
             "inside the world model, evaluation.", "", "verbs:"]
    lines += [f"  {v.name:<{width}}  {v.summary}" for v in VERBS]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    verb, rest = find(argv)
    if verb is None:
        known = sorted({v.words[0] for v in VERBS})
        print(f"textwm: no verb {' '.join(argv[:2])!r}; the verbs begin with one of: {', '.join(known)} "
              "(textwm --help lists them)", file=sys.stderr)
        return 2
    entry = getattr(importlib.import_module(verb.module), verb.function)
    # Usage lines and errors name the verb: the entry's ``prog``, or the parser's default from sys.argv[0].
    kwargs = {"prog": f"textwm {verb.name}"} if "prog" in inspect.signature(entry).parameters else {}
    saved = sys.argv[0]
    sys.argv[0] = f"textwm {verb.name}"
    try:
        return int(entry(rest, **kwargs) or 0)
    finally:
        sys.argv[0] = saved
