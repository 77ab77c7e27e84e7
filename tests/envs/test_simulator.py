"""The Simulator with a real loopback WM proxy (scripted) and the ScienceWorld episode."""

import pytest

from tests.serving.scripted_http import ScriptedServer
from textwm.clients.retry import RetryPolicy
from textwm.clients.wm import WMClient
from textwm.envs import get_env
from textwm.envs.contract import EnvSpec
from textwm.envs.sciworld.sim import SciWorldEpisode
from textwm.envs.sciworld.tracker import Task
from textwm.envs.simulator import LOCAL, WM, Simulator, guard_enabled

LOOK = ("This room is called the hallway. In it, you see: \n\tthe agent\n\ta picture\nYou also see:\n\t"
        "A door to the kitchen (that is open)")
KITCHEN = ("This room is called the kitchen. In it, you see: \n\tthe agent\n\ta stove\nYou also see:\n\t"
           "A door to the hallway (that is open)")
TASK = Task(task_id="boil_v0", task_description="Your task is to boil water.", initial_observation=LOOK,
            initial_inventory="In your inventory, you see:\n\tan orange", room_map={"hallway": LOOK, "kitchen": KITCHEN},
            goals={"milestones": [["you focus on the water.", 70.0]], "focus_targets": ["water"]})


@pytest.fixture
def wm_proxy():
    def respond(method, path, body):
        action = body["input"]["action"]
        assert "## ENVIRONMENT STATE" in body["input"]["system_prompt"]
        assert "> teleport to kitchen\nYou teleport to the kitchen." in body["input"]["state"]  # recent history
        return 200, {"generated_text": f"<think>x</think>The {action.split()[-1]} is now open."}, 0
    server = ScriptedServer(respond)
    yield server
    server.close()


def test_local_answers_first_then_the_world_model(wm_proxy):
    sim = Simulator(WMClient(wm_proxy.url, retry=RetryPolicy(max_retries=0)))
    ep = SciWorldEpisode.start(TASK)
    assert sim.step(ep, "look around").source == LOCAL
    assert sim.step(ep, "teleport to kitchen").observation == "You teleport to the kitchen."
    step = sim.step(ep, "open fridge")
    assert (step.observation, step.source) == ("The fridge is now open.", WM)
    assert ep.sources == [LOCAL, LOCAL, WM] and sim.stats.as_dict() == {"local": 2, "wm": 1, "fallback": 0, "anchored": 0,
                                                                "wm_errors": 0}
    assert len(wm_proxy.requests) == 1
    ep2 = SciWorldEpisode.from_dict(ep.to_dict())
    assert ep2.tracker.room == "kitchen" and ep2.sources == ep.sources


def test_guard_off_sends_everything_to_the_world_model(wm_proxy, monkeypatch):
    monkeypatch.setenv("SCIWORLD_WM_GUARD", "0")
    sim = Simulator(WMClient(wm_proxy.url), use_local=guard_enabled("SCIWORLD_WM_GUARD"))
    ep = SciWorldEpisode.start(TASK)
    ep.observe("teleport to kitchen", "You teleport to the kitchen.", LOCAL)
    assert sim.step(ep, "look around").source == WM
    monkeypatch.setenv("SCIWORLD_WM_GUARD", "maybe")
    with pytest.raises(ValueError, match="SCIWORLD_WM_GUARD"):
        guard_enabled("SCIWORLD_WM_GUARD")


def test_a_world_model_failure_is_an_error_not_an_observation():
    sim = Simulator(WMClient("http://127.0.0.1:9", retry=RetryPolicy(max_retries=1, backoff_s=0.01)))
    ep = SciWorldEpisode.start(TASK)
    step = sim.step(ep, "open fridge")
    assert step.observation is None and "WMUnavailable" in step.error
    assert sim.stats.wm_errors == 1 and ep.actions == []  # nothing was made up or recorded
    assert sim.step(ep, "wait1").source == LOCAL            # the responder still works
    with pytest.raises(ValueError, match="needs the local responder"):
        Simulator(None, use_local=False)


def test_sciworld_fallback_observations_are_the_papers():
    """With ``on_wm_error="fallback"`` a failed answer gets the paper's substitutes: a look the room's known
    listing, ``go to X`` a move, anything else a no-match."""
    sim = Simulator(WMClient("http://127.0.0.1:9", retry=RetryPolicy(max_retries=0)), use_local=False,
                    on_wm_error="fallback")
    ep = SciWorldEpisode.start(TASK)
    assert sim.step(ep, "look around").observation == ep.tracker.room_contents()
    assert sim.step(ep, "go to hallway").observation == "You move to the hallway."
    assert sim.step(ep, "open fridge").observation == "No known action matches that input."
    assert ep.sources == ["fallback"] * 3 and sim.stats.fallback == sim.stats.wm_errors == 3


