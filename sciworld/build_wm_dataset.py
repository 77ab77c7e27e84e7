"""Build the ScienceWorld world-model dataset from the real env (plus RL task rows and SFT demos).

    python sciworld/build_wm_dataset.py --out-dir runs/sciworld_data --tasks boil melt --train-variations 2
    python sciworld/build_wm_dataset.py --out-dir runs/sciworld_data              # all 30 tasks (~10 min)

The same as ``python -m textwm.envs.build --env sciworld ...``; ``--help`` lists every flag.
"""

from textwm.envs.build import main

if __name__ == "__main__":
    raise SystemExit(main(env="sciworld", prog="sciworld/build_wm_dataset.py"))
