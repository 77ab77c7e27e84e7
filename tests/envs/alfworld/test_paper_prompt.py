"""The paper's ALFWorld world-model query, checked against a prompt written out by hand."""

import json

import pytest

from textwm.envs import wm_prompt as cli
from textwm.envs.alfworld import paper_prompt as pp

BAKED = """Task: clean some ladle and put it in cabinet.
Task type: pick_clean_then_place_in_recep
Goal predicates: target=ladle, destination=cabinet, needs_clean=true

## INITIAL SCENE
- cabinet 2 (closed)
- countertop 1 (open)
- sinkbasin 1 (open)

## INITIAL OBJECT LOCATIONS
- ladle 2: on countertop 1
- apple 1: on countertop 1"""


def turn(observation: str) -> dict:
    return {"role": "user", "content": f"Observation:\n{observation}\n\nAdmissible commands:\n- look"}


CONVERSATION = [
    {"role": "system", "content": "You are an agent in ALFWorld."},
    {"role": "user", "content": "Your task is to: clean some ladle and put it in cabinet."},
    {"role": "assistant", "content": "Action: go to countertop 1"},
    turn("You arrive at countertop 1. On the countertop 1, you see a apple 1, and a ladle 2."),
    {"role": "assistant", "content": "Action: take ladle 2 from countertop 1"},
    turn("You pick up the ladle 2 from the countertop 1."),
    {"role": "assistant", "content": "Action: go to sinkbasin 1"},
    turn("You arrive at sinkbasin 1. On the sinkbasin, you see nothing."),      # a WM that dropped the number
    {"role": "assistant", "content": "Action: clean ladle 2 with sinkbasin 1"},
    turn("You clean the ladle 2 using the sinkbasin 1."),
    {"role": "assistant", "content": "Action: go to cabinet 2"},
    turn("You arrive at cabinet 2. The cabinet 2 is closed."),
    {"role": "assistant", "content": "Action: open cabinet 2"},
]

#: Written by hand from the paper's builder: the state part; the rules block follows it, then the target.
EXPECTED_STATE = "\n".join([
    "## ENVIRONMENT STATE",
    pp.IDENTITY,
    "Task: clean some ladle and put it in cabinet.",
    "Task type: pick_clean_then_place_in_recep",
    "Goal predicates: target=ladle, destination=cabinet, needs_clean=true",
    "Current location: cabinet 2",
    "Inventory: ladle 2",
    "",
    "Receptacles in this room (all 1-indexed, lowercase):",
    "- cabinet 2: currently CLOSED \u2014 must be opened to take/place inside",
    "- countertop 1: OPEN (was closed; agent has opened it)",           # the paper's tag for a scene-open one
    "- sinkbasin 1: OPEN (was closed; agent has opened it)",
    "",
    "Known receptacle contents (pre-baked from initial scene walk + updates from this rollout's take/put events):",
    "  [countertop 1] apple 1",
    "  [sinkbasin 1] (empty)",
    "",
    "Object state modifiers acquired earlier in this rollout:",
    "- ladle 2: clean",
    "",
    "## TASK CONTEXT",
    pp.TASK_CONTEXT,
    "Active action (verbatim, lowercase): open cabinet 2",
    "",
    "",
])


def test_the_paper_query_of_a_fixed_state():
    system = pp.system_prompt(BAKED, CONVERSATION, "open cabinet 2")
    rules = pp.rules_text()
    assert system == EXPECTED_STATE + rules + ("PREDICTION TARGET: The single textworld feedback paragraph that the "
                                               "engine would print in response to the action `open cabinet 2` from "
                                               "the environment state above.")
    assert rules.startswith("## DOMAIN RULES\nResponse must match the template VERBATIM.")
    assert rules.endswith('- Prefix each item with "a " in listings (e.g. "a apple 1, a mug 2, and a pan 1").\n\n')
    assert len(rules.splitlines()) == 101 and "## STEERING DIRECTIVES\n" in rules


