"""The paper's ScienceWorld world-model query, checked against a prompt written out by hand."""

import dataclasses
import json

import pytest

from textwm.envs import wm_prompt as cli
from textwm.envs.sciworld import paper_prompt as pp
from textwm.envs.sciworld.agent import start_messages
from textwm.envs.sciworld.sim import SciWorldEpisode
from textwm.envs.sciworld.tracker import Task

KITCHEN = ("This room is called the kitchen. In it, you see: \n\tthe agent\n\ta stove, which is turned off.\n"
           "You also see:\n\tA door to the outside (that is open)")
OUTSIDE = ("This outside location is called the outside. Here you see: \n\tthe agent\n\tan axe\n\ta baby wolf\n"
           "You also see:\n\tA door to the kitchen (that is open)")
TASK = Task(task_id="lifespan-longest-lived_v3", task_description="Your task is to find the longest-lived animal.",
            initial_observation=KITCHEN, initial_inventory="In your inventory, you see:\n\tan orange",
            room_map={"kitchen": KITCHEN, "outside": OUTSIDE}, prompt_style="paper")

#: Written by hand from the paper's builder (section order, rule texts, blank lines, no trailing newline): the
#: query for "look around" after the agent teleported outside and picked up the axe.
EXPECTED_SYSTEM = "\n".join([
    "## ENVIRONMENT STATE",
    "ScienceWorld is a text-based interactive science experiment environment with 10 rooms.",
    "The agent is currently in: outside.",
    "Task: Your task is to find the longest-lived animal.",
    "",
    "Visible objects in outside:",
    "This outside location is called the outside. Here you see: an axe a baby wolf You also see: A door to the "
    "kitchen (that is open)",
    "",
    "Agent's inventory: axe",
    "",
    "Room adjacency (for 'go to' validation):",
    *pp.ROOM_CONNECTIONS,
    "",
    "## TASK CONTEXT",
    "The agent navigates rooms, picks up objects, and performs science experiments.",
    "Actions are plain text commands like 'teleport to kitchen', 'pick up glass cup', 'focus on water'.",
    "The active action is: look around",
    "",
    "## DOMAIN RULES",
    "- 'teleport to X' always succeeds. Response: 'You teleport to the X.'",
    "- 'go to X' only works if X is adjacent to the current room. If not adjacent: 'No known action matches that "
    "input.'",
    "- 'look around' returns a plain text list of objects in the current room. Format: 'This room is called X. In "
    "it, you see: obj1, obj2, obj3. You also see: door to Y, door to Z.'",
    "- 'pick up X' works only if X is visible in the current room AND has not already been picked up. Response: "
    "'You move the X to the inventory.' If X is not present or already picked up: 'No known action matches that "
    "input.'",
    "- 'focus on X' works ONLY if X is explicitly listed in the current room description OR was previously picked "
    "up (in inventory). If X does NOT appear in the visible objects or inventory, respond: 'No known action matches "
    "that input.' NEVER confirm focus on an object that is not visibly present or in inventory \u2014 this is "
    "critical.",
    "- 'activate X' / 'deactivate X' works if X is in the current room. Response: 'The X is now "
    "activated/deactivated.'",
    "- 'put X in/on Y' works if X is in inventory. Response: 'You move the X to the Y.'",
    "- 'open X' / 'close X' works on doors and containers in the current room.",
    "- 'inventory' lists items the agent has picked up.",
    "- 'wait' / 'wait1' advances time. Response: '(1 tick passes)'",
    "- Invalid actions or objects not present: 'No known action matches that input.'",
    "- Items picked up earlier in the conversation are in inventory and no longer in their original room.",
    "",
    "## STEERING DIRECTIVES",
    "GROUNDING RULE: Your response MUST use ONLY objects, rooms, and substances that appear in the ENVIRONMENT "
    "STATE section above. Do NOT invent, hallucinate, or elaborate beyond what is listed. If the environment state "
    "lists 'a brick, a workbench', respond with EXACTLY those items \u2014 do not add tools, equipment, or "
    "descriptions that are not in the state.",
    "- For 'look around': copy the room description from the Visible objects section above VERBATIM. Do not add "
    "objects, do not elaborate, do not write prose. Just the object list.",
    "- For 'pick up X': check if X appears in the Visible objects. If yes: 'You move the X to the inventory.' If "
    "no: 'No known action matches that input.'",
    "- For 'focus on X': check Visible objects AND inventory. If X not found: 'No known action matches that "
    "input.'",
    "- Keep responses SHORT \u2014 one or two sentences maximum. Never write paragraphs, stories, or elaborate "
    "descriptions.",
    "- Output plain text only. No JSON, no markdown, no code, no arrays, no role tags.",
    "",
    "PREDICTION TARGET: The ScienceWorld observation text produced by the action 'look around' given the current "
    "environment state.",
])
STEPS = [("teleport to outside", "You teleport to the outside."), ("pick up axe", "You move the axe to the inventory.")]


def test_the_paper_query_of_a_fixed_state():
    conversation = pp.conversation_of(start_messages(TASK), STEPS, "look around")
    system = pp.system_prompt(pp.baked_prompt(TASK), conversation, "look around", pp.tracked_inventory(STEPS))
    assert system == EXPECTED_SYSTEM
    assert conversation[-1] == {"role": "assistant", "content": "look around"} and len(conversation) == 7
    assert pp.user_state(conversation) == json.dumps(conversation)       # ASCII escapes, ", " and ": "
    assert pp.user_action("look around") == '[{"role": "assistant", "content": "look around"}]'


