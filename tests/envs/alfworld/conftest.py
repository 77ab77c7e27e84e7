"""A small ALFWorld scene written by hand, and its real game (fast: a few receptacles, a handful of objects)."""

from __future__ import annotations

import pytest

from textwm.envs.alfworld.scene import Goal, Receptacle, Scene

pytest.importorskip("alfworld", reason="ALFWorld is in the [envs] extra")

ABILITIES = {"apple": ["pickupable", "cleanable", "heatable", "coolable", "sliceable"],
             "mug": ["pickupable", "cleanable", "heatable", "coolable"], "desklamp": ["toggleable"]}
CAN_CONTAIN = {r: ["apple", "mug"] for r in ("cabinet", "countertop", "fridge", "sinkbasin", "microwave", "sidetable")}
RECEPTACLES = [Receptacle("cabinet 1", True), Receptacle("cabinet 2", True, opened=True), Receptacle("countertop 1", False),
               Receptacle("fridge 1", True), Receptacle("sinkbasin 1", False), Receptacle("microwave 1", True),
               Receptacle("sidetable 1", False)]
OBJECTS = {"apple 1": "fridge 1", "apple 2": "countertop 1", "apple 3": "countertop 1", "mug 1": "cabinet 2",
           "desklamp 1": "sidetable 1"}
GOALS = {
    "pick_heat_then_place_in_recep": Goal("pick_heat_then_place_in_recep", "heat some apple and put it in cabinet",
                                          "apple", "cabinet"),
    "look_at_obj_in_light": Goal("look_at_obj_in_light", "look at mug under the desklamp", "mug", toggle="desklamp"),
    "pick_two_obj_and_place": Goal("pick_two_obj_and_place", "put two apple in sidetable", "apple", "sidetable"),
}


def make_scene(task_type: str = "pick_heat_then_place_in_recep") -> Scene:
    return Scene(GOALS[task_type], list(RECEPTACLES), dict(OBJECTS), {k: list(v) for k, v in ABILITIES.items()},
                 {k: list(v) for k, v in CAN_CONTAIN.items()}, floor_plan=1)


@pytest.fixture(scope="session")
def games_root(tmp_path_factory):
    """One game per task type of :data:`GOALS`, at ``<root>/train/<task type>/trial_0``."""
    from textwm.envs.alfworld.games import write_game

    root = tmp_path_factory.mktemp("alfworld_games")
    for task_type in GOALS:
        write_game(make_scene(task_type), root / "train" / task_type / "trial_0")
    return root


@pytest.fixture(scope="session")
def env(games_root):
    from textwm.envs.alfworld.env import AlfWorldEnv, AlfWorldSessionConfig

    session = AlfWorldEnv(AlfWorldSessionConfig(games_dir=[str(games_root)]))
    yield session
    session.close()
