"""AppWorld's own interpreter for the real-app tests: found, or made once under the user's cache (~45 s)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def appworld_python() -> str:
    """``find_appworld_python()``, else a venv made by ``create_appworld_venv`` in ``~/.cache/textwm``."""
    return appworld_interpreter()


def appworld_interpreter() -> str:
    """The fixture's work, for callers that are no test (the contract suite's build)."""
    from textwm.envs.appworld.apps_python import READY_MARKER, create_appworld_venv, find_appworld_python

    try:
        return str(find_appworld_python())
    except FileNotFoundError:
        pass
    venv = Path(os.environ.get("XDG_CACHE_HOME", "~/.cache")).expanduser() / "textwm" / "appworld-venv"
    if (venv / READY_MARKER).is_file():
        return str(venv / "bin" / "python")
    try:
        return str(create_appworld_venv(venv))
    except RuntimeError as exc:
        pytest.fail(f"no AppWorld interpreter and making one at {venv} failed (set $TEXTWM_APPWORLD_PYTHON to "
                    f"an interpreter with appworld installed, or run appworld/setup_appworld.sh):\n{exc}")
