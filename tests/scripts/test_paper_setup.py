"""The paper's `bash setup.sh` in sdar/, wedlm/, llm_training/: here it makes or checks the checkout's venv
(nothing to clone). On an installed checkout it only checks, in about a second."""

import os
import subprocess

import pytest

from tests.conftest import REPO


@pytest.mark.parametrize("folder", ["sdar", "wedlm", "llm_training"])
def test_setup_sh_checks_the_installed_checkout(folder):
    if not (REPO / ".venv" / "bin" / "python").exists():
        pytest.skip("the checkout has no .venv (the README's install makes it)")
    res = subprocess.run(["bash", "setup.sh"], cwd=REPO / folder, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "VENV_DIR": "./.venv"})
    assert res.returncode == 0, res.stderr
    assert f"{folder}/setup.sh: textwm is installed in {REPO / '.venv'}" in res.stdout
    assert "VENV_DIR is not used" in res.stderr
