"""Evaluate an agent on ALFWorld (real games and world model) and the world model's fidelity.

    python alfworld/eval_alfworld.py agent-real --rows runs/alfworld_data/rl_test.jsonl --agent expert --output-dir D
    python alfworld/eval_alfworld.py all --rows runs/alfworld_data/rl_test.jsonl --agent-url http://127.0.0.1:8000/v1 \\
        --wm-endpoint http://127.0.0.1:30000/ --wm-transitions runs/alfworld_data/wm_test.jsonl \\
        --wm-url http://127.0.0.1:30001/v1 --workers 8 --output-dir runs/eval_alf/all

Modes: agent-real, agent-wm, fidelity, all (Real / WM / W2R / CR). The same as ``python -m textwm.eval --env
alfworld ...``; outputs and definitions: alfworld/README.md.
"""

from textwm.eval.run import main

if __name__ == "__main__":
    raise SystemExit(main(prog="alfworld/eval_alfworld.py", env="alfworld"))
