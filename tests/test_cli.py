"""The ``textwm`` command: every verb reaches its tool's own command line, under the verb's name."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from textwm import cli

ROOT = Path(__file__).resolve().parents[1]
#: Verbs whose tool serves one env at a time: their flags depend on it.
NEEDS_ENV = {"data build", "env server", "agent grpo"}


def run(argv: list[str], capsys) -> tuple[int, str]:
    try:
        code = cli.main(argv)
    except SystemExit as exc:      # argparse's --help and errors
        code = exc.code
    out = capsys.readouterr()
    return int(code or 0), out.out + out.err


def test_the_help_lists_every_verb(capsys):
    code, text = run(["--help"], capsys)
    assert code == 0 and all(f"  {v.name} " in text for v in cli.VERBS)


@pytest.mark.parametrize("verb", [v.name for v in cli.VERBS])
def test_each_verb_answers_help_under_its_own_name(verb, capsys):
    code, text = run([*verb.split(), *(["--env", "sciworld"] if verb in NEEDS_ENV else []), "--help"], capsys)
    assert code == 0, text[-2000:]
    assert f"textwm {verb}" in text.splitlines()[0]


def test_the_longest_verb_wins_and_the_rest_is_the_tools():
    verb, rest = cli.find(["eval", "paired", "--before", "a"])
    assert verb.name == "eval paired" and rest == ["--before", "a"]
    verb, rest = cli.find(["eval", "w2r", "--env", "appworld"])
    assert verb.name == "eval" and rest == ["w2r", "--env", "appworld"]


def test_an_unknown_verb_is_named(capsys):
    code, text = run(["trian"], capsys)
    assert code == 2 and "no verb 'trian'" in text and "train" in text


def test_the_command_is_installed_and_runs_as_a_module():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"textwm": "textwm.cli:main"}
    res = subprocess.run([sys.executable, "-m", "textwm", "--help"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "verbs:" in res.stdout
