"""The steerable world-model prompt for ScienceWorld (the sections of the paper's prompts).

Two layouts (``Task.prompt_style``): ``full`` (the sections below; the default) and ``compact`` (the
room, the inventory and the task only, one history step): small models on a CPU learn the compact
one in minutes, the full one needs far more training.

``system`` = ENVIRONMENT STATE (current room and its contents, inventory, room connections),
TASK CONTEXT, DOMAIN RULES, STEERING DIRECTIVES and the PREDICTION TARGET; ``user`` =
``State: <recent history>\\n\\nAction: <action>`` (the layout the WM proxy builds). Everything comes
from an :class:`~textwm.envs.sciworld.tracker.EpisodeTracker`, so the dataset builder (real
episodes) and the simulator (simulated episodes) produce the same prompt for the same trajectory.
"""

from __future__ import annotations

from textwm.data.wm_message import wm_user_message
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


PROMPT_STYLES = ("full", "compact")


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


def wm_messages(tracker: EpisodeTracker, action: str, *, room_contents: str | None = None,
                inventory: str | None = None) -> list[dict[str, str]]:
    """The chat messages of a WM query (and, with the observation appended, of a training row)."""
    return [{"role": "system", "content": wm_system_prompt(tracker, action, room_contents=room_contents,
                                                           inventory=inventory)},
            {"role": "user", "content": wm_user_message(wm_state(tracker), action)}]
