"""Every command the README, the folder READMEs and docs/ show names a file or module that exists and only flags
its parser accepts (read from its ``--help``), and every environment variable given to a shell launcher is one
that something reads. The commands themselves need GPUs, models and the paper's data, so they are read, not run;
the ones that run here are run by the tests of what they run.

Not read: ``scripts/results/README.md``, a dated log of commands as they ran.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted(p for p in {ROOT / "README.md", *ROOT.glob("*/README.md"), *ROOT.glob("docs/*.md")}
              if p.parent.name[:1] != "." and p.parent.name not in ("runs", "tests"))
SHELLS = ("", "bash", "sh", "shell", "console")
PYTHONS = ("python", "python3", ".venv/bin/python")
TEXTWM = ("textwm", ".venv/bin/textwm")
ENV_ASSIGNMENT = re.compile(r"^([A-Z][A-Z0-9_]*)=")


@dataclass(frozen=True)
class Command:
    doc: Path
    line: int
    text: str
    #: The folder it runs in, relative to the root (a ``cd`` earlier on its line).
    cwd: str = "."

    def where(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}: {self.text[:120]}"


def doc_commands(doc: Path) -> list[Command]:
    """The shell lines of ``doc``'s fenced code blocks, continuation lines joined, comments and prompts cut."""
    commands = []
    text = doc.read_text()
    for block in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M):
        if block.group(1) not in SHELLS:
            continue
        first_line = text.count("\n", 0, block.start(2)) + 1
        joined, start = "", None
        for offset, raw in enumerate(block.group(2).splitlines()):
            line = raw.strip()
            start = first_line + offset if start is None else start
            if line.endswith("\\"):
                joined += line[:-1] + " "
                continue
            joined += line
            cwd = "."
            for part in _split_outside_quotes(_uncommented(joined)):
                part = part.strip().removeprefix("$ ")
                if part.startswith("cd "):
                    cwd = part[3:].strip()
                elif part:
                    commands.append(Command(doc, start, part, cwd))
            joined, start = "", None
    return commands


def _split_outside_quotes(line: str) -> list[str]:
    """``line`` cut at ``&&`` and ``;`` outside quotes."""
    parts, quote, start, i = [], None, 0, 0
    while i < len(line):
        ch = line[i]
        if ch in "'\"" and quote in (None, ch):
            quote = None if quote else ch
        elif quote is None and (line.startswith("&&", i) or ch == ";"):
            parts.append(line[start:i])
            i += 1 if ch == ";" else 2
            start = i
            continue
        i += 1
    return [*parts, line[start:]]


def _uncommented(line: str) -> str:
    """``line`` without a trailing ``# comment`` (a ``#`` after whitespace, outside quotes)."""
    quote = None
    for i, ch in enumerate(line):
        if ch in "'\"" and quote in (None, ch):
            quote = None if quote else ch
        elif ch == "#" and quote is None and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def _words(command: Command) -> tuple[dict[str, str], list[str]]:
    """The environment assignments before the program, and the program's words."""
    try:
        words = shlex.split(command.text.rstrip("&").strip())
    except ValueError as e:   # a drawing or prose in a plain block is skipped; a broken command is not
        if _program([w for w in command.text.split() if not ENV_ASSIGNMENT.match(w)]) is not None:
            raise AssertionError(f"{command.where()}: not a shell line ({e})") from None
        return {}, []
    env = {}
    while words and (m := ENV_ASSIGNMENT.match(words[0])):
        env[m.group(1)] = words.pop(0)[m.end():]
    return env, words


def _program(words: list[str]) -> tuple[str, str, list[str]] | None:
    """``(kind, target, args)`` of the commands this test reads: ``("script", path)``, ``("module", name)``,
    ``("textwm", "")`` or ``("shell", path)``; None for the rest (pip, git, cd, pytest, ...)."""
    if not words:
        return None
    head, rest = words[0], words[1:]
    if head == "torchrun":
        rest = [w for w in rest if not w.startswith("--nproc")]
        rest = rest[1:] if rest and rest[0].isdigit() else rest
        head, rest = (rest[0], rest[1:]) if rest else ("", [])
        return ("script", head, rest) if head.endswith(".py") else None
    if head in PYTHONS:
        if rest[:1] == ["-m"] and len(rest) > 1:
            return None if rest[1] == "pytest" else ("module", rest[1], rest[2:])
        if rest and rest[0].endswith(".py"):
            return "script", rest[0], rest[1:]
        return None
    if head in TEXTWM:
        return "textwm", "", rest
    if head == "bash" and rest:
        return ("shell", rest[0], rest[1:]) if rest[0].endswith(".sh") else None
    if head.endswith(".sh"):
        return "shell", head, rest
    return None


ALL = [c for doc in DOCS for c in doc_commands(doc)]
READ = [(c, p) for c in ALL if (p := _program(_words(c)[1])) is not None]


