"""The real ScienceWorld env server (sessions over HTTP on a pool of worker processes).

    python sciworld/sciworld_env_server.py --port 30003 --workers 2 --max-sessions-per-worker 8

Tiny CPU run: ``--workers 1 --max-sessions-per-worker 2`` (about 8 s to start, ~400 MB per session).
"""

from textwm.envs.sciworld.server import main

if __name__ == "__main__":
    raise SystemExit(main())
