"""The paper's ALFWorld rows (written here by hand in their format): read as they are, their games rebuilt
with the row's first observation and admissible commands, bad rows refused naming file, line and field."""

from __future__ import annotations

import json

import pytest

from textwm.data.jsonl import DataError, read_jsonl
from textwm.envs import get_env
from textwm.envs.alfworld.agent import user_turn
from textwm.envs.alfworld.responder import respond
from textwm.envs.alfworld.rows import scene_from_row
from textwm.envs.alfworld.tracker import Tracker

PROMPT = """Task: put two mug in sidetable.
Task type: pick_two_obj_and_place
Goal predicates: target=mug, destination=sidetable, needs_two=true

## INITIAL SCENE
- cabinet 2 (closed)
- cabinet 1 (closed)
- countertop 1 (open)
- fridge 1 (open)
- sidetable 1 (open)

## INITIAL OBJECT LOCATIONS
- apple 2: in cabinet 2
- apple 1: on countertop 1
- mug 1: on countertop 1"""
WELCOME = ("-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly around you, you see "
           "a cabinet 2, a cabinet 1, a countertop 1, a fridge 1, and a sidetable 1.\n\n"
           "Your task is to: put two mug in sidetable.")
ADMISSIBLE = ["go to cabinet 1", "go to cabinet 2", "go to countertop 1", "go to fridge 1", "go to sidetable 1", "help",
              "inventory", "look"]


def paper_row(**changes):
    row = {"messages": [{"role": "system", "content": "You are an embodied agent ..."},
                        {"role": "user", "content": user_turn(WELCOME, ADMISSIBLE)}],
           "game_file": "/workspace/user/alfworld/data/json_2.1.1/train/pick_two_obj_and_place-Mug-None-SideTable-1/"
                        "trial_T20190101_000000_000001/game.tw-pddl",
           "split": "train", "task_type": "pick_two_obj_and_place", "target_obj": "mug", "destination": "sidetable",
           "mrecep": "", "toggle_target": "", "wm_system_prompt": PROMPT, "init_admissible": ADMISSIBLE,
           "expert_plan": ["look"]}
    row.update(changes)
    return row


def test_a_paper_row_is_read_as_it_is():
    start = get_env("alfworld").load_row(paper_row(), need_sim=True)
    assert start.task_id == "train/pick_two_obj_and_place-Mug-None-SideTable-1/trial_T20190101_000000_000001"
    assert start.family == "pick_two_obj_and_place" and len(start.messages) == 2
    scene = start.sim_task
    fridge = scene.receptacle("fridge 1")
    assert fridge.openable and fridge.opened and not fridge.contents_known  # open at the start: never read
    assert not scene.receptacle("countertop 1").openable and scene.receptacle("cabinet 2").closed
    assert scene.objects["mug 2"] == "fridge 1" and scene.notes  # the second mug the task needs, noted


def test_the_rebuilt_game_starts_as_the_row_says(tmp_path):
    from textwm.envs.alfworld.env import AlfWorldEnv, AlfWorldSessionConfig
    from textwm.envs.alfworld.gamebank import games_for_rows

    row = paper_row()
    start = get_env("alfworld").load_row(row, need_sim=True)
    found = games_for_rows([row], [start], tmp_path)
    assert found.sources == {start.task_id: "rebuilt"}
    env = AlfWorldEnv(AlfWorldSessionConfig(games_dir=found.roots))
    reset = env.reset(start.task_id)
    assert user_turn(reset.observation, reset.info["admissible_commands"]) == row["messages"][1]["content"]
    assert reset.info["admissible_commands"] == row["init_admissible"]
    tracker = Tracker.start(start.sim_task)
    assert respond(tracker, "go to countertop 1") == env.step("go to countertop 1").observation
    tracker.apply("go to countertop 1")
    assert respond(tracker, "go to fridge 1") is None  # what the open fridge holds is the world model's to say
    tracker.apply("go to fridge 1")
    tracker.learn("go to fridge 1", "You arrive at fridge 1. The fridge 1 is open. In it, you see a mug 2.")
    assert "take mug 2 from fridge 1" in tracker.admissible()
    env.close()


@pytest.mark.parametrize(("changes", "field"), [
    ({"wm_system_prompt": ""}, "wm_system_prompt"),
    ({"task_type": "pick_three"}, "task_type"),
    ({"target_obj": ""}, "target_obj"),
    ({"wm_system_prompt": PROMPT.replace("- fridge 1 (open)", "- fridge 1 (ajar)")}, "wm_system_prompt"),
    ({"wm_system_prompt": PROMPT.replace("on countertop 1", "on table 9")}, "wm_system_prompt"),
    ({"wm_system_prompt": PROMPT.replace("mug 1", "gizmo 1")}, "wm_system_prompt"),
    ({"game_file": None}, "task_id"),
    ({"sim_task": "{not json"}, "sim_task"),
])
def test_bad_rows_name_the_field(changes, field):
    with pytest.raises(DataError) as err:
        get_env("alfworld").load_row(paper_row(**changes), need_sim=True)
    assert err.value.field == field


def test_a_bad_row_in_a_file_names_file_and_line(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(paper_row()) + "\n" + json.dumps(paper_row(task_type="nope")) + "\n")
    spec = get_env("alfworld")
    with pytest.raises(DataError, match=r"rows\.jsonl:2: task_type"):
        read_jsonl(path, validate=lambda r: spec.load_row(r, need_sim=True))


def test_scene_round_trips_and_renders_the_paper_prompt():
    scene = scene_from_row(paper_row(), "train/x-1/t")
    again = type(scene).from_dict(json.loads(json.dumps(scene.to_dict())))
    assert again == scene
    # The rendered prompt keeps the paper's sections and wording (a fridge whose contents are unknown shows open).
    text = scene.wm_system_prompt()
    assert text.startswith("Task: put two mug in sidetable.\nTask type: pick_two_obj_and_place\n"
                           "Goal predicates: target=mug, destination=sidetable, needs_two=true")
    assert "- fridge 1 (open)" in text and "- apple 2: in cabinet 2" in text
