"""The real ALFWorld env server (sessions over HTTP on a pool of worker processes; loopback by default).

    python alfworld/alfworld_env_server.py --games-dir runs/alfworld_games --port 30004 --workers 4

Task ids are game folders under ``--games-dir`` (or ``$ALFWORLD_DATA/json_2.1.1``); every reset / step info
carries ``admissible_commands`` and ``expert_action``. The same as ``python -m textwm.envs.server --env
alfworld ...``; ``--help`` lists every flag. Tiny CPU run: ``--workers 1 --max-sessions-per-worker 2``.
"""

from textwm.envs.server import main

if __name__ == "__main__":
    raise SystemExit(main(env="alfworld", prog="alfworld/alfworld_env_server.py"))
