"""The real ScienceWorld env server (sessions over HTTP on a pool of worker processes, one JVM per session).

    python sciworld/sciworld_env_server.py --port 30003 --workers 2 --max-sessions-per-worker 8

The same as ``python -m textwm.envs.server --env sciworld ...``. Tiny CPU run: ``--workers 1
--max-sessions-per-worker 2`` (about 8 s to start, ~400 MB per session).
"""

from textwm.envs.server import main

if __name__ == "__main__":
    raise SystemExit(main(env="sciworld", prog="sciworld/sciworld_env_server.py"))
