"""The generic ms-swift scheduler/reward over the ScienceWorld adapter, driven hook by hook as ms-swift does.

A hand-made two-room task; the world model is a real loopback port (nothing listening, or a scripted
HTTP server). ms-swift's own request/choice types are used, so the hooks see what a real run passes.
"""

from __future__ import annotations

import asyncio
import json
import socket

import pytest

from tests.serving.scripted_http import ScriptedServer
from textwm.envs import get_env
from textwm.envs.contract import Outcome
from textwm.envs.episode import FEEDBACK
from textwm.envs.sciworld.agent import rl_row
from textwm.envs.sciworld.tracker import Task
from textwm.rl.swift_adapters import STATE_KEY, WMSettings, make_reward_class, make_scheduler_class
from textwm.rl.trajectory_log import TrajectoryLog, trajectory_log_path

protocol = pytest.importorskip("swift.infer_engine.protocol", reason="ms-swift is in the [rl] extra")
SPEC = get_env("sciworld")

KITCHEN = ("This room is called the kitchen. In it, you see: \n\tthe agent\n\ta substance called air\n"
           "\ta stove, which is turned off. On the stove is: nothing.\n\ta sink, which is turned off. In the sink "
           "is: nothing.\nYou also see:\n\tA door to the hallway (that is open)")
HALLWAY = ("This room is called the hallway. In it, you see: \n\tthe agent\n\ta substance called air\n\ta painting\n"
           "You also see:\n\tA door to the kitchen (that is open)")
TASK = Task(task_id="boil_v0", task_description="Your task is to boil water. First, focus on the substance.",
            initial_observation=KITCHEN, initial_inventory="In your inventory, you see:\n\tan orange\n",
            room_map={"kitchen": KITCHEN, "hallway": HALLWAY},
            goals={"milestones": [["you focus on the water.", 70.0], ["the water boils.", 100.0]],
                   "focus_targets": ["water"]},
            stable_rooms=["hallway", "kitchen"])


