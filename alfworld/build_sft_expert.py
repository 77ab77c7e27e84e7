"""ALFWorld SFT demos: the handcoded expert's winning episodes on real games (``sft_{train,dev,test}.jsonl``).

    python alfworld/build_sft_expert.py --games-dir runs/alfworld_games --out-dir runs/alfworld_sft --train-variations 200
    # the paper's form: train games shuffled with seed 7, the first N, winning demos to one file
    python alfworld/build_sft_expert.py --games-dir runs/alfworld_games --workers 16 --limit 1500 \
        --out data/alfworld_sft.jsonl

Each demo: the agent prompt, the first observation with the admissible commands, then ``Action: <command>``
turns and the real observations (losing episodes are left out), plus ``task_id`` and ``game_file``. The same
builder as ``alfworld/build_wm_dataset.py`` with ``--explore-episodes 0``; ``--max-steps`` caps the expert's
actions per game (the paper's default, 50). Train with alfworld/run_alfworld_mistral_sft.sh.
"""

import sys

from textwm.envs.alfworld.build import paper_main

if __name__ == "__main__":
    raise SystemExit(paper_main(["--explore-episodes", "0", *sys.argv[1:]], kind="sft",
                                prog="alfworld/build_sft_expert.py"))
