"""The steerable world-model prompt for ScienceWorld (the sections of the paper's prompts).

Three layouts (``Task.prompt_style``): ``full`` (the sections below, condensed; the default), ``compact`` (the
room, the inventory and the task only, one history step: small models on a CPU learn it in minutes, the full one
needs far more training) and ``paper`` (the paper's own query, byte for byte: :mod:`~textwm.envs.sciworld.paper_prompt`;
its state is the agent's whole conversation, so the query needs the agent's start messages).

``system`` = ENVIRONMENT STATE (current room and its contents, inventory, room connections),
TASK CONTEXT, DOMAIN RULES, STEERING DIRECTIVES and the PREDICTION TARGET; ``user`` =
``State: <recent history>\\n\\nAction: <action>`` (the layout the WM proxy builds). Everything comes
from an :class:`~textwm.envs.sciworld.tracker.EpisodeTracker`, so the dataset builder (real
episodes) and the simulator (simulated episodes) produce the same prompt for the same trajectory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from textwm.data.wm_message import wm_user_message
from textwm.envs.sciworld import paper_prompt
from textwm.envs.sciworld.tracker import HISTORY_STEPS, EpisodeTracker

DOMAIN_RULES = """\
- teleport to ROOM: "You teleport to the ROOM." go to ROOM works only through a door from here: "You move to the ROOM."
- look around: the room listing exactly as printed. pick up X (X here): "You move the X to the inventory."
- open / close / activate / deactivate X: "The X is now open." / "...closed." / "...activated." / "...deactivated."
- focus on X: "You focus on the X." wait / wait1: "You decide to wait for 10 / 1 iterations."
- Unknown verbs and absent objects: "No known action matches that input."
"""

STEERING = ("Use only the rooms, objects and substances ENVIRONMENT STATE lists. Answer with the observation "
            "text only, in the environment's exact wording and layout.")


PROMPT_STYLES = ("full", "compact", "paper")


def wm_system_prompt(tracker: EpisodeTracker, action: str, *, room_contents: str | None = None,
                     inventory: str | None = None) -> str:
    """The system prompt for answering ``action``.

    ``room_contents``/``inventory``: the true state when it is known (the dataset builder reads it
    from the real env at that step); by default the tracker's latest view (the simulator's case).
    Kept short on purpose: every token of it is paid at every step of training and simulation.
    """
    room = tracker.room
    room_contents = tracker.room_contents() if room_contents is None else room_contents
    inventory = tracker.inventory_text if inventory is None else inventory
    doors = ", ".join(tracker.task.connections.get(room, [])) or "none known"
    style = tracker.task.prompt_style
    if style == "paper":
        raise ValueError("the paper's WM prompt is written from the agent's conversation: use wm_query_texts")
    if style == "compact":
        return (f"ScienceWorld world model. Room: {room}. Doors to: {doors}. {inventory.strip()}\n"
                f"Task: {tracker.task.task_description}\nAnswer with the observation only.")
    if style != "full":
        raise ValueError(f"unknown WM prompt style {style!r}; use one of {', '.join(PROMPT_STYLES)}")
    return "\n".join([
        "## ENVIRONMENT STATE",
        f"ScienceWorld, 10 rooms. The agent is in the {room}. Task: {tracker.task.task_description}",
        f"Contents of the {room}:",
        room_contents.strip(),
        inventory.strip(),
        f"Doors from the {room} lead to: {doors}.",
        "## TASK CONTEXT",
        f"The agent acts with text commands. Action to answer: {action}",
        "## DOMAIN RULES",
        DOMAIN_RULES.rstrip(),
        "## STEERING DIRECTIVES",
        STEERING,
        f"PREDICTION TARGET: the observation the action '{action}' produces.",
    ])


def wm_state(tracker: EpisodeTracker) -> str:
    """The ``state`` of the WM query: the recent history (one step in the compact layout)."""
    return tracker.history_text(1 if tracker.task.prompt_style == "compact" else HISTORY_STEPS)


def wm_query_texts(tracker: EpisodeTracker, action: str, *, start_messages: Sequence[Mapping[str, Any]] = (),
                   room_contents: str | None = None, inventory: str | None = None) -> tuple[str, str, str]:
    """``(system prompt, state, action)`` of the WM query for ``action`` in the task's layout (the proxy writes the
    user message from state and action). ``start_messages``: the agent's system and first user message, which the
    paper's layout sends as the start of the state (required there; the others ignore them). ``room_contents`` /
    ``inventory``: the true state when known (:func:`wm_system_prompt`); the paper's layout reads the room from the
    baked map and the inventory from the episode's own ``pick up`` / ``put`` steps, as the paper's plugin does."""
    if tracker.task.prompt_style != "paper":
        return (wm_system_prompt(tracker, action, room_contents=room_contents, inventory=inventory),
                wm_state(tracker), action)
    if not start_messages:
        raise ValueError(f"{tracker.task.task_id}: the paper's WM prompt needs the agent's start messages")
    conversation = paper_prompt.conversation_of(start_messages, tracker.history, action)
    system = paper_prompt.system_prompt(paper_prompt.baked_prompt(tracker.task), conversation, action,
                                        paper_prompt.tracked_inventory(tracker.history))
    return system, paper_prompt.user_state(conversation), paper_prompt.user_action(action)


def wm_messages(tracker: EpisodeTracker, action: str, *, start_messages: Sequence[Mapping[str, Any]] = (),
                room_contents: str | None = None, inventory: str | None = None) -> list[dict[str, str]]:
    """The chat messages of a WM query (and, with the observation appended, of a training row)."""
    system, state, action_text = wm_query_texts(tracker, action, start_messages=start_messages,
                                                room_contents=room_contents, inventory=inventory)
    return [{"role": "system", "content": system}, {"role": "user", "content": wm_user_message(state, action_text)}]
