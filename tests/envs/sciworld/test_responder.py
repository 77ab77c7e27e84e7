"""The local responder against the real env: every answer it gives must equal the env's."""

import dataclasses

import pytest

from textwm.envs.sciworld.responder import kind_words, respond
from textwm.envs.sciworld.tasks import bake_task
from textwm.envs.sciworld.tracker import EpisodeTracker
from textwm.envs.sciworld.world import NO_MATCH, adjacency, doors, normalize_action, room_of, target_room

PROBES = [
    # (action, must the responder answer?)
    ("look around", True), ("look around", True), ("inventory", True), ("task", True), ("jump around", True),
    ("smell the air", True), ("wait1", True), ("go to hallway", True), ("go to foundry", True),
    ("go to kitchen", True), ("look around", False), ("teleport to the living room", True), ("look around", True),
    ("Teleport  to BEDROOM", True), ("look around", True), ("look around", True), ("go to hallway", True),
    ("wait", True), ("pick up orange", False), ("inventory", False), ("teleport to kitchen", True),
    ("look around", False), ("open fridge", False), ("go to outside", True), ("teleport to workshop", True),
    ("look around", True), ("pick up battery", False), ("look around", False), ("open door to hallway", True),
    ("open door to kitchen", False), ("close door to hallway", False), ("open door to hallway", False),
]


def test_responder_agrees_with_the_env_on_every_rule(real_env):
    task = bake_task(real_env, "boil_v0")
    tracker = EpisodeTracker(task)
    for action, must_answer in PROBES:
        answer = respond(tracker, action)
        result = real_env.step(action)
        if must_answer:
            assert answer is not None, action
        if answer is not None:
            assert answer == result.observation, (action, answer, result.observation)
        tracker.observe(action, result.observation)


def test_no_answer_while_the_env_waits_for_a_choice(real_env):
    task = bake_task(real_env, "boil_v0")
    tracker = EpisodeTracker(task)
    tracker.observe("move thing to box", "Ambiguous request: Please enter the number ...\n0:\t...")
    assert respond(tracker, "wait1") is None
    assert respond(tracker, "0") is None
    tracker.observe("task", "Task description:\nYour task is to boil water.")  # answered, choice still pending
    assert respond(tracker, "teleport to kitchen") is None
    tracker.observe("teleport to kitchen", "Unknown action.  Type 'help' for a list of actions, ...")
    assert respond(tracker, "wait1") is None
    tracker.observe("0", "You move the thing to the box.")
    assert respond(tracker, "wait1") == "You decide to wait for 1 iterations."


def test_task_state_helpers():
    look = ("This room is called the kitchen. In it, you see: \n\tthe agent\nYou also see:\n\t"
            "A door to the bathroom (that is open)\n\tA door to the hallway (that is closed)")
    assert room_of(look) == "kitchen"
    assert doors(look) == {"bathroom": "open", "hallway": "closed"}
    assert adjacency({"kitchen": look}) == {"kitchen": ["bathroom", "hallway"]}
    assert normalize_action("  Teleport   to THE Kitchen ") == "teleport to the kitchen"
    assert target_room("teleport to the living room", "teleport") == "living room"
    assert target_room("go to stove", "go") is None


@pytest.mark.parametrize("action", ["", "   "])
def test_empty_actions_are_not_answered(real_env, action):
    task = bake_task(real_env, "boil_v0")
    assert respond(EpisodeTracker(task), action) is None
    assert NO_MATCH.endswith(".")


def test_a_look_that_named_another_room_does_not_break_the_next_look(real_env):
    """A world model may answer "look around" with another room than the one the tracker is in; the look is kept
    under the room it names, and the next look here falls to the other rules (it once raised KeyError)."""
    task = bake_task(real_env, "boil_v0")
    tracker = EpisodeTracker(task)
    tracker.observe("teleport to workshop", "You teleport to the workshop.")
    other = "bathroom" if task.start_room != "bathroom" else "bedroom"
    tracker.observe("look around", f"This room is called the {other}. In it, you see: \n\tthe agent")
    assert tracker.room == "workshop" and "workshop" not in tracker.last_look
    assert respond(tracker, "look around") == task.room_map["workshop"]   # the workshop as the real env shows it