def test_the_state_follows_the_papers_reading_rules():
    state = pp.room_state(BAKED, [*CONVERSATION[:4], turn("You put the apple 1 in/on the cabinet 2."),
                                  turn("You close the cabinet 2."),
                                  turn("You arrive at countertop 1. On the countertop, you see a mug.")])
    assert state.contents["cabinet 2"] == ["apple 1"]          # put: added where it went
    assert state.tag("cabinet 2").startswith("currently CLOSED")
    assert "mug" in state.contents["countertop 1"]             # no numbered mug seen: kept as listed
    assert pp.listed("a apple 1, a mug 2, and a pan 1") == ["apple 1", "mug 2", "pan 1"]


def test_the_cli_prints_the_query(tmp_path, capsys):
    path = tmp_path / "step.json"
    path.write_text(json.dumps({"wm_system_prompt": BAKED, "messages": CONVERSATION, "action_text": "open cabinet 2"}))
    assert cli.main(["--env", "alfworld", "--format", "paper", "--step", str(path)]) == 0
    system, user = json.loads(capsys.readouterr().out)["messages"]
    assert system["content"] == pp.system_prompt(BAKED, CONVERSATION, "open cabinet 2")
    assert user["content"] == f"State: {json.dumps(CONVERSATION)}\n\nAction: open cabinet 2"


def test_the_simulator_queries_in_the_paper_layout(monkeypatch):
    """``ALFWORLD_WM_PROMPT=paper``: each query is the paper's for the episode's own conversation (the start
    messages, then ``Action: ...`` and the user message of every answered step), which travels with the episode."""
    from tests.envs.alfworld.conftest import make_scene
    from tests.eval.helpers import GoldWM
    from textwm.clients.wm import WMClient
    from textwm.envs.alfworld.sim import AlfWorldEpisode
    from textwm.envs.contract import TaskStart
    from textwm.envs.registry import get_env
    from textwm.envs.simulator import Simulator

    scene = make_scene()
    start_messages = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "Go."}]
    monkeypatch.setenv("ALFWORLD_WM_PROMPT", "paper")
    start = TaskStart(task_id="t", family="pick_heat_then_place_in_recep", messages=tuple(start_messages),
                      sim_task=scene)
    episode = get_env("alfworld").start_episode(start)
    assert episode.layout == "paper"
    wm = GoldWM([], fallback=lambda action: "Nothing happens.")
    try:
        sim = Simulator(WMClient(wm.url), use_local=False)
        actions = ["look", f"go to {scene.receptacles[0].name}", "inventory"]
        for action in actions:
            sim.step(episode, action)
            episode = AlfWorldEpisode.from_dict(json.loads(json.dumps(episode.to_dict())))
        queries = [body["input"] for method, _, body in wm.requests if method == "POST"]
    finally:
        wm.close()
    assert len(queries) == len(actions)
    for i, (q, action) in enumerate(zip(queries, actions)):
        conversation = json.loads(q["state"])
        assert conversation[:2] == start_messages and len(conversation) == 2 + 2 * i + 1
        assert conversation[-1] == {"role": "assistant", "content": f"Action: {action}"} and q["action"] == action
        assert q["system_prompt"] == pp.system_prompt(scene.wm_system_prompt(), conversation, action)
    monkeypatch.setenv("ALFWORLD_WM_PROMPT", "verbatim")
    with pytest.raises(ValueError, match="ALFWORLD_WM_PROMPT"):
        get_env("alfworld").start_episode(start)


