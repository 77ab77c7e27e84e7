"""The env contract suite: every generic Stage-2 layer against every registered env.

One parametrised case per env: the toy house (fast tier), ScienceWorld (slow tier: real JVMs), ALFWorld
(real games) and AppWorld (the real apps in their own interpreter, on generated worlds). Each
case builds a small dataset with the env's own builder, then runs through the dataset plumbing, the
real-env server and client, the Simulator with and without the local responder, the ms-swift scheduler
and reward hooks, and the closed-loop evaluation (real / WM / W2R, and the CLI). The only env facts the
suite uses are what the spec and its builder produce. A new env is accepted by adding its case here.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.eval.helpers import ChatServer, GoldAgent, GoldWM, ScriptAgent, free_port, gold_actions, read_jsonl
from textwm.clients.retry import RetryPolicy
from textwm.clients.wm import WMClient
from textwm.data.schema import validate_target_row
from textwm.data.wm_message import split_wm_user_message
from textwm.envs import env_names, get_env
from textwm.envs.build import BuildConfig, build
from textwm.envs.contract import EnvSpec, Outcome
from textwm.envs.simulator import LOCAL, WM, WM_ERROR, Simulator

FAST = RetryPolicy(max_retries=1, backoff_s=0.01, max_backoff_s=0.01)


def _sciworld_config(out: Path) -> BuildConfig:
    pytest.importorskip("scienceworld")
    if shutil.which("java") is None:
        pytest.skip("ScienceWorld needs a Java runtime (java on PATH)")
    from textwm.envs.sciworld.build import SciWorldBuildConfig

    return SciWorldBuildConfig(out_dir=str(out), tasks=("find-non-living-thing", "lifespan-longest-lived"),
                               train_variations=0, dev_variations=0, test_variations=1, explore_episodes=1,
                               explore_steps=5, workers=1)


def _alfworld_config(out: Path) -> BuildConfig:
    """Games written from the hand-made scenes of tests/envs/alfworld (one per task type there), as the
    test split (eval_out_of_distribution); the env's workers find them through $ALFWORLD_GAMES."""
    import os

    pytest.importorskip("alfworld", reason="ALFWorld is in the [envs] extra")
    from tests.envs.alfworld.conftest import GOALS, make_scene
    from textwm.envs.alfworld.build import AlfWorldBuildConfig
    from textwm.envs.alfworld.gamebank import task_folder
    from textwm.envs.alfworld.games import write_game

    games = out / "games"
    for task_type in GOALS:
        scene = make_scene(task_type)
        write_game(scene, games / "eval_out_of_distribution" / task_folder(scene) / "trial_0")
    os.environ["ALFWORLD_GAMES"] = str(games)
    return AlfWorldBuildConfig(out_dir=str(out / "data"), games_dir=str(games), train_variations=0, dev_variations=0,
                               test_variations=1, explore_episodes=1, explore_steps=6, workers=1)


def _appworld_config(out: Path) -> BuildConfig:
    """Worlds generated offline, each played by the scripted expert and explored in the real apps (AppWorld's own
    interpreter, made once if there is none); env workers find the rows through $TEXTWM_APPWORLD_ROWS."""
    import os

    from tests.envs.appworld.conftest import appworld_interpreter
    from textwm.envs.appworld.apps_python import ENV_VAR
    from textwm.envs.appworld.build import AppWorldBuildConfig
    from textwm.envs.appworld.real import ROWS_ENV

    os.environ[ENV_VAR] = appworld_interpreter()
    os.environ[ROWS_ENV] = str(out / "data" / "rl_test.jsonl")
    return AppWorldBuildConfig(out_dir=str(out / "data"), generate=60, train_variations=0, dev_variations=0,
                               test_variations=1, explore_episodes=1, explore_steps=6, workers=1)


#: env name -> the small build each case plays (its test split is what the suite evaluates).
BUILDS = {
    "toy": lambda out: BuildConfig(out_dir=str(out), train_variations=1, dev_variations=0, test_variations=2,
                                   explore_episodes=1, explore_steps=6, workers=1),
    "sciworld": _sciworld_config,
    "alfworld": _alfworld_config,
    "appworld": _appworld_config,
}
CASES = [pytest.param("toy", id="toy"), pytest.param("sciworld", id="sciworld", marks=pytest.mark.slow),
         pytest.param("alfworld", id="alfworld", marks=pytest.mark.slow),
         pytest.param("appworld", id="appworld", marks=pytest.mark.slow)]


