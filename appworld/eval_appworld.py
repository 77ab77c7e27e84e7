"""Evaluate an agent on AppWorld (real apps and world model) and the world model's fidelity.

    python appworld/eval_appworld.py agent-real --rows ../shared/data/appworld_rl_split_clean.jsonl \\
        --agent-url http://127.0.0.1:8000/v1 --output-dir runs/eval_appworld/real
    python appworld/eval_appworld.py all --rows ROWS --agent-url URL --wm-endpoint http://127.0.0.1:30000/ \\
        --wm-transitions runs/appworld_data/wm_test.jsonl --wm-url http://127.0.0.1:30001/v1 --output-dir D

Modes: agent-real, agent-wm, fidelity, all (Real / WM / W2R / CR). Success is decidable for question tasks (a
``ground_truth``); see appworld/README.md. The same as ``python -m textwm.eval --env appworld ...``.
"""

from textwm.eval.run import main

if __name__ == "__main__":
    raise SystemExit(main(prog="appworld/eval_appworld.py", env="appworld"))
