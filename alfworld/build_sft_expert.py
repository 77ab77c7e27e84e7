"""ALFWorld SFT demos: the handcoded expert's winning episodes on real games (``sft_{train,dev,test}.jsonl``).

    python alfworld/build_sft_expert.py --games-dir runs/alfworld_games --out-dir runs/alfworld_sft --train-variations 200

Each demo: the agent prompt, the first observation with the admissible commands, then ``Action: <command>``
turns and the real observations (losing episodes are left out). The same builder as
``alfworld/build_wm_dataset.py`` with ``--explore-episodes 0``; train with alfworld/run_alfworld_mistral_sft.sh.
"""

import sys

from textwm.envs.build import main

if __name__ == "__main__":
    raise SystemExit(main(["--explore-episodes", "0", *sys.argv[1:]], env="alfworld",
                          prog="alfworld/build_sft_expert.py"))
