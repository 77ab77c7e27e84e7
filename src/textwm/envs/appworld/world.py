"""An AppWorld task's world as a row states it: the user, their app accounts, the date, the app records.

The paper's RL rows carry it as ``wm_system_prompt`` text::

    User identity: Brenda Smith, email: brenda.webe@gmail.com, phone: 9312015677

    Account credentials:
    - spotify: username=brenda.webe@gmail.com, password=MPzz6^n
    ...
    Active task: Give a 1-star rating to all songs in my Spotify song library ...
    Current date: 2023-05-20

    Database records:
      songs (80 total, 80 shown):
        - release_date: 2020-07-26, title: Infinite Dreams, duration: 258, ..., artists: ['Lily Moon']
      music_player:
        currently_playing: ...
    <per-API notes for the world model>

:func:`parse_world` reads it once into a :class:`World` (plain data; the text itself is kept, it is the
world model's system prompt); :func:`parse_record` reads one record line into a dict.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from textwm.data.jsonl import DataError

#: Apps where the user has an account whose password the supervisor does not list (unless the row gives one). An
#: AppWorld user has an account in every app; the paper's rows list the passwords of the apps a task touches, and in
#: its demos a phone login with the other apps' credentials fails with 401.
UNLISTED_APPS = ("phone", "gmail", "amazon", "todoist", "splitwise")

_IDENTITY = re.compile(r"^User identity:\s*(?P<name>[^,]+),\s*email:\s*(?P<email>\S+?),\s*phone:\s*(?P<phone>\S+)\s*$",
                       re.MULTILINE)
_CREDENTIAL = re.compile(r"^- (?P<app>[a-z_]+): username=(?P<username>\S+), password=(?P<password>.*)$")
_DATE = re.compile(r"^Current date:\s*(\d{4}-\d{2}-\d{2})\s*$", re.MULTILINE)
_TASK = re.compile(r"^Active task:\s*(.+)$", re.MULTILINE)
_SECTION = re.compile(r"^  (?P<table>\w+)(?: \((?P<counts>[^)]*)\))?:\s*$")
_FIELD = re.compile(r"(?:^|, )(?P<key>[A-Za-z_]\w*): ")
_PLAIN_FIELD = re.compile(r"^    [a-z_]+: ")
_NOTES_START = re.compile(r"^(?:\w+__\w+\(|## )")


@dataclass(frozen=True)
class Account:
    app: str
    username: str
    password: str


@dataclass(frozen=True)
class World:
    """What a row says about the task's world (see the module docstring)."""

    name: str
    email: str
    phone: str
    accounts: tuple[Account, ...]
    instruction: str
    #: The task's date, ``YYYY-MM-DD``.
    date: str
    #: Records per table (``songs``, ``transactions``, ...), as listed in the row.
    records: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    #: The row's ``wm_system_prompt`` as written (the world model's system prompt).
    text: str = ""
    #: The answer ``supervisor__complete_task`` must give (empty: the task changes state, no answer).
    ground_truth: str = ""
    #: The WM prompt layout the row's world-model rows were written in (its ``wm_prompt`` column; ``ours`` when
    #: absent), so the simulator queries as the world model was trained.
    wm_prompt: str = "ours"

    def account(self, app: str) -> Account | None:
        return next((a for a in self.accounts if a.app == app), None)

    def to_dict(self) -> dict[str, Any]:
        """The row's text and answer only: everything else is read back from the text (a request carries less)."""
        return {"text": self.text, "ground_truth": self.ground_truth, "instruction": self.instruction,
                "wm_prompt": self.wm_prompt}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> World:
        return parse_world(d["text"], ground_truth=d.get("ground_truth", ""), instruction=d.get("instruction", ""),
                           wm_prompt=d.get("wm_prompt", "ours"))


