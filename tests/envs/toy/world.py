"""The toy house: a deterministic text game of three rooms and a few objects, the real env of the toy env.

Task ``toy_v<k>``: put the key in the box. Variation ``k`` decides where the key, the box and an apple
lie (so tasks differ but each one is the same on every load). Actions: ``look``, ``inventory``,
``go to ROOM``, ``take OBJ``, ``open box``, ``put OBJ in box``; anything else is not understood.
Score 1 and done when the key is in the box; done (score 0) after ``STEP_LIMIT`` moves.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from textwm.envs.protocol import BadRequest, ResetResult, StepResult

ROOMS = ("hall", "kitchen", "garden")
DOORS = {"hall": ("kitchen", "garden"), "kitchen": ("hall",), "garden": ("hall",)}
TASK = "Your task is to put the key in the box."
NOT_UNDERSTOOD = "I do not understand that."
WON = "You put the key in the box."
STEP_LIMIT = 50
VARIATIONS = {"train": list(range(0, 6)), "dev": [6], "test": [7, 8]}
VERBS = ("look", "inventory", "go", "take", "open", "put")


def parse_task_id(task_id: str) -> int:
    """``toy_v3`` -> 3 (BadRequest otherwise)."""
    prefix, _, number = task_id.partition("_v")
    if prefix != "toy" or not number.isdigit() or int(number) not in {v for vs in VARIATIONS.values() for v in vs}:
        raise BadRequest(f"task id {task_id!r} is not toy_v<k> with k in 0..8")
    return int(number)


def layout(variation: int) -> dict[str, list[str]]:
    """Objects per room at the start of ``toy_v<variation>``."""
    key_room = ROOMS[variation % 3]
    box_room = ROOMS[(variation // 3 + 1) % 3]
    rooms: dict[str, list[str]] = {room: [] for room in ROOMS}
    rooms[key_room].append("key")
    rooms[box_room].append("box")
    rooms[ROOMS[(variation + 2) % 3]].append("apple")
    return {room: sorted(objects) for room, objects in rooms.items()}


def look_text(room: str, objects: list[str], box_open: bool) -> str:
    seen = ", ".join(("an open box" if o == "box" and box_open else f"a {o}") for o in objects) or "nothing"
    return f"You are in the {room}. You see: {seen}. Exits: {', '.join(DOORS[room])}."


def inventory_text(items: list[str]) -> str:
    return f"You carry: {', '.join(items)}." if items else "You carry nothing."


@dataclass
class ToyHouse:
    """One game of the toy house: the env's :class:`~textwm.envs.protocol.EnvSession`."""

    room: str = "hall"
    objects: dict[str, list[str]] = field(default_factory=dict)
    items: list[str] = field(default_factory=list)
    box_open: bool = False
    moves: int = 0
    won: bool = False
    task_id: str = ""
    closed: bool = False

    def reset(self, task_id: str) -> ResetResult:
        variation = parse_task_id(task_id)
        self.room, self.objects, self.items, self.box_open = "hall", layout(variation), [], False
        self.moves, self.won, self.task_id = 0, False, task_id
        return ResetResult(observation=self.look(), task_description=TASK, info={"task_id": task_id})

    def look(self) -> str:
        return look_text(self.room, self.objects[self.room], self.box_open)

    def step(self, action: str) -> StepResult:
        if not self.task_id:
            raise BadRequest("reset() the toy house before stepping it")
        observation = self._answer(" ".join(action.lower().split()))
        score = 1.0 if self.won else 0.0
        return StepResult(observation=observation, reward=score if observation == WON else 0.0, score=score,
                          done=self.won or self.moves >= STEP_LIMIT, info={"moves": self.moves})

    def _answer(self, a: str) -> str:
        verb, _, rest = a.partition(" ")
        if a == "look":
            return self.look()
        if a == "inventory":
            return inventory_text(self.items)
        self.moves += 1
        here = self.objects[self.room]
        if verb == "go" and rest.startswith("to "):
            target = rest[3:]
            if target not in DOORS[self.room]:
                return "You cannot go there."
            self.room = target
            return f"You go to the {target}."
        if verb == "take":
            if rest in here and rest != "box":
                here.remove(rest)
                self.items.append(rest)
                return f"You take the {rest}."
            return f"There is no {rest} you can take here."
        if a == "open box":
            if "box" not in here:
                return "There is no box here."
            if self.box_open:
                return "The box is already open."
            self.box_open = True
            return "You open the box."
        if verb == "put" and rest.endswith(" in box"):
            obj = rest[: -len(" in box")]
            if obj not in self.items:
                return f"You do not have a {obj}."
            if "box" not in here or not self.box_open:
                return "There is no open box here."
            self.items.remove(obj)
            self.won = self.won or obj == "key"
            return f"You put the {obj} in the box."
        return NOT_UNDERSTOOD

    def valid_actions(self) -> list[str]:
        here = self.objects[self.room]
        actions = ["look", "inventory", *(f"go to {r}" for r in DOORS[self.room]),
                   *(f"take {o}" for o in here if o != "box"), *(f"put {o} in box" for o in self.items)]
        if "box" in here:
            actions.append("open box")
        return sorted(actions)

    def gold_actions(self) -> list[str]:
        """A shortest winning sequence from the current start (the game's planner)."""
        variation = parse_task_id(self.task_id)
        start = layout(variation)
        key_room = next(r for r, objs in start.items() if "key" in objs)
        box_room = next(r for r, objs in start.items() if "box" in objs)
        actions, room = [], "hall"
        for target in (key_room, box_room):
            if target != room:
                if target not in DOORS[room]:
                    actions.append("go to hall")
                actions.append(f"go to {target}")
                room = target
            if target == key_room:
                actions.append("take key")
        return [*actions, "open box", "put key in box"]

    def close(self) -> None:
        self.closed = True