@dataclass
class Case:
    spec: EnvSpec
    dir: Path
    report: Any
    rows: list[dict]          # RL task rows of the test split
    wm_rows: list[dict]       # WM transitions of the test split
    #: task id -> the gold replies (the SFT demo's assistant turns, in the agent's format)
    gold: dict[str, list[str]]

    def gold_actions(self, task_id: str) -> list[str]:
        """The gold replies as env actions (the env's own parser)."""
        return [self.spec.parse_action(reply) for reply in self.gold[task_id]]

    @property
    def rl(self) -> Path:
        return self.dir / "rl_test.jsonl"

    def starts(self):
        return [self.spec.load_row(r, need_sim=True) for r in self.rows]


@pytest.fixture(scope="module", params=CASES)
def case(request, tmp_path_factory) -> Case:
    name = request.param
    out = tmp_path_factory.mktemp(f"contract_{name}")
    spec = get_env(name)
    config = BUILDS[name](out)
    report = build(spec, config)
    out = Path(config.out_dir)
    load = lambda f: [json.loads(line) for line in (out / f).read_text().splitlines()]  # noqa: E731
    return Case(spec, out, report, load("rl_test.jsonl"), load("wm_test.jsonl"), gold_actions(load("sft_test.jsonl")))


@pytest.fixture
def gold_wm(case):
    wm = GoldWM(case.wm_rows)
    yield wm
    wm.close()


# --- the spec and the dataset builder ------------------------------------------------------------------


def test_the_env_is_registered_with_a_complete_spec(case):
    spec = case.spec
    assert spec.name in env_names() and get_env(spec.name) is spec
    assert spec.title and spec.class_prefix and spec.guard_env.endswith("_WM_GUARD") and spec.invalid_reply_hint
    assert spec.unparseable_limit >= 1 and spec.default_max_turns >= 1


def test_dataset_builder_rows_fit_every_consumer(case):
    assert case.report.gold_below_success == [] and case.report.transitions["test"] == len(case.wm_rows)
    for row in case.wm_rows:                      # trainer/scorer rows in the one WM-message layout
        validate_target_row(row)
        _, action = split_wm_user_message(row["messages"][1]["content"])
        assert action and row["source"]
    assert {r["task_id"] for r in case.rows} == set(case.gold)
    for start in case.starts():                   # RL rows: a simulator start and an agent conversation
        assert start.sim_task is not None and start.family == case.spec.family_of(start.task_id)
        assert [m["role"] for m in start.messages[:2]] == ["system", "user"]
    card = json.loads((case.dir / "dataset_card.json").read_text())
    assert card["env"] == case.spec.name and card["transitions"]["test"] == len(case.wm_rows)
    assert card["sft_demos"] == sum(len(p.read_text().splitlines()) for p in case.dir.glob("sft_*.jsonl"))


# --- the real env: server, client, pool ------------------------------------------------------------------


def test_env_server_and_client_play_a_gold_run(case):
    from fastapi.testclient import TestClient

    from textwm.envs.client import EnvClient, EnvServerError
    from textwm.envs.pool import PoolConfig
    from textwm.envs.server import create_env_app

    task_id = case.rows[0]["task_id"]
    with TestClient(create_env_app(case.spec, PoolConfig(workers=1, max_sessions_per_worker=2))) as http:
        env = EnvClient("http://testserver", http=http)
        start = env.reset(task_id, with_valid_actions=True)
        assert start.observation and start.info["session_id"] and isinstance(start.info["valid_actions"], list)
        for action in case.gold_actions(task_id):
            step = env.step(action)
            if step.done:
                break
        assert step.done and case.spec.is_success(step.score)
        with pytest.raises(EnvServerError) as over:
            env.step(case.gold_actions(task_id)[-1])
        assert over.value.status == 409
        sid = env.session_id
        env.end_session()
        assert http.post("/step", json={"session_id": sid, "action": "look"}).status_code == 404
        bad = http.post("/reset", json={"task_id": "no such task"})
        assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"
        assert http.post("/reset", json={"task_id": task_id, "colour": "red"}).status_code == 422
        health = http.get("/health").json()
        assert health["status"] == "ok" and health["env"] == case.spec.name and health["sessions"] == 0
        metrics = http.get("/metrics").text
        assert f'textwm_env_events_total{{env="{case.spec.name}",event="resets"}} 1' in metrics


