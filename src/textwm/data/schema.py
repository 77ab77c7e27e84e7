"""The chat row schema shared by every stage.

A row is ``{"messages": [{"role": ..., "content": ...}, ...], ...extra fields}``. World-model
transitions are ``[system, user(state + action), assistant(next observation)]``; multi-turn rows
are allowed and the last assistant message is the target. Two encodings of ``messages`` occur in
the paper's released data and are both accepted: a JSON list, and a string holding that list.
A bare JSON array of messages (the SDAR/WeDLM training format) is accepted as a row too.

Validation returns a *normalised* row (``messages`` always a list) or raises
:class:`~textwm.data.jsonl.DataError` naming the offending field, e.g. ``messages[2].role``.
"""

from __future__ import annotations

import json
from typing import Any

from textwm.data.jsonl import DataError

#: Roles a message may have (OpenAI / ms-swift naming; LlamaFactory's "observation" is "tool").
ROLES = ("system", "user", "assistant", "tool")

Message = dict[str, Any]
Row = dict[str, Any]


def parse_messages(value: Any, *, field: str = "messages") -> list[Message]:
    """Decode and validate a ``messages`` value (a list, or a JSON string holding one).

    Every message must be an object with a ``role`` from :data:`ROLES` and a string ``content``;
    other keys (e.g. ms-swift's ``loss``) are kept.

    Raises:
        DataError: with ``field`` set to the exact place, e.g. ``messages[1].content``.
    """
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise DataError(f"is a string but not a JSON list of messages ({exc.msg} at column {exc.colno})",
                            field=field) from None
    if not isinstance(value, list):
        raise DataError(f"must be a list of messages, got {type(value).__name__}", field=field)
    if not value:
        raise DataError("is empty: a row needs at least one message", field=field)
    for i, msg in enumerate(value):
        where = f"{field}[{i}]"
        if not isinstance(msg, dict):
            raise DataError(f"must be an object with 'role' and 'content', got {type(msg).__name__}",
                            field=where)
        if "role" not in msg:
            raise DataError("missing 'role'", field=where)
        if msg["role"] not in ROLES:
            raise DataError(f"is {msg['role']!r}; expected one of {', '.join(ROLES)}", field=f"{where}.role")
        if "content" not in msg:
            raise DataError("missing 'content'", field=where)
        if not isinstance(msg["content"], str):
            raise DataError(f"must be a string, got {type(msg['content']).__name__}", field=f"{where}.content")
    return value


def validate_row(obj: Any, *, require_target: bool = False) -> Row:
    """Validate one chat row and return it with ``messages`` decoded to a list.

    Args:
        obj: a parsed JSONL line: an object with ``messages``, or a bare list of messages.
        require_target: the last message must be an assistant message (training and
            evaluation rows: it is what the model is asked to produce).

    Raises:
        DataError: the row is malformed (the field is named in the error).
    """
    if isinstance(obj, list):
        row: Row = {"messages": obj}
    elif isinstance(obj, dict):
        if "messages" not in obj:
            keys = ", ".join(sorted(obj)) or "none"
            raise DataError(f"row has no 'messages' field (fields present: {keys})", field="messages")
        row = dict(obj)
    else:
        raise DataError(f"row must be an object with 'messages' or a list of messages, got {type(obj).__name__}")
    row["messages"] = parse_messages(row["messages"])
    if require_target and row["messages"][-1]["role"] != "assistant":
        raise DataError(f"last message has role {row['messages'][-1]['role']!r}; a training/evaluation "
                        f"row must end with the assistant's target", field=f"messages[{len(row['messages']) - 1}].role")
    return row


def validate_target_row(obj: Any) -> Row:
    """:func:`validate_row` with ``require_target=True`` (usable as a ``read_jsonl`` validator)."""
    return validate_row(obj, require_target=True)


def split_prompt_target(row: Row) -> tuple[list[Message], str]:
    """Split a validated row into (prompt messages, target text): the last message is the target."""
    msgs = row["messages"]
    return msgs[:-1], msgs[-1]["content"]


def plain_messages(messages: list[Message]) -> list[dict[str, str]]:
    """Messages reduced to ``{"role", "content"}`` (the array formats carry nothing else)."""
    return [{"role": m["role"], "content": m["content"]} for m in messages]
