"""Command line of the demo: the whole two-stage pipeline in miniature on a CPU (``scripts/demo.sh``,
``textwm demo``)."""

from __future__ import annotations

import logging
import sys

from textwm.config import ConfigCLI, ConfigError
from textwm.demo import Demo, DemoConfig
from textwm.envs import env_names, get_env

DESCRIPTION = ("Build WM data from a real env (ScienceWorld, ALFWorld games generated offline, or the AppWorld apps "
               "on worlds generated offline), train a tiny AR and a tiny SDAR world model, score them, run GRPO of a "
               "tiny agent inside the SDAR world model (swift rlhf), evaluate the agent in the real env and the world "
               "model's fidelity, and write <out>/report.md. Resumable: a re-run skips finished stages.")


def env_names_with_demo() -> list[str]:
    return [n for n in env_names() if n != "toy" and hasattr(get_env(n).dataset_builder(), "demo_config")]


def main(argv: list[str] | None = None, *, prog: str = "scripts/demo.sh") -> int:
    cli = ConfigCLI(DemoConfig, prog=prog, description=DESCRIPTION, key_values=False,
                    epilog=f"Envs with a demo: {', '.join(env_names_with_demo())}. Defaults: the env's demo (its "
                           "builder's demo_defaults), --smoke's, then --config FILE.yaml, then the flags.")
    cli.add_argument("--fresh", action="store_true", help="delete the run folder and start over")
    try:
        given, extra = cli.parse_given(argv)
        smoke = given.pop("smoke", False)
        config = DemoConfig.create(smoke=smoke, **given)
    except (ConfigError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        Demo(config, fresh=extra.fresh).run()
    except (ValueError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
