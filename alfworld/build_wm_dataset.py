"""Build the ALFWorld world-model dataset from real games (plus RL task rows and expert SFT demos).

    python alfworld/build_games.py --out-dir runs/alfworld_games --num-games 300
    python alfworld/build_wm_dataset.py --games-dir runs/alfworld_games --out-dir runs/alfworld_data \\
        --train-variations 40 --dev-variations 5 --test-variations 5 --explore-episodes 2 --explore-steps 25

``--*-variations N``: games per task type from each split (train / dev = eval_in_distribution / test =
eval_out_of_distribution). The same as ``python -m textwm.envs.build --env alfworld ...``; ``--help`` lists
every flag. Tiny CPU run: ``--train-variations 1 --dev-variations 0 --test-variations 0 --explore-steps 5``.
"""

from textwm.envs.build import main

if __name__ == "__main__":
    raise SystemExit(main(env="alfworld", prog="alfworld/build_wm_dataset.py"))
