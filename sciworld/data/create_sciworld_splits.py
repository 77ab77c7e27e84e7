"""The paper's ``sciworld/data/create_sciworld_splits.py``: its RL and test split files, from the real env.

    python sciworld/data/create_sciworld_splits.py                       # all 30 tasks -> sciworld/data/
    python sciworld/data/create_sciworld_splits.py --tasks boil --out-dir /tmp/sw_splits   # tiny CPU run (~30 s)

Writes ``sciworld_rl_split.jsonl`` and ``sciworld_test_split.jsonl`` (2 variations per task each, the paper's
rule and row format, our agent prompt): :mod:`textwm.envs.sciworld.paper_splits`.
"""

from pathlib import Path

from textwm.envs.sciworld.paper_splits import main

if __name__ == "__main__":
    here = str(Path(__file__).resolve().parent)
    raise SystemExit(main(variant="full", prog="sciworld/data/create_sciworld_splits.py", default_out_dir=here))
