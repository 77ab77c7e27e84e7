"""Command line of the demo: the whole two-stage pipeline in miniature on a CPU (``scripts/demo.sh``,
``textwm demo``)."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys

from textwm.demo import DemoConfig
from textwm.envs import env_names, get_env


def env_names_with_demo() -> list[str]:
    return [n for n in env_names() if n != "toy" and hasattr(get_env(n).dataset_builder(), "demo_config")]


def main(argv: list[str] | None = None, *, prog: str = "scripts/demo.sh") -> int:
    defaults = DemoConfig.create()   # the default env's demo (its builder's demo_defaults applied)
    p = argparse.ArgumentParser(prog=prog, description=(
        "Build WM data from a real env (ScienceWorld, ALFWorld games generated offline, or the AppWorld apps on "
        "worlds generated offline), train a tiny AR and "
        "a tiny SDAR world model, score "
        "them, run GRPO of a tiny agent inside the SDAR world model (swift rlhf), evaluate the agent in the "
        "real env and the world model's fidelity, and write <out>/report.md. Resumable: a re-run skips "
        "finished stages."))
    p.add_argument("--out", default=defaults.out, help="run folder (default: %(default)s)")
    p.add_argument("--smoke", action="store_true", help="an even smaller setting (CI, a few minutes)")
    p.add_argument("--fresh", action="store_true", help="delete the run folder and start over")
    p.add_argument("--env", choices=env_names_with_demo(), help=f"the env (default: {defaults.env})")
    p.add_argument("--tasks", nargs="+", help="task types (default: the env's demo set; ScienceWorld: boil melt "
                                               "find-living-thing test-conductivity; ALFWorld: all six; AppWorld: "
                                               "all seven question kinds)")
    p.add_argument("--agent-tasks", nargs="*", help="task types of the agent stages, among --tasks (none: every "
                                                     "type of the data; default: the env's demo set; ScienceWorld: "
                                                     "lifespan-longest-lived lifespan-shortest-lived, short enough "
                                                     "for a tiny agent; ALFWorld, AppWorld: every type)")
    p.add_argument("--families", nargs="+", choices=("ar", "sdar", "wedlm"),
                   help=f"world-model families, sdar included (default: {' '.join(defaults.families)})")
    p.add_argument("--size", help=f"model size: tiny, small, ... (default: {defaults.size})")
    p.add_argument("--prompt-style", choices=("compact", "full", "paper"),
                   help=f"WM prompt layout: compact (ALFWorld, AppWorld: their own), full (ScienceWorld's full "
                        f"sections) or paper (the paper's query, every env) (default: {defaults.prompt_style})")
    p.add_argument("--cutoff-len", type=int, help=f"longest world-model training row in tokens; longer ones are dropped, "
                                                  f"counted (default: {defaults.cutoff_len}; the paper's layout: 4096)")
    p.add_argument("--train-steps", type=int, help=f"world-model training steps (default: {defaults.train_steps}; "
                                                   "ALFWorld, AppWorld: 200)")
    p.add_argument("--train-variations", type=int, help=f"train variations per task (default: {defaults.train_variations})")
    p.add_argument("--test-variations", type=int, help=f"held-out variations per task (default: {defaults.test_variations})")
    p.add_argument("--eval-rows", type=int, help=f"held-out transitions scored (default: {defaults.eval_rows})")
    p.add_argument("--agent-sft-steps", type=int, help=f"the agent's SFT steps on the gold demos before GRPO (0: a "
                   f"random agent; default: {defaults.agent_sft_steps})")
    p.add_argument("--agent-init", help="the agent's start: a pretrained start's name (python -m "
                                        "textwm.models.pretrained --list) or an AR checkpoint (default: "
                                        f"{defaults.agent_init or 'a tiny random agent'})")
    p.add_argument("--agent-learning-rate", type=float,
                   help=f"the agent SFT's learning rate (default: {defaults.agent_learning_rate})")
    p.add_argument("--grpo-steps", type=int, help=f"GRPO steps (default: {defaults.grpo_steps})")
    p.add_argument("--agent-episodes", type=int, help=f"agent episodes per evaluation (default: {defaults.agent_episodes})")
    p.add_argument("--agent-turns", type=int, help=f"turns per agent episode (default: {defaults.agent_turns})")
    p.add_argument("--workers", type=int, help=f"ScienceWorld worker processes (default: {defaults.workers})")
    p.add_argument("--wm-port", type=int, help=f"WM server port (default: {defaults.wm_port})")
    p.add_argument("--proxy-port", type=int, help=f"WM proxy port (default: {defaults.proxy_port})")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    overrides = {f.name: getattr(args, f.name) for f in dataclasses.fields(DemoConfig)
                 if getattr(args, f.name, None) is not None and f.name not in ("smoke",)}
    for name in ("tasks", "families", "agent_tasks"):
        if getattr(args, name) is not None:
            overrides[name] = tuple(getattr(args, name))
    try:
        config = DemoConfig.create(smoke=args.smoke, **overrides)
    except ValueError as exc:
        p.error(str(exc))

    from textwm.demo import Demo

    try:
        Demo(config, fresh=args.fresh).run()
    except (ValueError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0

