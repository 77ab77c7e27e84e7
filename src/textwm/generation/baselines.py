"""Trivial world models that give every dataset its floor scores.

* ``copy_state``: predict that the observation equals the state shown to the model (persistence).
* ``action_lookup``: predict the observation most often seen after the same action text in the
  training rows (memorisation); unseen actions fall back to ``copy_state``.

A trained world model that does not beat both has learned nothing about the environment.
Rows are chat transitions whose user message is ``State: <state>\\n\\nAction: <action>`` (the
layout the WM proxy builds).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence

from textwm.data.jsonl import DataError
from textwm.data.schema import Row
from textwm.data.wm_message import split_wm_user_message


def state_and_action(row: Row) -> tuple[str, str]:
    """The state and action of a transition row (its last user message)."""
    users = [m["content"] for m in row["messages"] if m["role"] == "user"]
    if not users:
        raise DataError("row has no user message", field="messages")
    try:
        return split_wm_user_message(users[-1])
    except ValueError as exc:
        raise DataError(str(exc), field="messages") from None


def copy_state(rows: Sequence[Row]) -> list[str]:
    return [state_and_action(r)[0] for r in rows]


def action_lookup(train_rows: Sequence[Row], rows: Sequence[Row]) -> list[str]:
    seen: dict[str, Counter] = defaultdict(Counter)
    for r in train_rows:
        seen[state_and_action(r)[1].lower()][r["messages"][-1]["content"]] += 1
    predictions = []
    for r in rows:
        state, action = state_and_action(r)
        counts = seen.get(action.lower())
        predictions.append(counts.most_common(1)[0][0] if counts else state)
    return predictions


BASELINES = ("copy_state", "action_lookup")
