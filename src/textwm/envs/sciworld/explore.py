"""Exploratory episodes in the real env: what a world model must also learn beyond gold runs.

An episode follows the gold path for a random number of steps (to reach the states a task passes
through), then explores: valid actions sampled from the env's own list, navigation and looking,
and off-policy actions that the env rejects (absent objects, rooms that are not adjacent, verbs it
does not know) so the world model learns the failure messages. Focusing on an object other than
the gold target ends a ScienceWorld episode with -100, so off-gold focus actions are rare.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from dataclasses import dataclass

from textwm.envs.sciworld.env import SciWorldEnv
from textwm.envs.sciworld.tracker import EpisodeTracker
from textwm.envs.sciworld.world import ROOMS

ABSENT_OBJECTS = ("unicorn", "laptop", "garage", "umbrella", "piano", "telescope", "sandwich", "bicycle")
RANDOM_VERBS = ("jump", "smell", "push", "kick", "throw", "grab", "light", "cut", "fill", "heat", "drink", "wash")
_OBJECT_RE = re.compile(r"\ba (?:substance called )?([a-z][a-z ]{1,30}?)(?=[,.(\n]| which| on | in | containing|$)")


@dataclass(frozen=True)
class ExploreMix:
    """Probabilities of each kind of exploratory action (the rest: off-policy rejected actions)."""

    valid: float = 0.5
    navigate: float = 0.2
    look: float = 0.1
    #: Probability that a sampled valid action may be a focus action (they can end the episode).
    allow_focus: float = 0.05


def objects_in(text: str) -> list[str]:
    """Object names mentioned in a look-around text (best effort, for off-policy actions)."""
    names = {m.group(1).strip() for m in _OBJECT_RE.finditer(text)}
    return sorted(n for n in names if n not in ROOMS and not n.startswith(("door", "substance called")))


def off_policy_action(rng: random.Random, tracker: EpisodeTracker) -> str:
    present = objects_in(tracker.room_contents()) or ["table"]
    obj = rng.choice(present)
    absent = rng.choice(ABSENT_OBJECTS)
    return rng.choice([
        f"pick up {absent}", f"open {absent}", f"look at {absent}", f"{rng.choice(RANDOM_VERBS)} {obj}",
        f"go to {rng.choice(ROOMS)}", f"teleport to {absent}", f"move {absent} to {obj}", f"use {absent} on {obj}",
        f"activate {absent}", f"pour {absent} in {obj}", f"eat {obj}", f"read {obj}",
    ])


def exploratory_action(rng: random.Random, env: SciWorldEnv, tracker: EpisodeTracker, mix: ExploreMix) -> tuple[str, str]:
    """One exploratory action and its kind (``valid``, ``navigate``, ``look``, ``invalid``)."""
    r = rng.random()
    if r < mix.valid:
        actions = [a for a in env.valid_actions() if not a.startswith("focus on") or rng.random() < mix.allow_focus]
        if actions:
            return rng.choice(actions), "valid"
    if r < mix.valid + mix.navigate:
        return rng.choice([f"teleport to {rng.choice(ROOMS)}", f"go to {rng.choice(ROOMS)}"]), "navigate"
    if r < mix.valid + mix.navigate + mix.look:
        return rng.choice(["look around", "inventory", "look around", "wait1", "task"]), "look"
    return off_policy_action(rng, tracker), "invalid"


def episode_actions(rng: random.Random, env: SciWorldEnv, tracker: EpisodeTracker, gold: list[str], *,
                    explore_steps: int, mix: ExploreMix = ExploreMix()) -> Iterator[tuple[str, str]]:
    """Actions of one exploratory episode: a random gold prefix, then ``explore_steps`` exploratory ones.

    Yields ``(action, kind)``; the caller steps the env and updates ``tracker`` between yields.
    """
    prefix = rng.randint(0, max(0, len(gold) - 1)) if gold else 0
    for action in gold[:prefix]:
        yield action, "gold"
    for _ in range(explore_steps):
        yield exploratory_action(rng, env, tracker, mix)
