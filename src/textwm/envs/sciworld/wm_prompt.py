"""The steerable world-model prompt for ScienceWorld (the sections of the paper's prompts).

``system`` = ENVIRONMENT STATE (current room and its contents, inventory, room connections),
TASK CONTEXT, DOMAIN RULES, STEERING DIRECTIVES and the PREDICTION TARGET; ``user`` =
``State: <recent history>\\n\\nAction: <action>`` (the layout the WM proxy builds). Everything comes
from an :class:`~textwm.envs.sciworld.tracker.EpisodeTracker`, so the dataset builder (real
episodes) and the simulator (simulated episodes) produce the same prompt for the same trajectory.
"""

from __future__ import annotations

from textwm.envs.sciworld.tracker import EpisodeTracker

DOMAIN_RULES = """\
- "teleport to X" moves the agent to room X: "You teleport to the X."
- "go to X" works only through an open door to an adjacent room: "You move to the X."; a room that is
  not adjacent gives "No known action matches that input."; the current room gives "It's not clear how
  to get there from here."
- "look around" lists the current room exactly as the environment prints it.
- "pick up X" needs X in the current room: "You move the X to the inventory."
- "put down X" / "move X to Y": "You move the X to the Y."
- "open X" / "close X": "The X is now open." / "The X is now closed."
- "activate X" / "deactivate X": "The X is now activated." / "The X is now deactivated."
- "focus on X" submits X as the task's object: "You focus on the X."
- "wait" / "wait1": "You decide to wait for 10 iterations." / "You decide to wait for 1 iterations."
- Objects that are not present, and verbs the environment does not know: "No known action matches that input."
- Several objects matching a name: "Ambiguous request: ..." with a numbered list; a number picks one."""

STEERING = """\
- Ground every answer in the ENVIRONMENT STATE above: mention only rooms, objects and substances it lists.
- Answer with the observation text only: no explanation, no markdown, no JSON, no role tags.
- Keep the environment's exact wording and formatting (tabs and line breaks in room listings included)."""


def wm_system_prompt(tracker: EpisodeTracker, action: str, *, room_contents: str | None = None,
                     inventory: str | None = None) -> str:
    """The system prompt for answering ``action``.

    ``room_contents``/``inventory``: the true state when it is known (the dataset builder reads it
    from the real env at that step); by default the tracker's latest view (the simulator's case).
    """
    room = tracker.room
    room_contents = tracker.room_contents() if room_contents is None else room_contents
    inventory = tracker.inventory_text if inventory is None else inventory
    connections = "\n".join(f"- {r} connects to: {', '.join(n)}" for r, n in tracker.task.connections.items())
    return "\n".join([
        "## ENVIRONMENT STATE",
        "ScienceWorld, a text environment of science experiments in 10 rooms.",
        f"The agent is in: {room}.",
        f"Task: {tracker.task.task_description}",
        "",
        f"Contents of the {room}:",
        room_contents.strip(),
        "",
        "Agent's inventory:",
        inventory.strip(),
        "",
        "Room connections:",
        connections,
        "",
        "## TASK CONTEXT",
        "The agent navigates rooms, handles objects and runs experiments with plain-text commands.",
        f"The action to answer: {action}",
        "",
        "## DOMAIN RULES",
        DOMAIN_RULES,
        "",
        "## STEERING DIRECTIVES",
        STEERING,
        "",
        f"PREDICTION TARGET: the ScienceWorld observation produced by the action '{action}' in this state.",
    ])


def wm_user_message(tracker: EpisodeTracker, action: str) -> str:
    return f"State: {tracker.history_text()}\n\nAction: {action}"


def wm_messages(tracker: EpisodeTracker, action: str, *, room_contents: str | None = None,
                inventory: str | None = None) -> list[dict[str, str]]:
    """The chat messages of a WM query (and, with the observation appended, of a training row)."""
    return [{"role": "system", "content": wm_system_prompt(tracker, action, room_contents=room_contents,
                                                           inventory=inventory)},
            {"role": "user", "content": wm_user_message(tracker, action)}]