@pytest.mark.slow
def test_a_focus_on_something_not_in_reach_is_refused_as_the_env_refuses_it(real_env):
    """The lifespan task's animals live outside: from the kitchen a focus on one is refused, outside on an absent
    one too; the listed ones, their hidden names ("common toad" for "a frog egg") and partial names go to the
    world model. Each refusal is checked against the real env."""
    task = bake_task(real_env, "find-living-thing_v248")
    tracker = EpisodeTracker(task)
    assert "common toad" in task.room_objects["outside"] and "common toad" not in task.room_map["outside"]
    for action in ["focus on crocodile", "focus on baby wolf", "FOCUS ON the Giant Tortoise"]:
        if respond(tracker, action) is not None:
            assert respond(tracker, action) == real_env.step(action).observation == NO_MATCH, action
    assert respond(tracker, "focus on crocodile") == NO_MATCH
    tracker.observe("teleport to outside", real_env.step("teleport to outside").observation)
    assert respond(tracker, "focus on crocodile") == real_env.step("focus on crocodile").observation == NO_MATCH
    assert respond(tracker, "focus on baby elephant") == NO_MATCH
    for action in ["focus on common toad", "focus on frog egg", "focus on giant tortoise", "focus on butterfly",
                   "focus on egg", "focus on kitchen", "focus on water"]:
        assert respond(tracker, action) is None, action
    # A task baked before the room's names were recorded: no claim.
    old = EpisodeTracker(dataclasses.replace(task, room_objects={}))
    assert respond(old, "focus on crocodile") is None
    assert kind_words("the baby brown bear") == {"brown", "bear"} and kind_words("an egg") == set()


def test_the_focus_rule_steps_back_where_unnamed_things_come_into_reach():
    """Opening a container here or changing the inventory puts things in reach no text has named (a freezer's
    ice): no answer then. "You move through the door to the X." moves the agent (the env's answer to "go to door")."""
    from textwm.envs.sciworld.tracker import Task

    kitchen = "This room is called the kitchen. In it, you see: \n\tthe agent\n\ta freezer. The freezer door is closed."
    outside = "This outside location is called the outside. Here you see: \n\tthe agent\n\ta fountain"
    task = Task(task_id="freeze_v0", task_description="Freeze water.", initial_observation=kitchen,
                initial_inventory="In your inventory, you see:\n\tnothing", room_map={"kitchen": kitchen,
                                                                                    "outside": outside},
                room_objects={"kitchen": ["agent", "freezer"], "outside": ["agent", "fountain"]})
    tracker = EpisodeTracker(task)
    assert respond(tracker, "focus on ice") == NO_MATCH
    tracker.observe("open freezer", "The freezer is now open.")
    assert respond(tracker, "focus on ice") is None
    tracker.observe("go to door", "You move through the door to the outside.")
    assert tracker.room == "outside" and respond(tracker, "focus on fountain") is None
    assert respond(tracker, "focus on ice") is None          # any change to the world may have changed the inventory


def test_a_focus_on_a_listed_object_at_the_start_is_answered_as_the_env_names_it():
    """In the start room while few ticks have passed (the start listing is the env's own), a focus whose words fit
    exactly one listed object is accepted with the listing's name; a fit to two objects, a substance, or more time
    passed: no answer (the world model's)."""
    from textwm.envs.sciworld.tracker import Task

    outside = ("This outside location is called the outside. Here you see: \n\tthe agent\n\ta substance called air\n"
               "\ta parrot egg\n\ta baby brown bear\n\ta brown bear egg\n\ta fire pit (containing nothing)\n"
               "\ta toilet. In the toilet is: a drain.\nYou also see:\n\tA door to the kitchen (that is open)")
    task = Task(task_id="lifespan-longest-lived_v0", task_description="Find the longest-lived animal.",
                initial_observation=outside, initial_inventory="In your inventory, you see:\n\tnothing",
                room_map={"outside": outside},
                room_objects={"outside": ["agent", "air", "egg parrot", "baby brown bear", "egg brown bear",
                                          "fire pit", "toilet"]})
    tracker = EpisodeTracker(task)
    assert respond(tracker, "focus on egg parrot") == "You focus on the parrot egg."
    assert respond(tracker, "focus on parrot") == "You focus on the parrot egg."
    assert respond(tracker, "focus on baby parrot") is None          # another life stage: the env may refuse it
    assert respond(tracker, "focus on fire pit") == "You focus on the fire pit."
    assert respond(tracker, "focus on toilet") == "You focus on the toilet."
    assert respond(tracker, "focus on brown bear") is None           # two listed objects fit
    assert respond(tracker, "focus on air") is None                  # a substance
    assert respond(tracker, "focus on crocodile") == NO_MATCH
    for _ in range(8):
        tracker.observe("wait1", "You decide to wait for 1 iterations.")
    assert respond(tracker, "focus on egg parrot") == "You focus on the parrot egg."   # names hold for a while
    tracker.observe("wait1", "You decide to wait for 1 iterations.")
    assert respond(tracker, "focus on egg parrot") is None           # then an egg may hatch
    tracker = EpisodeTracker(task)
    tracker.observe("teleport to kitchen", "You teleport to the kitchen.")
    assert respond(tracker, "focus on egg parrot") is None   # not the start room; and named at the start: not refused
    tracker = EpisodeTracker(task)
    tracker.observe("open door to kitchen", "The door is now open.")       # a door changes nothing in reach
    assert respond(tracker, "focus on egg parrot") == "You focus on the parrot egg."
