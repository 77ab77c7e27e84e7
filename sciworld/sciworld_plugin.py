"""ms-swift plugin: ScienceWorld GRPO inside the world model.

Registers ``multi_turns["sciworld_scheduler"]`` and ``orms["sciworld_reward"]``; pass it to swift as

    WM_ENDPOINT=http://127.0.0.1:30000/ swift rlhf --rlhf_type grpo --dataset runs/sciworld_data/rl_train.jsonl \\
        --external_plugins sciworld/sciworld_plugin.py --multi_turn_scheduler sciworld_scheduler \\
        --reward_funcs sciworld_reward ...

or use ``sciworld/run_sciworld_{qwen3,lfm,mistral}_grpo.sh``. Env switches (see sciworld/README.md):
``WM_ENDPOINT`` (the WM proxy), ``SCIWORLD_WM_GUARD=0`` (no local responder), ``TEXTWM_TRAJECTORY_LOG``,
``SCIWORLD_ENV_URL`` (reward from a replay in that real env server), ``TEXTWM_SIM_CACHE`` (start states
of rows without ``sim_task``, such as the paper's ``sciworld_rl_split.jsonl``).
"""

from textwm.rl.swift_adapters import register

register("sciworld")
