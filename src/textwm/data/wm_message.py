"""The world model's user message, ``State: <state>\\n\\nAction: <action>``: built and read in one place.

Every WM training row, the WM proxy's upstream request and the simulator's queries use this layout
(the paper's proxy builds it from the ``state`` and ``action`` of its payload), so a model is trained
and queried on the same text. :func:`wm_user_message` writes it; :func:`split_wm_user_message` reads
it back (the baselines and tests take rows apart with it).
"""

from __future__ import annotations

STATE_PREFIX = "State: "
ACTION_SEPARATOR = "\n\nAction: "


def wm_user_message(state: str, action: str) -> str:
    """``State: <state>\\n\\nAction: <action>``."""
    return f"{STATE_PREFIX}{state}{ACTION_SEPARATOR}{action}"


def split_wm_user_message(text: str) -> tuple[str, str]:
    """``(state, action)`` of a WM user message (the last ``Action:`` separator splits; a state may hold one).

    Raises:
        ValueError: ``text`` is not in the layout.
    """
    state, sep, action = text.rpartition(ACTION_SEPARATOR)
    if not sep or not state.startswith(STATE_PREFIX):
        raise ValueError(f"not a WM user message ('{STATE_PREFIX}...{ACTION_SEPARATOR!r}...'): {text[:80]!r}")
    return state[len(STATE_PREFIX):], action.strip()
