"""Per-episode ScienceWorld state tracked from the trajectory alone (actions and observations).

The same tracker feeds the WM prompt (room contents, inventory, connections, recent history) when
the dataset is built from the real env and when the simulator queries the world model, so the
model is trained and queried on identical features. It is plain data (``to_dict``/``from_dict``)
so it can travel with an ms-swift request instead of living in a module-level dict.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from textwm.envs.sciworld.world import LOOK_ACTIONS, NO_MATCH, ROOMS, adjacency, normalize_action, room_of

#: Accepted actions that move the agent or time but change no object.
NON_MUTATING_VERBS = frozenset({"teleport", "go", "walk", "wait", "wait1", "task", "look", "inventory", "examine",
                                "read", "focus"})
#: How many past steps the WM sees as "State:" history.
HISTORY_STEPS = 2


@dataclass
class Task:
    """What the simulator knows about a task before it starts (all from the real env, at reset)."""

    task_id: str
    task_description: str
    #: Observation returned by reset (the start room's look-around at time 0).
    initial_observation: str
    initial_inventory: str
    #: Look-around text of every room at the start (visited by teleporting), for the WM prompt
    #: and for look-around answers in rooms that do not change by themselves.
    room_map: dict[str, str]
    simplification: str = "easy"
    #: Scoring goals from the gold run (:class:`textwm.envs.sciworld.reward.Goals` as a dict).
    goals: dict = field(default_factory=dict)
    #: Rooms whose start text is the same on every load (the others list objects in random order).
    stable_rooms: list[str] = field(default_factory=list)
    #: WM prompt layout (:data:`textwm.envs.sciworld.wm_prompt.PROMPT_STYLES`); it travels with the task so
    #: the simulator queries the world model exactly as its training rows were written.
    prompt_style: str = "full"
    #: Per room, the object names the parser accepted there at the start (both loads): the names a listing does
    #: not show ("common toad" for "a frog egg"). Empty in tasks baked before it was recorded.
    room_objects: dict[str, list[str]] = field(default_factory=dict)

    @property
    def connections(self) -> dict[str, list[str]]:
        return adjacency(self.room_map)

    @property
    def start_room(self) -> str:
        return room_of(self.initial_observation) or "unknown"


@dataclass
class EpisodeTracker:
    task: Task
    room: str = ""
    #: (action, observation) pairs, oldest first.
    history: list[tuple[str, str]] = field(default_factory=list)
    #: Latest look-around observation seen per room (real or simulated).
    last_look: dict[str, str] = field(default_factory=dict)
    inventory_text: str = ""
    ticks: int = 0
    #: Rooms in which an action changed something.
    changed_rooms: set[str] = field(default_factory=set)
    inventory_changed: bool = False
    doors_changed: bool = False

    def __post_init__(self) -> None:
        if not self.room:
            self.room = self.task.start_room
            self.last_look[self.room] = self.task.initial_observation
            self.inventory_text = self.task.initial_inventory

    # --- updates -----------------------------------------------------------------------------------

    def observe(self, action: str, observation: str) -> None:
        """Record one step (whoever produced the observation: the env, the responder or the WM)."""
        a = normalize_action(action)
        verb = a.split(" ", 1)[0] if a else ""
        self.history.append((action, observation))
        if observation == NO_MATCH or not a:
            return
        if a in LOOK_ACTIONS or verb in ("look", "inventory", "task", "examine", "read"):
            if observation.startswith(("This room is called", "This outside location is called")):
                self.last_look[room_of(observation) or self.room] = observation
            elif a == "inventory":
                self.inventory_text = observation
            return
        self.ticks += 10 if a == "wait" else 1
        for prefix in ("You teleport to the ", "You move to the ", "You move through the door to the "):
            if observation.startswith(prefix) and observation.endswith("."):
                room = observation[len(prefix):-1]
                if room in ROOMS:
                    self.room = room
        if verb not in NON_MUTATING_VERBS:
            self.changed_rooms.add(self.room)
            self.inventory_changed = True
            if "door" in a:
                self.doors_changed = True

    # --- views -------------------------------------------------------------------------------------

    def awaiting_choice(self) -> bool:
        """The env may be waiting for a choice number after "Ambiguous request: ...".

        Measured: "task" is answered while a choice is pending (the choice stays pending), and an
        input read as a bad choice answers "Unknown action. ...". Conservatively, the state counts as
        pending until an ordinary observation follows the prompt.
        """
        for _, observation in reversed(self.history):
            if observation.startswith("Task description:"):
                continue
            return observation.startswith(("Ambiguous request", "Unknown action"))
        return False

    def room_contents(self) -> str:
        """Best knowledge of the current room: the latest look seen here, else the start map."""
        return self.last_look.get(self.room) or self.task.room_map.get(self.room, "")

    def history_text(self, steps: int = HISTORY_STEPS) -> str:
        """The "State:" of the WM query: the last ``steps`` actions with their observations (at the
        start, the start observation). The task itself is in the WM system prompt."""
        lines = [self.task.initial_observation] if len(self.history) < steps else []
        for action, observation in self.history[-steps:]:
            lines.append(f"> {action}")
            lines.append(observation)
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["changed_rooms"] = sorted(self.changed_rooms)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EpisodeTracker:
        d = dict(d)
        d["task"] = Task(**d["task"])
        d["changed_rooms"] = set(d.get("changed_rooms", ()))
        d["history"] = [tuple(x) for x in d.get("history", ())]
        return cls(**d)
