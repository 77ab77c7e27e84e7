"""Any agent on real ALFWorld games, many episodes in parallel: success overall and per task type.

    python alfworld/eval_parallel.py --agent expert --rows ../shared/data/alfworld_rl.jsonl --output-dir runs/eval_alf --parallel 8
    python alfworld/eval_parallel.py --agent http://127.0.0.1:8000/v1 --rows runs/alfworld_data/rl_test.jsonl --output-dir D
    python alfworld/eval_parallel.py CKPT ROWS.jsonl OUT.jsonl 0 --max-turns 50 --parallel 32        # the paper's form

Each row plays its own game (``game_file`` or ``$ALFWORLD_DATA``), or a game rebuilt from the row. Writes
``D/summary.json`` and ``D/episodes.jsonl`` (see ``textwm.eval.parallel``); W2R / WM / fidelity:
``alfworld/eval_alfworld.py``. Tiny CPU run: ``--agent expert --limit 2 --parallel 1`` (~30 s).
"""

from textwm.eval.parallel import main

if __name__ == "__main__":
    raise SystemExit(main(env="alfworld", prog="alfworld/eval_parallel.py"))
