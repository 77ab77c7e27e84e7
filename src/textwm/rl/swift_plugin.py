"""ms-swift plugin file for every built-in env: ``swift rlhf --external_plugins <this file>``.

Registers ``multi_turns["<env>_scheduler"]`` and ``orms["<env>_reward"]`` for each env of
:data:`textwm.envs.registry.BUILTIN` (an env's own ``<env>/<env>_plugin.py`` registers just that
env). ms-swift loads plugin files by path; :func:`path` gives this one's, so a launcher needs no
checkout (:mod:`textwm.rl.launch`).
"""


from textwm.envs.registry import BUILTIN
from textwm.rl.swift_adapters import register

for _name in BUILTIN:
    register(_name)
