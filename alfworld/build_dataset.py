"""ALFWorld RL task rows in the paper's format (``rl_{train,dev,test}.jsonl``) from real games.

    python alfworld/build_dataset.py --games-dir runs/alfworld_games --out-dir runs/alfworld_rl --train-variations 50

Each row: the paper's columns (``messages``, ``game_file``, ``task_type``, ``target_obj``, ``destination``,
``mrecep``, ``toggle_target``, ``wm_system_prompt``, ``init_admissible``, ``expert_plan``) plus ``task_id`` and
``sim_task``. The expert episodes only (``--explore-episodes 0``); the same builder as
``alfworld/build_wm_dataset.py``, whose ``rl_*.jsonl`` are these rows. The paper's released rows are read as
they are: no conversion is needed.
"""

import sys

from textwm.envs.build import main

if __name__ == "__main__":
    raise SystemExit(main(["--explore-episodes", "0", *sys.argv[1:]], env="alfworld", prog="alfworld/build_dataset.py"))