@pytest.mark.slow
def test_a_paper_layout_build_writes_the_papers_query(games_root, tmp_path):
    """``--prompt-style paper``: each row is the paper's query at that step, its state the agent's conversation in
    the real game (the welcome turn and every answered turn, the real admissible commands included)."""
    pytest.importorskip("alfworld", reason="ALFWorld is in the [envs] extra")
    from textwm.data.wm_message import split_wm_user_message
    from textwm.envs.alfworld.build import AlfWorldBuildConfig
    from textwm.envs.build import build

    build("alfworld", AlfWorldBuildConfig(out_dir=str(tmp_path), games_dir=str(games_root), train_variations=1,
                                          dev_variations=0, test_variations=0, explore_episodes=1, explore_steps=4,
                                          workers=1, prompt_style="paper"))
    rows = [json.loads(x) for x in (tmp_path / "wm_train.jsonl").read_text().splitlines()]
    rl = {r["task_id"]: r for r in (json.loads(x) for x in (tmp_path / "rl_train.jsonl").read_text().splitlines())}
    assert rows and {r["source"] for r in rows} >= {"expert"}
    for row in rows:
        system, user, _ = (m["content"] for m in row["messages"])
        state, action = split_wm_user_message(user)
        conversation = json.loads(state)
        start = rl[row["task_id"]]["messages"]
        assert conversation[:2] == (json.loads(start) if isinstance(start, str) else start)
        assert len(conversation) == 2 + 2 * row["step"] + 1
        assert conversation[-1] == {"role": "assistant", "content": f"Action: {action}"}
        assert system == pp.system_prompt(rl[row["task_id"]]["wm_system_prompt"], conversation, action)
    # The rows' layout travels with their task: the simulator queries in it with no switch set.
    from textwm.envs.registry import get_env

    spec = get_env("alfworld")
    assert all(spec.start_episode(spec.load_row(r, need_sim=True)).layout == "paper" for r in rl.values())


def test_the_papers_lenient_reading_and_limits(monkeypatch):
    """``ALFWORLD_LENIENT_ACTIONS=1``: ``put X in Y``, ``take X`` with no source, class-only names read as the game's
    commands from the tracked state (off: the game's "Nothing happens."); the loop and nothing limits follow
    ``ALFWORLD_LOOP_LIMIT`` / ``ALFWORLD_NOTHING_LIMIT``."""
    from tests.envs.alfworld.conftest import make_scene
    from textwm.envs.alfworld import reward
    from textwm.envs.alfworld.lenient import canonical_action
    from textwm.envs.alfworld.sim import AlfWorldEpisode
    from textwm.envs.alfworld.tracker import Tracker

    scene = make_scene()
    start = next(r for r in scene.receptacles if any(w == r.name for w in scene.objects.values()))
    obj = next(o for o, where in scene.objects.items() if where == start.name)
    tracker = Tracker.start(scene)
    tracker.apply(f"go to {start.name}")
    cls = obj.rsplit(" ", 1)[0]
    assert canonical_action(tracker, f"take {cls}") == f"take {obj} from {start.name}"
    assert canonical_action(tracker, f"take the {obj}") == f"take {obj} from {start.name}"
    assert canonical_action(tracker, f"take {obj} from elsewhere 1") == f"take {obj} from elsewhere 1"  # not here
    tracker.apply(f"take {obj} from {start.name}")
    assert canonical_action(tracker, f"put {cls} in/on {start.name}") == f"move {obj} to {start.name}"
    assert canonical_action(tracker, f"put {obj}") == f"move {obj} to {start.name}"
    assert canonical_action(tracker, "look") == "look"

    strict, lenient = AlfWorldEpisode.start(scene), AlfWorldEpisode.start(scene, lenient=True)
    for episode in (strict, lenient):
        episode.observe(f"go to {start.name}", episode.local_answer(f"go to {start.name}"), "local")
    assert strict.local_answer(f"take {cls}") == "Nothing happens."
    assert lenient.local_answer(f"take {cls}") == f"You pick up the {obj} from the {start.name}."

    nothing = ["Nothing happens."] * 3
    assert not reward.episode_outcome(scene.goal, ["look", "inventory", "help"], nothing).done
    monkeypatch.setenv("ALFWORLD_NOTHING_LIMIT", "3")
    assert reward.episode_outcome(scene.goal, ["look", "inventory", "help"], nothing).reason == "stuck"
    monkeypatch.setenv("ALFWORLD_LOOP_LIMIT", "2")
    assert reward.loop_detected(["look", "look"])
    monkeypatch.setenv("ALFWORLD_LOOP_LIMIT", "x")
    with pytest.raises(ValueError, match="ALFWORLD_LOOP_LIMIT"):
        reward.loop_detected(["look"])
