"""Agent SFT rows for the one trainer, which learns the last message of a row: one row per assistant turn of
each demo conversation (system, task, and every turn before it as the prompt; that turn as the answer). The
model then learns every action of a demo, each with the history the agent had when it chose it.

    rows = agent_turn_rows(read_jsonl("sft_train.jsonl"))
"""

from __future__ import annotations

from typing import Any

from textwm.data.jsonl import DataError, ReadReport


def agent_turn_rows(demos: ReadReport) -> list[dict[str, Any]]:
    """``{"messages": [...up to an assistant turn]}`` for every assistant turn of every demo, in file order.

    Raises :class:`DataError` naming the file and line of a demo without ``messages`` or without an
    assistant turn: a demo that teaches nothing is a broken file, not a row to skip."""
    rows = []
    for line, demo in zip(demos.line_numbers, demos.rows, strict=True):
        messages = demo.get("messages") if isinstance(demo, dict) else None
        if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m for m in messages):
            raise DataError("an agent demo needs a list of {role, content}", path=demos.path, line=line,
                            field="messages")
        turns = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
        if not turns:
            raise DataError("the demo has no assistant turn to learn", path=demos.path, line=line, field="messages")
        rows += [{"messages": messages[:i + 1]} for i in turns]
    return rows