def dead_url() -> str:
    """A loopback URL with nothing listening (connection refused at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/"


@pytest.fixture
def wm_env(monkeypatch):
    """Point the scheduler at a WM; returns a setter. Default: a dead port, one retry."""
    def point(url: str) -> None:
        monkeypatch.setenv("WM_ENDPOINT", url)
    monkeypatch.setenv("WM_MAX_RETRIES", "1")
    monkeypatch.setenv("WM_TIMEOUT_S", "5")
    monkeypatch.delenv("SCIWORLD_WM_GUARD", raising=False)
    point(dead_url())
    return point


@pytest.fixture(scope="module")
def scheduler_cls():
    return make_scheduler_class("sciworld")


def request_for(row: dict):
    """What ms-swift builds from a dataset row under a multi-turn scheduler (extra columns -> data_dict)."""
    extra = {k: v for k, v in row.items() if k != "messages"}
    return protocol.RolloutInferRequest(messages=[dict(m) for m in row["messages"]], data_dict=extra, uuid="r0")


def choice(text: str, finish_reason: str = "length"):
    return protocol.ChatCompletionResponseChoice(index=0, message=protocol.ChatMessage(role="assistant", content=text),
                                                 finish_reason=finish_reason)


def play(scheduler, request, reply: str, turn: int, finish_reason: str = "length") -> dict:
    """One turn as ``run_multi_turn`` does it: append the reply, on_turn_end, check_finished, step."""
    request.messages.append({"role": "assistant", "content": reply})
    c = choice(reply, finish_reason)
    result = asyncio.run(scheduler.on_turn_end(request, c, turn))
    assert scheduler.check_finished(request, c, turn) == result["done"]
    if not result["done"]:
        scheduler.step(request, c, turn)
    return result


def started(scheduler_cls, row=None, max_turns=10):
    scheduler = scheduler_cls(max_turns=max_turns, tokenizer=None, template=None)
    request = request_for(row or rl_row(TASK))
    asyncio.run(scheduler.on_trajectory_start([request]))
    return scheduler, request


def test_episode_state_travels_with_the_request(wm_env, scheduler_cls):
    scheduler, request = started(scheduler_cls)
    r = play(scheduler, request, "teleport to hallway", 1, finish_reason="length")  # a cut reply does not end it
    assert not r["done"] and r["rollout_infos"]["sources"] == ["local"]
    assert request.messages[-1] == {"role": "user", "content": "You teleport to the hallway."}
    state = request.data_dict[STATE_KEY]
    assert json.dumps(state) and state["episode"]["tracker"]["room"] == "hallway"  # plain JSON
    # The state is plain JSON inside the request: a copy continues on a fresh scheduler (another process).
    copy = protocol.RolloutInferRequest(messages=json.loads(json.dumps(request.messages)),
                                        data_dict=json.loads(json.dumps(request.data_dict)), uuid="r0")
    other = scheduler_cls(max_turns=10)
    r = play(other, copy, "look around", 2)
    assert copy.messages[-1]["content"] == HALLWAY  # the tracker knew it was in the hallway
    assert r["rollout_infos"]["actions"] == ["teleport to hallway", "look around"]
    # Nothing per request stays on the scheduler: its containers are empty, only counters moved.
    for obj in (scheduler, scheduler.driver, other, other.driver):
        assert not [k for k, v in vars(obj).items() if isinstance(v, (dict, list, set)) and v], vars(obj)
    assert other.counters.turns == 1 and scheduler.counters.turns == 1


def test_unparseable_replies_get_a_hint_then_end_the_episode(wm_env, scheduler_cls):
    scheduler, request = started(scheduler_cls)
    for turn, reply in enumerate(["", "```\nlook around\n```"], start=1):
        r = play(scheduler, request, reply, turn)
        assert not r["done"]
        assert request.messages[-1] == {"role": "user", "content": SPEC.invalid_reply_hint}
    r = play(scheduler, request, "   ", 3)
    infos = r["rollout_infos"]
    assert r["done"] and infos["end_reason"] == "unparseable_streak" and infos["unparseable"] == 3
    assert infos["sources"] == [FEEDBACK] * 3 and infos["actions"] == [None] * 3
    assert scheduler.counters.unparseable == 3 and scheduler.counters.episodes == 1
    assert SPEC.reward(Outcome.from_dict(infos["outcome"])) == pytest.approx(-0.1)


def test_repeated_action_ends_the_episode(wm_env, scheduler_cls):
    scheduler, request = started(scheduler_cls)
    results = [play(scheduler, request, "teleport to kitchen", turn) for turn in (1, 2, 3)]  # waits are exempt
    assert [r["done"] for r in results] == [False, False, True]
    assert results[-1]["rollout_infos"]["end_reason"] == "repeat"
    assert request.messages[-1]["role"] == "assistant"  # no observation after the end


def test_wm_down_ends_the_episode_marked_wm_error(wm_env, scheduler_cls, caplog):
    scheduler, request = started(scheduler_cls)
    play(scheduler, request, "teleport to kitchen", 1)          # local
    n_messages = len(request.messages)
    r = play(scheduler, request, "focus on water", 2)             # needs the WM, which is down
    infos = r["rollout_infos"]
    assert r["done"] and infos["wm_error"] and infos["end_reason"] == "wm_error"
    assert "unavailable after 2 attempts" in infos["wm_error_message"]
    assert infos["observations"] == ["You teleport to the kitchen.", None] and infos["sources"] == ["local", None]
    assert len(request.messages) == n_messages + 1                # the reply, and no made-up observation
    assert scheduler.counters.wm_errors == 1
    assert "world model failed" in caplog.text and "1 WM failures" in caplog.text
    # Rewarded as the trajectory so far: nothing scored yet.
    assert infos["outcome"] == {"done": False, "reason": None, "score": 0.0}
    assert SPEC.reward(Outcome.from_dict(infos["outcome"])) == 0.0


def test_wm_answers_and_busy_wm_is_retried(wm_env, scheduler_cls):
    calls = []

    def respond(method, path, body):
        calls.append(body)
        if len(calls) == 1:
            return 503, {"error": "queue full"}, 0
        return 200, {"generated_text": "You focus on the water.", "usage": {}}, 0
    server = ScriptedServer(respond)
    try:
        wm_env(server.url + "/")
        scheduler, request = started(scheduler_cls)
        r = play(scheduler, request, "focus on water", 1)
    finally:
        server.close()
    infos = r["rollout_infos"]
    assert len(calls) == 2 and calls[-1]["input"]["action"] == "focus on water"
    assert not r["done"] and infos["sources"] == ["wm"] and not infos["wm_error"]
    assert infos["outcome"]["score"] == 70.0 and request.messages[-1]["content"] == "You focus on the water."
    # The time answering took is recorded with the episode: one world-model step, its retry included.
    timing = infos["timing"]
    assert timing["wm_steps"] == 1 and 0 < timing["wm_seconds"] <= timing["answer_seconds"]


def test_guard_off_sends_every_step_to_the_wm(wm_env, scheduler_cls, monkeypatch):
    monkeypatch.setenv("SCIWORLD_WM_GUARD", "0")
    scheduler, request = started(scheduler_cls)
    r = play(scheduler, request, "teleport to hallway", 1)   # the responder would know; the (dead) WM is asked
    assert r["done"] and r["rollout_infos"]["wm_error"]


def test_turn_limits(wm_env, scheduler_cls):
    scheduler, request = started(scheduler_cls, max_turns=2)
    assert not play(scheduler, request, "teleport to hallway", 1)["done"]
    r = play(scheduler, request, "teleport to kitchen", 2)
    assert r["done"] and r["rollout_infos"]["end_reason"] == "max_turns"
    # A row's own max_turns, when smaller, wins.
    scheduler, request = started(scheduler_cls, row=rl_row(TASK, max_turns=1), max_turns=50)
    assert play(scheduler, request, "look around", 1)["rollout_infos"]["end_reason"] == "max_turns"


def test_paper_rows_whose_start_state_cannot_be_built_are_refused_by_name(wm_env, scheduler_cls):
    """A released row (no sim_task) is completed from the real env on first use (tests/rl/test_sciworld_paper_rows.py);
    one whose task the env does not have is an error naming the task, before any JVM starts."""
    row = {k: v for k, v in rl_row(TASK).items() if k != "sim_task"}
    row["task_id"] = "boil_v9999"
    row["messages"] = json.dumps(row["messages"])
    scheduler = scheduler_cls(max_turns=5)
    with pytest.raises(ValueError, match=r"'boil_v9999' has no start state to build"):
        asyncio.run(scheduler.on_trajectory_start([protocol.RolloutInferRequest(
            messages=[{"role": "user", "content": "x"}], data_dict={k: v for k, v in row.items() if k != "messages"})]))


def test_columnar_loader_nulls_are_tolerated(wm_env, scheduler_cls):
    row = rl_row(TASK)
    sim = json.loads(row["sim_task"])  # what a columnar loader makes of it: a struct with null-filled keys
    row["sim_task"] = {**sim, "room_map": {**sim["room_map"], "foundry": None}}
    scheduler, request = started(scheduler_cls, row=row)
    assert play(scheduler, request, "teleport to hallway", 1)["rollout_infos"]["sources"] == ["local"]


def test_the_world_model_is_sampled_in_rollouts(wm_env, scheduler_cls, monkeypatch):
    """WM_TEMPERATURE / WM_TOP_P / WM_DIFFUSION_STEPS reach the proxy with every simulated step; by default the
    world model samples (temperature 0.7), so a group's episodes can meet different worlds."""
    calls = []

    def respond(method, path, body):
        calls.append(body["input"])
        return 200, {"generated_text": "You focus on the water.", "usage": {}}, 0
    server = ScriptedServer(respond)
    try:
        wm_env(server.url + "/")
        monkeypatch.setenv("SCIWORLD_WM_GUARD", "0")
        play(*started(scheduler_cls), "focus on water", 1)
        monkeypatch.setenv("WM_TEMPERATURE", "1.0")
        monkeypatch.setenv("WM_TOP_P", "0.9")
        monkeypatch.setenv("WM_DIFFUSION_STEPS", "2")
        play(*started(scheduler_cls), "focus on water", 1)
    finally:
        server.close()
    assert calls[0]["temperature"] == 0.7 and "top_p" not in calls[0] and "num_diffusion_steps" not in calls[0]
    assert (calls[1]["temperature"], calls[1]["top_p"], calls[1]["num_diffusion_steps"]) == (1.0, 0.9, 2)
    for name, value, message in (("WM_TEMPERATURE", "-1", "use 0"), ("WM_TOP_P", "1.5", r"\(0, 1\]"),
                                 ("WM_DIFFUSION_STEPS", "0", "1 or more"), ("WM_TEMPERATURE", "hot", "valid float"),
                                 ("WM_MAX_CONCURRENT", "0", "1 or more")):
        with pytest.raises(ValueError, match=f"{name}.*{message}"):
            WMSettings.from_env({"WM_ENDPOINT": "http://x/", name: value})


