"""The real AppWorld env server: the installed apps, seeded per task from its row, over HTTP (loopback by default).

    bash appworld/setup_appworld.sh                                    # AppWorld's own interpreter, once
    python appworld/appworld_env_server.py --rows ../shared/data/appworld_rl_split_clean.jsonl --port 30002

A task id is a row's ``task_id``; a reset seeds that row's world (``wm_system_prompt`` records) into fresh app
databases, a step is one canonical tool call. The same as ``python -m textwm.envs.server --env appworld ...``;
``--help`` lists every flag. Tiny CPU run: ``--workers 1 --max-sessions-per-worker 2``.
"""

from textwm.envs.server import main

if __name__ == "__main__":
    raise SystemExit(main(env="appworld", prog="appworld/appworld_env_server.py"))
