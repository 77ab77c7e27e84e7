"""A templated toy text world: transitions whose next observation follows from state + action.

Small enough that a 0.5M-parameter model learns it in a minute of CPU training, rich enough that
copying names from the state/action matters (EM rewards getting them right).
"""

import random

from tests.conftest import chat

ROOMS = ["kitchen", "hallway", "bedroom", "garden", "workshop", "bathroom", "attic", "cellar"]
OBJECTS = ["apple", "key", "book", "lamp", "cup", "coin", "knife", "shoe"]


def transitions(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        room, other, obj = rng.choice(ROOMS), rng.choice(ROOMS), rng.choice(OBJECTS)
        action, obs = rng.choice([
            ("look around", f"This is the {room}. You see a {obj}."),
            (f"go to {other}", f"You move to the {other}."),
            (f"pick up {obj}", f"You pick up the {obj}."),
            ("open door", "The door is now open."),
            ("inventory", f"You carry a {obj}."),
        ])
        state = f"You are in the {room}. You carry a {obj}."
        rows.append(chat(system="You are a world model.", user=f"State: {state}\n\nAction: {action}", answer=obs))
    return rows