# --- the simulator -------------------------------------------------------------------------------------


def _play(spec, sim, start, actions):
    episode, steps = spec.start_episode(start), []
    for action in actions:
        steps.append(sim.step(episode, action))
        if steps[-1].error or steps[-1].outcome.done:
            break
    return episode, steps


def test_simulator_with_and_without_the_responder(case, gold_wm):
    with WMClient(gold_wm.url, retry=FAST) as client:
        for use_local in (True, False):
            sim = Simulator(client, use_local=use_local)
            for start in case.starts():
                episode, steps = _play(case.spec, sim, start, case.gold_actions(start.task_id))
                assert steps[-1].outcome.reason == "success" and case.spec.is_success(episode.outcome().score)
                json.dumps(episode.to_dict())            # plain data, so it can travel with a request
                assert case.spec.episode_from_dict(episode.to_dict()).outcome() == episode.outcome()
            sources = {s for s in ("local", "wm") if getattr(sim.stats, s)}
            # With the responder, the WM answers what the tracked state does not decide (nothing, in a fully
            # known ALFWorld scene); without it, everything.
            assert (LOCAL in sources and sources <= {LOCAL, WM}) if use_local else sources == {WM}, sim.stats
    down = Simulator(WMClient(f"http://127.0.0.1:{free_port()}/", retry=FAST, timeout_s=2), use_local=False)
    episode, steps = _play(case.spec, down, case.starts()[0], case.gold_actions(case.rows[0]["task_id"]))
    failed = [s for s in steps if s.error]
    assert failed and failed[0].failure == WM_ERROR and failed[0].observation is None and down.stats.wm_errors == 1


def test_a_failed_world_model_answer_falls_back_when_asked_and_is_counted(case):
    """``on_wm_error="fallback"``: the env's substitute observation answers, the episode goes on, and every such
    step is counted as a WM failure and recorded as answered by ``fallback``."""
    down = Simulator(WMClient(f"http://127.0.0.1:{free_port()}/", retry=FAST, timeout_s=2), use_local=False,
                     on_wm_error="fallback")
    start = case.starts()[0]
    actions = case.gold_actions(start.task_id)[:3]
    _, steps = _play(case.spec, down, start, actions)
    assert len(steps) == len(actions) and not any(s.error for s in steps)
    fresh = case.spec.start_episode(start)
    for action, step in zip(actions, steps):
        assert step.source == "fallback" and step.observation == fresh.fallback_observation(action)
        fresh.observe(action, step.observation, "fallback")
    assert down.stats.fallback == down.stats.wm_errors == len(actions) and down.stats.wm == 0
    with pytest.raises(ValueError, match="on_wm_error"):
        Simulator(None, on_wm_error="ignore")


# --- ms-swift: the scheduler and the reward, hook by hook -------------------------------------------------


def test_swift_scheduler_and_reward_play_a_gold_episode(case, gold_wm, monkeypatch, tmp_path):
    protocol = pytest.importorskip("swift.infer_engine.protocol", reason="ms-swift is in the [rl] extra")
    from textwm.rl.swift_adapters import make_reward_class, make_scheduler_class

    monkeypatch.setenv("WM_ENDPOINT", gold_wm.url)
    monkeypatch.setenv("TEXTWM_TRAJECTORY_LOG", str(tmp_path / "traj.jsonl"))
    scheduler = make_scheduler_class(case.spec)(max_turns=40, tokenizer=None, template=None)
    row = case.rows[0]
    messages = [dict(m) for m in (json.loads(row["messages"]) if isinstance(row["messages"], str) else row["messages"])]
    request = protocol.RolloutInferRequest(messages=messages, data_dict={k: v for k, v in row.items() if k != "messages"})
    asyncio.run(scheduler.on_trajectory_start([request]))
    # One unparseable reply first, where the env's streak limit lets the episode go on after it (ALFWorld's: 1).
    bad = [""] if case.spec.unparseable_limit > 1 else []
    for turn, reply in enumerate([*bad, *case.gold[row["task_id"]]], start=1):
        request.messages.append({"role": "assistant", "content": reply})
        choice = protocol.ChatCompletionResponseChoice(
            index=0, message=protocol.ChatMessage(role="assistant", content=reply), finish_reason="stop")
        result = asyncio.run(scheduler.on_turn_end(request, choice, turn))
        if turn == 1:
            assert not result["done"]
        if result["done"]:
            break
        scheduler.step(request, choice, turn)
        if turn == 1 and bad:
            assert request.messages[-1] == {"role": "user", "content": case.spec.invalid_reply_hint}
    infos = result["rollout_infos"]
    assert infos["end_reason"] == "success" and infos["unparseable"] == len(bad)
    assert (infos["sources"][0] == "feedback") == bool(bad)
    assert infos["env"] == case.spec.name and not infos["wm_error"]
    reward = make_reward_class(case.spec)()
    assert reward.__class__.__name__ == f"{case.spec.class_prefix}Reward"
    (value,) = reward(["x"], rollout_infos=[infos])
    assert value == case.spec.reward(Outcome.from_dict(infos["outcome"])) and value > 0
    assert json.loads((tmp_path / "traj.jsonl").read_text())["reward"] == value
    if case.spec.has_paper_reward:      # the paper's rule sees what it needs of the task in the rollout's infos
        monkeypatch.setenv("TEXTWM_REWARD", "paper")
        (paper,) = make_reward_class(case.spec)()(["x"], rollout_infos=[json.loads(json.dumps(infos))])
        assert paper == case.spec.paper_reward(Outcome.from_dict(infos["outcome"]), infos) > 0


