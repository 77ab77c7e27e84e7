"""Build the AppWorld world-model dataset: real tool responses as transitions (plus RL task rows and SFT demos).

    python appworld/build_wm_dataset.py --out-dir runs/appworld_data --demos ../shared/data/appworld_sft_gpt_agent.jsonl
    python appworld/build_wm_dataset.py --out-dir runs/appworld_data --rows ../shared/data/appworld_rl_split_clean.jsonl

``--demos``: the paper's SFT demos (real responses); ``--rows``: RL rows whose worlds are seeded into the real
apps and explored; without either, worlds generated offline. The same as ``python -m textwm.envs.build --env
appworld ...``; ``--help`` lists every flag.
"""

from textwm.envs.build import main

if __name__ == "__main__":
    raise SystemExit(main(env="appworld", prog="appworld/build_wm_dataset.py"))
