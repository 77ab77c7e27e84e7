"""The registry of environments: a name -> :class:`~textwm.envs.contract.EnvSpec`.

The built-in envs are named here once, as ``module:attribute`` strings imported on first use, so
generic code never imports an env subpackage and ``env_names()`` costs no import. Tests and users
add their own with :func:`register`.
"""

from __future__ import annotations

import importlib
import sys

from textwm.envs.contract import EnvSpec

#: The built-in environments: one line each.
BUILTIN: dict[str, str] = {
    "alfworld": "textwm.envs.alfworld.spec:AlfWorldSpec",
    "appworld": "textwm.envs.appworld.spec:AppWorldSpec",
    "sciworld": "textwm.envs.sciworld.spec:SciWorldSpec",
}

_registered: dict[str, EnvSpec] = {}


def register(spec: EnvSpec, *, replace: bool = False) -> EnvSpec:
    """Add ``spec`` under ``spec.name``; a second spec with a taken name is an error unless ``replace``."""
    if not spec.name:
        raise ValueError(f"{type(spec).__name__} has no name")
    if not replace and (spec.name in BUILTIN or spec.name in _registered) and _registered.get(spec.name) is not spec:
        raise ValueError(f"an env named {spec.name!r} is registered already")
    _registered[spec.name] = spec
    return spec


def env_names() -> list[str]:
    """Names of every env: the built-in ones and those registered in this process."""
    return sorted({*BUILTIN, *_registered})


def get_env(name: str) -> EnvSpec:
    """The spec of env ``name`` (a built-in one is imported on first use)."""
    if name not in _registered:
        if name not in BUILTIN:
            raise KeyError(f"unknown env {name!r}; registered: {', '.join(env_names())}")
        module, _, attr = BUILTIN[name].partition(":")
        _registered[name] = getattr(importlib.import_module(module), attr)()
    return _registered[name]


def pop_env_flag(argv: list[str]) -> str | None:
    """Remove ``--env NAME`` (or ``--env=NAME``) from ``argv`` and return NAME (None if absent): the generic CLIs
    need the env before they can build the rest of their command line."""
    for i, token in enumerate(argv):
        if token == "--env" and i + 1 < len(argv):
            name = argv[i + 1]
            del argv[i:i + 2]
            return name
        if token.startswith("--env="):
            del argv[i]
            return token.split("=", 1)[1]
    return None


def spec_from_cli(argv: list[str], env: str | None, prog: str, usage: str) -> EnvSpec | None:
    """The env of a generic command line: ``env`` (a wrapper's), else ``--env NAME`` taken out of ``argv``.
    None after printing the usage or the error (the caller exits with 2)."""
    env = env or pop_env_flag(argv)
    if env is None:
        asked = "-h" in argv or "--help" in argv
        print(f"usage: {prog} --env {{{','.join(env_names())}}} {usage}; --env NAME --help lists the flags",
              file=sys.stdout if asked else sys.stderr)
        if asked:
            raise SystemExit(0)   # help was asked for: not an error
        return None
    try:
        return get_env(env)
    except KeyError as exc:
        print(f"error: {exc.args[0]}", file=sys.stderr)
        return None