def test_swift_scheduler_plays_real_rollouts_in_the_env_server(case, monkeypatch, tmp_path):
    """TEXTWM_ROLLOUT_ENV=real: the same scheduler and reward, every action stepped in a real env server session;
    the episode ends where the real env ends it, its session is given back, and the reward is the real outcome's."""
    protocol = pytest.importorskip("swift.infer_engine.protocol", reason="ms-swift is in the [rl] extra")
    from tests.loopback import serving
    from textwm.envs.pool import PoolConfig
    from textwm.envs.server import create_env_app
    from textwm.rl.swift_adapters import make_reward_class, make_scheduler_class

    monkeypatch.delenv("WM_ENDPOINT", raising=False)           # real rollouts need no world model
    monkeypatch.setenv("TEXTWM_TRAJECTORY_LOG", str(tmp_path / "traj.jsonl"))
    monkeypatch.setenv("TEXTWM_ROLLOUT_ENV", "real")
    with serving(create_env_app(case.spec, PoolConfig(workers=1, max_sessions_per_worker=4))) as url:
        monkeypatch.setenv("TEXTWM_REAL_ENV_URL", url)
        scheduler = make_scheduler_class(case.spec)(max_turns=40, tokenizer=None, template=None)
        row = case.rows[0]
        results = []
        for replies in (case.gold[row["task_id"]], ["look"] * 40):       # the gold run, then one that loops
            messages = [dict(m) for m in (json.loads(row["messages"]) if isinstance(row["messages"], str)
                                          else row["messages"])]
            request = protocol.RolloutInferRequest(messages=messages,
                                                   data_dict={k: v for k, v in row.items() if k != "messages"})
            asyncio.run(scheduler.on_trajectory_start([request]))
            for turn, reply in enumerate(replies, start=1):
                request.messages.append({"role": "assistant", "content": reply})
                choice = protocol.ChatCompletionResponseChoice(
                    index=0, message=protocol.ChatMessage(role="assistant", content=reply), finish_reason="stop")
                result = asyncio.run(scheduler.on_turn_end(request, choice, turn))
                if result["done"]:
                    break
                scheduler.step(request, choice, turn)
            results.append(result["rollout_infos"])
        gold, loop = results
        real = scheduler.driver.real
        assert gold["end_reason"] == "success" and set(gold["sources"]) == {"real"} and not gold["wm_error"]
        assert case.spec.is_success(gold["outcome"]["score"])
        # The looping replies end the episode by the trajectory's rules ("look" is no action in some envs: feedback).
        assert loop["done"] and loop["end_reason"] not in ("success", "env_error")
        assert set(loop["sources"]) <= {"real", "feedback"}
        assert real.stats()["live"] == 0 and real.stats()["errors"] == 0     # both sessions given back
        reward = make_reward_class(case.spec)()
        values = reward(["x", "y"], rollout_infos=[gold, loop])
        assert values[0] == case.spec.reward(Outcome.from_dict(gold["outcome"])) and values[0] > values[1]
        assert json.loads((tmp_path / "traj.jsonl").read_text().splitlines()[0])["reward_source"] == "real env"
    # The server is gone: the next episode ends as env_error at its first action, counted, nothing made up.
    request = protocol.RolloutInferRequest(messages=[dict(m) for m in messages],
                                           data_dict={k: v for k, v in row.items() if k != "messages"})
    asyncio.run(scheduler.on_trajectory_start([request]))
    reply = case.gold[row["task_id"]][0]
    request.messages.append({"role": "assistant", "content": reply})
    choice = protocol.ChatCompletionResponseChoice(
        index=0, message=protocol.ChatMessage(role="assistant", content=reply), finish_reason="stop")
    failed = asyncio.run(scheduler.on_turn_end(request, choice, 1))["rollout_infos"]
    assert failed["end_reason"] == "env_error" and failed["observations"] == [None]
    assert scheduler.counters.env_errors == 1


