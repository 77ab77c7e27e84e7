"""Environments: the env protocol, real-env adapters and servers, and the Simulator (responder + WM).

One subpackage per environment (``sciworld/``, ...) holds its agent prompt, WM prompt, local
responder, goals/reward and dataset builders. Env packages are imported lazily with an install hint.
"""
