"""ALFWorld RL task rows in the paper's format (``rl_{train,dev,test}.jsonl``) from real games.

    python alfworld/build_dataset.py --games-dir runs/alfworld_games --out-dir runs/alfworld_rl --train-variations 50
    # the paper's form: one split's rows to one file (games still from --games-dir)
    python alfworld/build_dataset.py --games-dir runs/alfworld_games --split train --shuffle --workers 16 \
        --limit 300 --out data/alfworld_rl.jsonl

Each row: the paper's columns (``messages``, ``game_file``, ``task_type``, ``target_obj``, ``destination``,
``mrecep``, ``toggle_target``, ``wm_system_prompt``, ``init_admissible``, ``expert_plan``) plus ``task_id`` and
``sim_task``. The expert episodes only (``--explore-episodes 0``); the same builder as
``alfworld/build_wm_dataset.py``, whose ``rl_*.jsonl`` are these rows. The paper's released rows are read as
they are: no conversion is needed. ``--split S`` builds all of S's games (sorted, ``--shuffle``: seed 7 as the
paper's, then ``--limit N``); ``--out FILE`` keeps only that split's RL rows (see
``textwm.envs.alfworld.build.paper_main``).
"""

import sys

from textwm.envs.alfworld.build import paper_main

if __name__ == "__main__":
    raise SystemExit(paper_main(["--explore-episodes", "0", *sys.argv[1:]], kind="rl",
                                prog="alfworld/build_dataset.py"))