def test_missing_wm_endpoint_is_a_clear_error(monkeypatch, scheduler_cls):
    monkeypatch.delenv("WM_ENDPOINT", raising=False)
    with pytest.raises(ValueError, match="WM_ENDPOINT is not set"):
        scheduler_cls(max_turns=5)
    with pytest.raises(ValueError, match="WM_MAX_RETRIES"):
        WMSettings.from_env({"WM_ENDPOINT": "http://x/", "WM_MAX_RETRIES": "many"})
    with pytest.raises(ValueError, match="proxy's URL"):
        WMSettings.from_env({"WM_ENDPOINT": "localhost:30000"})
    assert WMSettings.from_env({"WM_ENDPOINT": "http://x/", "WM_MAX_CONCURRENT": "8"}).sampling()["max_concurrent"] == 8


def test_reward_scores_outcomes_and_logs_trajectories(wm_env, scheduler_cls, tmp_path, monkeypatch):
    log_path = tmp_path / "logs" / "traj.jsonl"
    monkeypatch.setenv("TEXTWM_TRAJECTORY_LOG", str(log_path))
    scheduler, request = started(scheduler_cls)
    play(scheduler, request, "teleport to kitchen", 1)
    infos = play(scheduler, request, "focus on water", 2)["rollout_infos"]   # WM down: wm_error
    good = {**infos, "outcome": {"done": True, "reason": "success", "score": 100.0}, "wm_error": False}
    reward_fn = make_reward_class("sciworld")()

    class State:
        global_step = 7
    values = reward_fn(["a", "b"], rollout_infos=[{**infos, "num_turns": 2}, good], request_id=["r0", "r1"],
                       trainer_state=State(), task_id=["boil_v0", "boil_v0"])
    assert values == [0.0, 1.0]
    lines = [json.loads(x) for x in log_path.read_text().splitlines()]
    assert [x["reward"] for x in lines] == values and [x["request_id"] for x in lines] == ["r0", "r1"]
    first = lines[0]
    assert first["step"] == 7 and first["task_id"] == "boil_v0" and first["wm_error"] is True
    assert first["actions"] == ["teleport to kitchen", "focus on water"] and first["sources"] == ["local", None]
    assert "num_turns" not in first
    # Two groups of two (by prompt_id): one with a reward spread, one without (no gradient: counted).
    reward_fn(["a", "b", "c", "d"], rollout_infos=[infos, good, infos, infos], prompt_id=["p1", "p1", "p2", "p2"],
              trainer_state=State())
    batches = [json.loads(x) for x in (log_path.parent / "reward_batches.jsonl").read_text().splitlines()]
    assert [(b["step"], b["episodes"], b["groups"], b["zero_spread_groups"]) for b in batches] == [(7, 2, 2, 0),
                                                                                                 (7, 4, 2, 1)]
    assert batches[1]["mean_reward"] == 0.25 and batches[1]["successes"] == 1
    assert batches[1]["answer_s_per_turn"] > 0 and batches[1]["wm_steps"] == 0    # the responder's and a dead WM's
    with pytest.raises(ValueError, match="--multi_turn_scheduler sciworld_scheduler"):
        reward_fn(["a"], rollout_infos=[{}])


def test_trajectory_log_path_and_whole_lines(tmp_path):
    class Args:
        output_dir = str(tmp_path / "out" / "v0-1")
    assert trajectory_log_path(Args(), environ={}) == tmp_path / "out" / "v0-1" / "trajectories.jsonl"
    assert trajectory_log_path(None, environ={}).as_posix() == "runs/trajectories.jsonl"
    assert trajectory_log_path(Args(), environ={"TEXTWM_TRAJECTORY_LOG": "/x/t.jsonl"}).as_posix() == "/x/t.jsonl"
    log = TrajectoryLog(tmp_path / "t.jsonl")
    big = {"observations": ["x" * 70_000]}
    log.append([big, {"a": 1}])
    log.append([])
    assert [json.loads(x) for x in (tmp_path / "t.jsonl").read_text().splitlines()] == [big, {"a": 1}]