def test_the_simulator_queries_in_the_paper_layout():
    episode = SciWorldEpisode.start(TASK, start_messages(TASK))
    for action, observation in STEPS:
        episode.observe(action, observation, "local")
    episode = SciWorldEpisode.from_dict(json.loads(json.dumps(episode.to_dict())))   # travels as plain data
    q = episode.wm_query("look around")
    assert q.system_prompt == EXPECTED_SYSTEM
    assert json.loads(q.state)[-1] == {"role": "assistant", "content": "look around"}
    assert json.loads(q.action) == [{"role": "assistant", "content": "look around"}]
    with pytest.raises(ValueError, match="start messages"):
        SciWorldEpisode.start(TASK).wm_query("look around")
    # The other layouts keep no conversation.
    assert SciWorldEpisode.start(dataclasses.replace(TASK, prompt_style="full"), start_messages(TASK)).start_messages == []


def test_the_sciworld_wm_prompt_override(monkeypatch):
    from textwm.envs.contract import TaskStart
    from textwm.envs.registry import get_env

    start = TaskStart(task_id=TASK.task_id, family="lifespan-longest-lived", messages=tuple(start_messages(TASK)),
                      sim_task=dataclasses.replace(TASK, prompt_style="full"))
    monkeypatch.setenv("SCIWORLD_WM_PROMPT", "paper")
    assert get_env("sciworld").start_episode(start).wm_query("look around").system_prompt.startswith(
        "## ENVIRONMENT STATE\nScienceWorld is a text-based")
    monkeypatch.setenv("SCIWORLD_WM_PROMPT", "fancy")
    with pytest.raises(ValueError, match="SCIWORLD_WM_PROMPT"):
        get_env("sciworld").start_episode(start)


def test_the_papers_own_answers(monkeypatch):
    from textwm.envs.contract import TaskStart
    from textwm.envs.registry import get_env

    def answer(action, steps=STEPS):
        return pp.paper_response(TASK, steps, action)

    assert answer("teleport to Green House") == "You teleport to the green house."     # any name: always succeeds
    assert answer("wait") == answer("wait1") == "(1 tick passes)"
    assert answer("inventory") == "In your inventory, you see: axe" and answer("inventory", []) == "Your inventory is empty."
    assert answer("focus on agent") == answer("focus on chameleon") == "No known action matches that input."
    assert answer("focus on baby wolf") is None and answer("focus on axe", []) is None    # named in the map: the WM's
    assert answer("look around") is None and answer("go to kitchen") is None
    start = TaskStart(task_id=TASK.task_id, family="lifespan-longest-lived", messages=tuple(start_messages(TASK)),
                      sim_task=TASK)
    assert get_env("sciworld").start_episode(start).local_answer("wait") != "(1 tick passes)"    # ours by default
    monkeypatch.setenv("SCIWORLD_PAPER_RESPONDER", "1")
    episode = get_env("sciworld").start_episode(start)
    episode = SciWorldEpisode.from_dict(json.loads(json.dumps(episode.to_dict())))
    assert episode.local_answer("wait") == "(1 tick passes)" and episode.local_answer("look around") is None


@pytest.mark.parametrize(("conversation", "room"), [
    ([{"role": "user", "content": "Task: t\n\nYou are in: This room is called the kitchen. ..."}], "kitchen"),
    ([{"role": "user", "content": "This room is called the kitchen."}, {"role": "assistant", "content": "go to x"},
      {"role": "user", "content": "You move to the hallway."}], "hallway"),
    ([{"role": "user", "content": "No known action matches that input."}], "unknown"),
])
def test_the_room_is_the_latest_one_the_conversation_names(conversation, room):
    assert pp.current_room(conversation) == room


def test_the_inventory_follows_pick_up_and_put():
    steps = [("pick up axe", "You move the axe to the inventory."), ("pick up cup", "No known action matches that input."),
             ("Pick Up Key", "You move the key to the inventory."), ("put axe in box", "You move the axe to the box.")]
    assert pp.tracked_inventory(steps) == {"key"}


def test_the_cli_prints_the_query(tmp_path, capsys):
    conversation = pp.conversation_of(start_messages(TASK), STEPS, "look around")
    step = {"system_prompt": pp.baked_prompt(TASK), "conversation_history": conversation, "action_text": "look around",
            "inventory": ["axe"]}
    path = tmp_path / "step.json"
    path.write_text(json.dumps(step))
    assert cli.main(["--env", "sciworld", "--format", "paper", "--step", str(path)]) == 0
    system, user = json.loads(capsys.readouterr().out)["messages"]
    assert system == {"role": "system", "content": EXPECTED_SYSTEM}
    assert user["content"] == f"State: {json.dumps(conversation)}\n\nAction: {pp.user_action('look around')}"
    path.write_text(json.dumps({"action_text": "look around"}))
    assert cli.main(["--env", "sciworld", "--format", "paper", "--step", str(path)]) == 2
    assert "no system_prompt, conversation_history" in capsys.readouterr().err
    assert cli.main(["--env", "appworld", "--format", "paper", "--step", str(path)]) == 2
    assert "no system_prompt, state, tool_name, tool_args" in capsys.readouterr().err
