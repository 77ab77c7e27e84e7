"""The paper's ``sciworld/data/create_sciworld_splits_lfm.py``: the split files for small (LFM) agents.

    python sciworld/data/create_sciworld_splits_lfm.py --tasks boil --out-dir /tmp/sw_splits   # tiny CPU run

The same splits as create_sciworld_splits.py, with a demonstration (the real gold run of
``find-non-living-thing_v0``) before each task's ``NEW TASK:`` message; writes ``sciworld_rl_split_lfm.jsonl`` and
``sciworld_test_split_lfm.jsonl`` (:mod:`textwm.envs.sciworld.paper_splits`).
"""

from pathlib import Path

from textwm.envs.sciworld.paper_splits import main

if __name__ == "__main__":
    here = str(Path(__file__).resolve().parent)
    raise SystemExit(main(variant="lfm", prog="sciworld/data/create_sciworld_splits_lfm.py", default_out_dir=here))
