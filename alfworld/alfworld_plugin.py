"""ms-swift plugin: ALFWorld GRPO inside the world model.

Registers ``multi_turns["alfworld_scheduler"]`` and ``orms["alfworld_reward"]``; pass it to swift as

    WM_ENDPOINT=http://127.0.0.1:30000/ swift rlhf --rlhf_type grpo --dataset ../shared/data/alfworld_rl.jsonl \\
        --external_plugins alfworld/alfworld_plugin.py --multi_turn_scheduler alfworld_scheduler \\
        --reward_funcs alfworld_reward ...

or use ``alfworld/run_alfworld_{lfm,qwen3,mistral}_grpo.sh``. The paper's released rows work as they are.
Env switches (see alfworld/README.md): ``WM_ENDPOINT`` (the WM proxy), ``ALFWORLD_WM_GUARD=0`` (no local
responder), ``TEXTWM_TRAJECTORY_LOG``.
"""

from textwm.rl.swift_adapters import register

register("alfworld")
