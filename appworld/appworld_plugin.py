"""ms-swift plugin: AppWorld GRPO inside the world model.

Registers ``multi_turns["appworld_scheduler"]`` and ``orms["appworld_reward"]``; pass it to swift as

    WM_ENDPOINT=http://127.0.0.1:30000/ swift rlhf --rlhf_type grpo --dataset ../shared/data/appworld_rl_split_clean.jsonl \\
        --external_plugins appworld/appworld_plugin.py --multi_turn_scheduler appworld_scheduler \\
        --reward_funcs appworld_reward ...

or use ``appworld/run_{qwen,lfm25,mistral}_grpo.sh``. The paper's released rows work as they are. Env switches
(see appworld/README.md): ``WM_ENDPOINT`` (the WM proxy), ``APPWORLD_WM_GUARD=0`` (no local responder),
``TEXTWM_TRAJECTORY_LOG``.
"""

from textwm.rl.swift_adapters import register

register("appworld")
