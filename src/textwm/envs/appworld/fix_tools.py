"""Fix the tool names and schemas of a paper-format AppWorld file from the apps' own API specs.

The paper's early data used names that are no AppWorld API (``venmo__send_payment``) and hand-written
schemas; its ``fix_tool_names_and_schemas.py`` renames them from a hand-made table. Here every row's
tools are rebuilt from :func:`~textwm.envs.appworld.tools.catalog`:

* names: :data:`~textwm.envs.appworld.tools.PAPER_NAME_MAP` applied in every message and in
  ``wm_system_prompt`` (whole names only);
* parameters: :data:`~textwm.envs.appworld.tools.PAPER_PARAM_RENAMES` applied to the assistant turns' calls;
* tool lists: the ``Available tools:`` lines (RL rows) and the ``<|tool|>[...]<|/tool|>`` JSON list (SFT
  rows) rewritten from the real APIs' parameters, same tools, same order.

A name that is still no API afterwards is an error naming the row and the tool; nothing is written then.
``messages`` keeps its encoding (a list stays a list, a JSON string a string).
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from textwm.config import ConfigCLI, ConfigError, option
from textwm.data.jsonl import DataError, read_jsonl, write_jsonl
from textwm.data.schema import parse_messages
from textwm.envs.appworld import agent, tools

_TOOL_BLOCK = re.compile(r"<\|tool\|>(.*?)<\|/tool\|>", re.DOTALL)
_TOOL_LINE = re.compile(r"^- ([A-Za-z_][\w]*__[\w]+)\(.*\)$")
_OLD_NAMES = re.compile(r"\b(" + "|".join(map(re.escape, tools.PAPER_NAME_MAP)) + r")\b")


@dataclass
class FixReport:
    rows: int = 0
    renamed: Counter = field(default_factory=Counter)
    params_renamed: Counter = field(default_factory=Counter)
    tool_lists: int = 0
    #: Tool names listed per row after the fix (the same as before for files already in the paper's names).
    listed: Counter = field(default_factory=Counter)

    def as_dict(self) -> dict[str, Any]:
        return {"rows": self.rows, "renamed": dict(self.renamed), "params_renamed": dict(self.params_renamed),
                "tool_lists_rebuilt": self.tool_lists, "distinct_tools_listed": len(self.listed)}


def rename(text: str, report: FixReport) -> str:
    def sub(m: re.Match) -> str:
        report.renamed[m.group(1)] += 1
        return tools.PAPER_NAME_MAP[m.group(1)]
    return _OLD_NAMES.sub(sub, text)


def _known(name: str, where: str) -> tools.Tool:
    tool = tools.catalog().get(name)
    if tool is None:
        raise DataError(f"{where}: {name!r} is no AppWorld API (and not one of the paper's old names)")
    return tool


def fix_system(text: str, where: str, report: FixReport) -> str:
    """Rebuild the tool lists of a system message (names already renamed)."""
    def block(m: re.Match) -> str:
        try:
            listed = json.loads(m.group(1))
        except json.JSONDecodeError as exc:
            raise DataError(f"{where}: the <|tool|> list is not JSON ({exc})") from None
        names = [t["name"] for t in listed]
        report.tool_lists += 1
        report.listed.update(names)
        return "<|tool|>" + json.dumps([_known(n, where).short_schema() for n in names]) + "<|/tool|>"

    text = _TOOL_BLOCK.sub(block, text)
    lines = text.split("\n")
    rebuilt = False
    for i, line in enumerate(lines):
        if m := _TOOL_LINE.match(line):
            lines[i] = f"- {_known(m.group(1), where).signature()}"
            report.listed[m.group(1)] += 1
            rebuilt = True
    report.tool_lists += rebuilt
    return "\n".join(lines)


def fix_call(content: str, report: FixReport) -> str:
    """Rename the parameters of an assistant turn's call (other replies are left as they are)."""
    call = agent.read_call(content)
    if call is None:
        return content
    renames = tools.PAPER_PARAM_RENAMES.get(call.name, {})
    if not any(k in call.arguments for k in renames):
        return content
    for old in renames:
        if old in call.arguments:
            report.params_renamed[f"{call.name}.{old}"] += 1
    args = {renames.get(k, k): v for k, v in call.arguments.items()}
    return json.dumps([{"name": call.name, "parameters": args}])


def fix_row(row: Mapping[str, Any], where: str, report: FixReport) -> dict[str, Any]:
    raw = row.get("messages")
    messages = [dict(m) for m in parse_messages(raw)]
    for i, m in enumerate(messages):
        content = rename(m["content"], report)
        if m["role"] == "system":
            content = fix_system(content, f"{where}, message {i + 1}", report)
        elif m["role"] == "assistant":
            content = fix_call(content, report)
        m["content"] = content
    out = dict(row)
    out["messages"] = json.dumps(messages, ensure_ascii=False) if isinstance(raw, str) else messages
    if isinstance(row.get("wm_system_prompt"), str):
        out["wm_system_prompt"] = rename(row["wm_system_prompt"], report)
    report.rows += 1
    return out


def fix_rows(rows: list[Mapping[str, Any]], source: str) -> tuple[list[dict[str, Any]], FixReport]:
    """Every row fixed (DataError naming ``source`` and the line at the first row that cannot be)."""
    report = FixReport()
    return [fix_row(r, f"{source}:{i + 1}", report) for i, r in enumerate(rows)], report


@dataclass(frozen=True)
class FixToolsConfig:
    """Fix the tool names and schemas of paper-format AppWorld rows (RL task rows or SFT demos)."""

    input: str = option(help="a paper-format JSONL file (appworld_rl_split*.jsonl, appworld_sft_*.jsonl)", positional=True)
    output: str = option("", "where the fixed rows go (default: --in-place)")
    in_place: bool = option(False, "rewrite INPUT itself (atomically, after every row was fixed)")

    def __post_init__(self) -> None:
        if bool(self.output) == self.in_place:
            raise ConfigError("give exactly one of --output FILE and --in-place")


def main(argv: list[str] | None = None, prog: str = "appworld/fix_tool_names_and_schemas.py") -> int:
    parsed = ConfigCLI(FixToolsConfig, prog=prog, description=FixToolsConfig.__doc__,
                       key_values=False).parse_or_report(list(sys.argv[1:] if argv is None else argv))
    if parsed is None:
        return 2
    config = parsed[0]
    try:
        rows, report = fix_rows(read_jsonl(config.input).rows, config.input)
        out = config.input if config.in_place else config.output
        write_jsonl(out, rows)
    except (ConfigError, DataError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({"output": out, **report.as_dict()}))
    return 0
