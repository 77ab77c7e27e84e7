"""Environments: the env contract and its registry, the Simulator, the episode loop, the worker pool, the env
server and client, and the dataset-builder plumbing; one subpackage per environment.

    from textwm.envs import env_names, get_env
    spec = get_env("sciworld")     # an EnvSpec: rows, simulator rules, reward, real-env sessions

Generic modules take a spec and never import an env subpackage (``sciworld/``, ...); each subpackage
holds only what is true of its env: session class, row loader, agent prompt, WM prompt, responder,
goals/reward, dataset-builder hooks.
"""

from textwm.envs.registry import env_names, get_env, register

__all__ = ["env_names", "get_env", "register"]