def parse_world(text: str, *, ground_truth: str = "", instruction: str = "", wm_prompt: str = "ours") -> World:
    """Read a row's ``wm_system_prompt``; DataError naming the missing part."""
    if not isinstance(text, str) or not text.strip():
        raise DataError("row has no 'wm_system_prompt' (the user, their accounts and app records)",
                        field="wm_system_prompt")
    ident = _IDENTITY.search(text)
    if not ident:
        raise DataError("wm_system_prompt has no 'User identity: NAME, email: ..., phone: ...' line",
                        field="wm_system_prompt")
    accounts = []
    in_credentials = False
    for line in text.splitlines():
        if line.startswith("Account credentials:"):
            in_credentials = True
        elif in_credentials and (m := _CREDENTIAL.match(line)):
            accounts.append(Account(m["app"], m["username"], m["password"]))
        elif in_credentials and line.strip():
            in_credentials = False
    if not accounts:
        raise DataError("wm_system_prompt lists no 'Account credentials:' ('- app: username=..., password=...')",
                        field="wm_system_prompt")
    date = _DATE.search(text)
    task = _TASK.search(text)
    return World(name=ident["name"].strip(), email=ident["email"], phone=ident["phone"], accounts=tuple(accounts),
                 instruction=instruction or (task.group(1).strip() if task else ""),
                 date=date.group(1) if date else "", records=parse_records(text), text=text,
                 ground_truth=ground_truth, wm_prompt=wm_prompt)


def world_of_row(row: Mapping[str, Any]) -> World:
    """The world of an RL row (``wm_system_prompt``, ``ground_truth``, ``instruction``); DataError naming the field.
    A ``ground_truth`` of ``0`` is the answer "0", not "no answer"."""
    truth = row.get("ground_truth")
    if truth is not None and not isinstance(truth, (str, int, float)):
        raise DataError(f"'ground_truth' must be a string or a number, got {type(truth).__name__}",
                        field="ground_truth")
    instruction = row.get("instruction")
    return parse_world(row.get("wm_system_prompt", ""), ground_truth="" if truth is None else str(truth),
                       instruction="" if instruction is None else str(instruction),
                       wm_prompt=str(row.get("wm_prompt") or "ours"))


def records_region(lines: list[str]) -> tuple[int, int]:
    """``(start, end)`` line indices of the ``Database records:`` block (``start == end``: none). It ends where
    the paper's per-API notes begin (an ``app__api(...)`` signature or a ``## `` heading)."""
    try:
        start = lines.index("Database records:") + 1
    except ValueError:
        return len(lines), len(lines)
    end = next((i for i in range(start, len(lines)) if _NOTES_START.match(lines[i])), len(lines))
    while end > start and not lines[end - 1].strip():
        end -= 1
    return start, end


def parse_records(text: str) -> dict[str, list[dict[str, Any]]]:
    """The ``Database records:`` tables: each ``  table (...):`` header and its ``    - k: v, ...`` records.

    A record's value may run over several lines (a note's content): lines that start no record continue
    the one before. A table of ``    key: value`` lines (``music_player``) is one record of those keys.
    """
    records: dict[str, list[dict[str, Any]]] = {}
    lines = text.splitlines()
    start, end = records_region(lines)
    table, raw, plain = None, [], False
    tables: list[tuple[str, list[str], bool]] = []
    for line in lines[start:end]:
        if m := _SECTION.match(line):
            table, raw, plain = m["table"], [], False
            tables.append((table, raw, plain))
        elif table is None:
            continue
        elif line.startswith("    - "):
            raw.append(line[6:])
        elif line.startswith("    ") and not raw and (m := _PLAIN_FIELD.match(line)):
            tables[-1] = (table, raw, True)
            raw.append(line[4:])
        elif raw and tables[-1][2] and (m := _PLAIN_FIELD.match(line)):
            raw.append(line[4:])
        elif raw:
            raw[-1] += "\n" + line
    for name, items, is_plain in tables:
        if is_plain:
            records[name] = [{k: v.strip() for k, _, v in (item.partition(": ") for item in items)}]
        else:
            records[name] = [parse_record(item) for item in items]
    return records


def parse_record(line: str) -> dict[str, Any]:
    """``release_date: 2020-07-26, title: Infinite Dreams, artists: ['Lily Moon']`` -> a dict (values typed)."""
    keys = list(_FIELD.finditer(line))
    record: dict[str, Any] = {}
    for i, m in enumerate(keys):
        end = keys[i + 1].start() if i + 1 < len(keys) else len(line)
        record[m["key"]] = _value(line[m.end():end].strip())
    return record


def _value(raw: str) -> Any:
    if raw in ("True", "False", "None") or re.fullmatch(r"-?\d+(\.\d+)?", raw) or raw[:1] in "[{":
        try:
            return ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            return raw
    return raw
