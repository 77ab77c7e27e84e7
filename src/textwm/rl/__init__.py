"""Agent RL inside the world model: generic ms-swift adapters over any registered env.

* :mod:`textwm.rl.swift_adapters` turns an env's :class:`~textwm.envs.contract.EnvSpec` into an
  ms-swift multi-turn scheduler and an ORM reward (``register("sciworld")``); ms-swift itself is
  imported only when a class is built, so this package imports without the ``[rl]`` extra;
* :mod:`textwm.rl.swift_plugin` — the ``--external_plugins`` file that registers every built-in env;
* :mod:`textwm.rl.launch` — the ``swift rlhf --rlhf_type grpo`` command line of a GRPO run.
"""
