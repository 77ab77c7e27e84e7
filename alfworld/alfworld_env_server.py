"""The real ALFWorld env server (sessions over HTTP on a pool of worker processes; loopback by default).

    python alfworld/alfworld_env_server.py --games-dir runs/alfworld_games --port 30004 --workers 4

Task ids are game folders under ``--games-dir`` (or ``$ALFWORLD_DATA/json_2.1.1``); every reset / step info
carries ``admissible_commands`` and ``expert_action``. The same as ``python -m textwm.envs.server --env
alfworld ...``; ``--help`` lists every flag; ``ALFWORLD_PORT`` (the paper's switch) is the default of
``--port``. Tiny CPU run: ``--workers 1 --max-sessions-per-worker 2``.
"""

import os
import sys

from textwm.envs.server import main


def paper_port_flags() -> list[str]:
    """``--port $ALFWORLD_PORT`` when it is set (the paper's server reads its port from it), put before the user's
    flags so that a ``--port`` given on the command line wins."""
    port = os.environ.get("ALFWORLD_PORT", "").strip()
    return ["--port", port] if port else []


if __name__ == "__main__":
    raise SystemExit(main([*paper_port_flags(), *sys.argv[1:]], env="alfworld", prog="alfworld/alfworld_env_server.py"))