@cache
def help_text(cwd: str, *argv: str) -> str:
    """``argv --help``'s output, run in ``cwd`` ('' when it fails)."""
    run = subprocess.run([*argv, "--help"], cwd=ROOT / cwd, capture_output=True, text=True, timeout=120)
    return run.stdout if run.returncode == 0 else ""


def _help_argv(kind: str, target: str, args: list[str]) -> list[tuple[str, ...]]:
    """The ``--help`` command lines whose flags ``args`` may use: the program's and its subcommand's, with the
    ``--env`` the command names (an env's own flags are listed only then)."""
    base = {"script": (sys.executable, target), "module": (sys.executable, "-m", target),
            "textwm": (sys.executable, "-m", "textwm")}[kind]
    verbs = []
    for word in args:
        if not re.fullmatch(r"[a-z][a-z0-9-]*", word):
            break
        verbs.append(word)
    env = tuple(args[args.index("--env"):args.index("--env") + 2]) if "--env" in args[:-1] else ()
    return [base + tuple(verbs[:n]) + env for n in range(len(verbs), -1, -1)]


def _flags(args: list[str]) -> list[str]:
    """The ``--flags`` of ``args`` up to a ``--`` (after it, words pass to another program)."""
    if "--" in args:
        args = args[:args.index("--")]
    return [a.split("=", 1)[0] for a in args if a.startswith("--") and len(a) > 2]


def _overrides(args: list[str]) -> list[str]:
    """``key=value`` config overrides among ``args`` (the trainers' form)."""
    return [m.group(1) for a in args if (m := re.fullmatch(r"([a-z][a-z0-9_]*)=.*", a))]


def test_the_docs_show_commands_and_this_test_reads_most_of_them():
    assert len(DOCS) >= 10 and len(READ) >= 100, (len(DOCS), len(READ))


def test_no_doc_points_into_a_checkout_that_users_do_not_have():
    bad = [f"{d.relative_to(ROOT)}:{n}" for d in DOCS for n, line in enumerate(d.read_text().splitlines(), 1)
           if "../shared" in line]
    assert not bad, f"paths outside the repository: {bad}"


def test_every_file_and_module_a_command_names_exists():
    missing = []
    for command, (kind, target, _) in READ:
        if kind == "module":
            if importlib.util.find_spec(target) is None:
                missing.append(command.where())
        elif kind in ("script", "shell") and not (ROOT / command.cwd / target).is_file():
            missing.append(command.where())
    assert not missing, "\n".join(missing)


def test_every_flag_a_command_gives_is_one_its_parser_takes():
    wanted = {(command.cwd, *argv) for command, (kind, target, args) in READ if kind != "shell"
              for argv in _help_argv(kind, target, args)}
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda argv: help_text(*argv), wanted))
    wrong = []
    for command, (kind, target, args) in READ:
        if kind == "shell":
            continue
        texts = [help_text(command.cwd, *argv) for argv in _help_argv(kind, target, args)]
        if not any(texts):
            wrong.append(f"{command.where()}\n    --help fails")
            continue
        known = set(re.findall(r"(--[a-z0-9][a-z0-9-]*)", "\n".join(texts))) | {"--env"}
        bad = [f for f in _flags(args) if f not in known]
        if any("KEY=VALUE" in t for t in texts):   # a trainer's config overrides
            bad += [k for k in _overrides(args) if "--" + k.replace("_", "-") not in known]
        if bad:
            wrong.append(f"{command.where()}\n    not in its --help: {', '.join(bad)}")
    assert not wrong, "\n".join(wrong)


@cache
def _read_anywhere(name: str) -> bool:
    """Some launcher or library file names the environment variable ``name``."""
    places = [*ROOT.glob("*/*.sh"), *ROOT.glob("scripts/lib/*.sh"), *ROOT.glob("src/textwm/**/*.py")]
    pattern = re.compile(rf"\b{re.escape(name)}\b")
    return any(pattern.search(p.read_text()) for p in places)


def test_every_variable_given_to_a_launcher_is_read():
    common = {"PYTHONPATH", "CUDA_VISIBLE_DEVICES", "OPENAI_API_KEY", "OUT", "HF_TOKEN"}
    unread = [f"{c.where()}\n    {name} is read by nothing" for c, (kind, _, _) in READ
              for name in _words(c)[0] if name not in common and not _read_anywhere(name)]
    assert not unread, "\n".join(unread)


@pytest.mark.parametrize(("line", "words"), [
    ("A=1 B=x python -m textwm.rl.launch --env sciworld --print-command   # note", (["A", "B"], "module")),
    ("torchrun --nproc_per_node 8 wedlm/train.py --config c.yaml", ([], "script")),
    ("envs/test_contract.py runs every env", ([], None)),
    ("pip install x", ([], None)),
])
def test_commands_are_read_as_a_shell_reads_them(line, words):
    command = Command(ROOT / "README.md", 1, _uncommented(line).strip())
    env, rest = _words(command)
    program = _program(rest)
    assert (list(env), program and program[0]) == words