def test_the_prompt_style_travels_with_the_task():
    import dataclasses

    from textwm.envs.sciworld.tracker import EpisodeTracker
    from textwm.envs.sciworld.wm_prompt import wm_messages

    compact = dataclasses.replace(TASK, prompt_style="compact")
    ep = SciWorldEpisode.start(compact)
    ep.observe("look around", LOOK, LOCAL)
    ep.observe("teleport to kitchen", "You teleport to the kitchen.", LOCAL)
    q = ep.wm_query("open fridge")
    system, user = (m["content"] for m in wm_messages(ep.tracker, "open fridge"))
    assert q.system_prompt == system and system.startswith("ScienceWorld world model. Room: kitchen.")
    assert user == f"State: {q.state}\n\nAction: open fridge"       # what the proxy rebuilds = the training row
    assert q.state == "> teleport to kitchen\nYou teleport to the kitchen."  # one history step
    full = SciWorldEpisode.start(TASK).wm_query("open fridge")
    assert full.system_prompt.startswith("## ENVIRONMENT STATE")
    bad = EpisodeTracker(dataclasses.replace(TASK, prompt_style="tiny"))
    with pytest.raises(ValueError, match="unknown WM prompt style"):
        wm_messages(bad, "look")


def test_a_look_the_responder_cannot_answer_goes_as_a_template_of_the_known_lines(monkeypatch):
    from textwm.envs import get_env
    from textwm.envs.sciworld.responder import LISTING_TOKENS
    from textwm.envs.simulator import anchors_enabled

    ep = SciWorldEpisode.start(TASK)
    ep.observe("teleport to kitchen", "You teleport to the kitchen.", LOCAL)
    assert ep.local_answer("look around") is None                        # the kitchen's contents change
    assert ep.known_frame("look around") == [
        "This room is called the kitchen. In it, you see: \n", {"fill": LISTING_TOKENS},
        "\nYou also see:\n\tA door to the hallway (that is open)"]
    assert ep.known_frame("open fridge") is None
    spec = get_env("sciworld")
    assert not anchors_enabled(spec.anchors_env)                         # off by default
    monkeypatch.setenv("SCIWORLD_WM_ANCHORS", "1")
    assert anchors_enabled(spec.anchors_env)
    assert not anchors_enabled(EnvSpec.anchors_env)                       # an env without frames: never


def test_the_simulator_sends_the_frame_only_when_anchors_are_on():
    from textwm.envs.sciworld.responder import LISTING_TOKENS

    seen = []

    def respond(method, path, body):
        seen.append(body["input"].get("response_template"))
        return 200, {"generated_text": "This room is called the kitchen. In it, you see: \n\tthe agent\nYou also see:"
                                        "\n\tA door to the hallway (that is open)"}, 0
    server = ScriptedServer(respond)
    try:
        for anchors in (False, True):
            sim = Simulator(WMClient(server.url + "/", retry=RetryPolicy(max_retries=0)), anchors=anchors)
            ep = SciWorldEpisode.start(TASK)
            sim.step(ep, "teleport to kitchen")
            step = sim.step(ep, "look around")
            assert step.source == WM and step.anchored == anchors and sim.stats.anchored == int(anchors)
    finally:
        server.close()
    # The whitespace that ended the known text goes to the slot, with its word (anchors.words_first).
    assert seen[0] is None and seen[1][:2] == ["This room is called the kitchen. In it, you see:",
                                               {"fill": LISTING_TOKENS + 1}]


def test_sciworlds_frame_read_off_a_look():
    look = ("This room is called the kitchen. In it, you see: \n\tthe agent\n\ta stove\nYou also see:\n\t"
            "A door to the hallway (that is open)")
    assert get_env("sciworld").observed_frame(look) == [
        (False, "This room is called the kitchen. In it, you see: \n"), (True, "\tthe agent\n\ta stove"),
        (False, "\nYou also see:\n\tA door to the hallway (that is open)")]
    assert get_env("sciworld").observed_frame("You move to the kitchen.") is None


def test_whitespace_before_a_slot_goes_to_the_slot():
    """A BPE tokenizer writes a space with the word after it: fixed text ending in one would be a token split the
    model never saw."""
    from textwm.generation.anchors import words_first

    assert words_first(["On the desk 1, you see ", {"fill": 64}, "."]) == ["On the desk 1, you see", {"fill": 65}, "."]
    assert words_first(['{"a": ', {"fill": 8}, ', "b": ', {}, "}"]) == ['{"a":', {"fill": 9}, ', "b":', {}, "}"]
    assert words_first([" ", {"fill": 2}, " end"]) == [{"fill": 3}, " end"]
    assert words_first(["[", {"fill": 5}, "]"]) == ["[", {"fill": 5}, "]"]