# --- evaluation: real, WM, W2R, and the CLI -------------------------------------------------------------


def test_closed_loop_evaluation_of_a_gold_agent(case, gold_wm):
    from textwm.envs.blocking import BlockingPool
    from textwm.eval.closed_loop import evaluate_agent_real, evaluate_agent_wm, replay_in_real
    from textwm.eval.fidelity import closed_loop_fidelity

    starts, agent = case.starts(), GoldAgent(case.rows, case.gold)
    with BlockingPool(case.spec, 1) as pool, WMClient(gold_wm.url, retry=FAST) as client:
        real = evaluate_agent_real(case.spec, starts, agent, pool=pool, progress=False)
        wm = evaluate_agent_wm(case.spec, starts, agent, Simulator(client), concurrency=2, progress=False)
        w2r = replay_in_real(case.spec, wm.records, {s.task_id: s for s in starts}, pool=pool, progress=False)
        looker = evaluate_agent_real(case.spec, starts[:1], ScriptAgent(["", "", ""]), pool=pool, progress=False)
    fid = closed_loop_fidelity(real.summary, wm.summary, w2r.summary)
    assert (fid["real"]["success_rate"], fid["wm"]["success_rate"], fid["w2r"]["success_rate"], fid["cr"]) == \
        (1.0, 1.0, 1.0, 1.0)
    assert all(r.reason == "success" and r.done for r in real.records + wm.records + w2r.records)
    assert wm.summary["local_steps"] + wm.summary["wm_steps"] == sum(r.turns for r in wm.records)
    (rec,) = looker.records
    assert (rec.reason, rec.unparseable, rec.actions) == ("unparseable_streak", case.spec.unparseable_limit,
                                                          [None] * case.spec.unparseable_limit)


def test_eval_cli_in_the_world_model(case, gold_wm, tmp_path, capsys):
    from textwm.eval.run import main

    agent = ChatServer(GoldAgent(case.rows, case.gold).reply)
    try:
        code = main(["agent-wm", "--rows", str(case.rl), "--agent-url", agent.url, "--wm-endpoint", gold_wm.url,
                     "--output-dir", str(tmp_path)], env=case.spec.name)
    finally:
        agent.close()
    assert code == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "summary_wm.json").read_text())["success_rate"] == 1.0
    assert len(read_jsonl(tmp_path / "episodes_wm.jsonl")) == len(case.rows)
    assert (tmp_path / f"eval_{case.spec.name}.md").read_text().startswith(f"# {case.spec.title} evaluation")


def test_agent_sft_demos_of_an_endpoint_agent(case, tmp_path, capsys):
    """``textwm.eval.agent_sft`` (the paper's create_sft_gpt_agent.py, any env): gold episodes become demos."""
    from textwm.eval.agent_sft import main

    agent = ChatServer(GoldAgent(case.rows, case.gold).reply)
    try:
        code = main(["--env", case.spec.name, "--rows", str(case.rl), "--agent-url", agent.url, "--workers", "1",
                     "--out", str(tmp_path / "demos.jsonl")])
    finally:
        agent.close()
    assert code == 0, capsys.readouterr().err
    demos = read_jsonl(tmp_path / "demos.jsonl")
    assert sorted(d["task_id"] for d in demos) == sorted(r["task_id"] for r in case.rows)
    for demo in demos:
        replies = [m["content"] for m in demo["messages"] if m["role"] == "assistant"]
        assert (demo["success"], demo["reason"], replies) == (True, "success", case.gold[demo["task_id"]])
        assert [m["role"] for m in demo["messages"][:2]] == ["system", "user"]
