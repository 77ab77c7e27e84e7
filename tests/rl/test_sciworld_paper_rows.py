"""The paper's released ScienceWorld RL rows, read as they are (slow: real ScienceWorld JVMs).

Rows are written here in the release's format (``messages`` a JSON string, no ``sim_task``). Their start
state is baked from the real env once by the CLI into a cache; then GRPO's scheduler (ms-swift's own request
types, hook by hook) and the in-WM evaluation CLI play them from the cache, with a scripted WM on loopback.
The replay reward (``SCIWORLD_ENV_URL``) replays episodes in a real env server on a loopback port.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import shutil

import pytest

from tests.conftest import write_lines
from tests.eval.helpers import ChatServer, GoldWM, free_port, turn
from tests.loopback import serving
from textwm.envs import get_env
from textwm.envs.pool import PoolConfig
from textwm.envs.server import create_env_app
from textwm.envs.sim_cache import main as sim_cache_main
from textwm.eval.run import main as eval_main
from textwm.rl.swift_adapters import make_reward_class, make_scheduler_class

pytestmark = pytest.mark.slow
pytest.importorskip("scienceworld", reason="ScienceWorld is in the [envs] extra")
if shutil.which("java") is None:
    pytest.skip("ScienceWorld needs a Java runtime (java on PATH)", allow_module_level=True)
protocol = pytest.importorskip("swift.infer_engine.protocol", reason="ms-swift is in the [rl] extra")

SPEC = get_env("sciworld")
TASK_ID = "lifespan-longest-lived_v2"
#: Its gold run: the real env scores 50 after "go to outside" and 100 after the focus.
GOLD = ["open door to outside", "go to outside", "focus on egg giant tortoise"]
#: What a perfect WM answers to the actions the local responder leaves to it.
WM_ANSWERS = {"open door to outside": "The door is already open.", "go to outside": "You move to the outside.",
              "focus on egg giant tortoise": "You focus on the giant tortoise egg."}
PAPER_SYSTEM = ("You are an agent in ScienceWorld, a text-based science experiment environment.\n\nAt each turn, "
                "output EXACTLY ONE action as plain text.")


def paper_row(task_id: str = TASK_ID) -> dict:
    """One row in the release's format (its columns, ``messages`` as a JSON string)."""
    messages = [{"role": "system", "content": PAPER_SYSTEM},
                {"role": "user", "content": "Task: Your task is to find the animal with the longest life span.\n\n"
                                            "You are in: This room is called the kitchen."}]
    return {"messages": json.dumps(messages), "task_id": task_id, "instruction": "Your task is to find the animal "
            "with the longest life span.", "ground_truth": "", "wm_system_prompt": "## ENVIRONMENT\nScienceWorld",
            "max_turns": 50}


@pytest.fixture(scope="module")
def paper_rows(tmp_path_factory):
    """The rows file and the cache the CLI filled (one start state built from the real env)."""
    root = tmp_path_factory.mktemp("paper_rows")
    rows = write_lines(root / "sciworld_rl_split.jsonl", [paper_row(), paper_row()])
    cache = root / "cache"
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert sim_cache_main(["--env", "sciworld", "--rows", str(rows), "--cache-dir", str(cache),
                               "--no-progress"]) == 0
    assert "(1 built, 0 from the cache)" in out.getvalue()   # two rows, one task
    return rows, cache


def wm_answer(action: str) -> str | None:
    """The perfect WM's answer; the paper's layout sends the action as ``[{"role": "assistant", ...}]``."""
    if action.startswith("["):
        action = json.loads(action)[0]["content"]
    return WM_ANSWERS.get(action)


def wm_server() -> GoldWM:
    return GoldWM([], fallback=wm_answer)


@pytest.mark.parametrize("layout", ["rows", "paper"])
def test_paper_rows_complete_once_then_play_in_grpo_and_in_wm_evaluation(paper_rows, tmp_path, monkeypatch, capsys,
                                                                         layout):
    """The rows' own WM layout, and the paper's (``SCIWORLD_WM_PROMPT=paper``): every query then is the paper's,
    its state the row's own agent conversation."""
    rows, cache = paper_rows
    if layout == "paper":
        monkeypatch.setenv("SCIWORLD_WM_PROMPT", "paper")
    assert sim_cache_main(["--env", "sciworld", "--rows", str(rows), "--cache-dir", str(cache)]) == 0
    assert "(0 built, 1 from the cache)" in capsys.readouterr().out        # no env this time
    monkeypatch.setenv("TEXTWM_SIM_CACHE", str(cache))
    wm = wm_server()
    agent = ChatServer(lambda messages: GOLD[min(turn(messages), len(GOLD) - 1)])
    try:
        # GRPO: ms-swift hands the scheduler the row's extra columns; the start state comes from the cache.
        monkeypatch.setenv("WM_ENDPOINT", wm.url)
        scheduler = make_scheduler_class("sciworld")(max_turns=50)
        row = paper_row()
        request = protocol.RolloutInferRequest(messages=json.loads(row["messages"]), uuid="r0",
                                               data_dict={k: v for k, v in row.items() if k != "messages"})
        asyncio.run(scheduler.on_trajectory_start([request]))
        for i, action in enumerate(GOLD, start=1):
            request.messages.append({"role": "assistant", "content": action})
            choice = protocol.ChatCompletionResponseChoice(
                index=0, message=protocol.ChatMessage(role="assistant", content=action), finish_reason="stop")
            result = asyncio.run(scheduler.on_turn_end(request, choice, i))
            if not result["done"]:
                scheduler.step(request, choice, i)
        infos = result["rollout_infos"]
        assert result["done"] and infos["end_reason"] == "success" and infos["outcome"]["score"] == 100.0
        assert infos["sources"][-1] == "wm" and set(infos["sources"]) == {"local", "wm"}
        assert infos["reset_options"] == {"simplification": "easy"}
        assert request.messages[0] == {"role": "system", "content": PAPER_SYSTEM}  # the paper's agent prompt
        stats = scheduler.driver.sim_cache.stats
        assert (stats.built, stats.cached) == (0, 1)
        # In-WM evaluation, the command line: the same rows, the same cache.
        out = tmp_path / "eval"
        assert eval_main(["agent-wm", "--rows", str(rows), "--agent-url", agent.url, "--wm-endpoint", wm.url,
                          "--output-dir", str(out)], env="sciworld") == 0, capsys.readouterr().err
        queries = [body["input"] for method, _, body in wm.requests if method == "POST"]
    finally:
        wm.close()
        agent.close()
    episodes = [json.loads(x) for x in (out / "episodes_wm.jsonl").read_text().splitlines()]
    assert [(e["task_id"], e["reason"], e["score"]) for e in episodes] == [(TASK_ID, "success", 100.0)] * 2
    assert queries
    for q in queries:
        paper = q["system_prompt"].startswith("## ENVIRONMENT STATE\nScienceWorld is a text-based interactive")
        assert paper == (layout == "paper")
        if paper:
            conversation = json.loads(q["state"])
            assert conversation[0] == {"role": "system", "content": PAPER_SYSTEM}
            assert conversation[-1] == {"role": "assistant", "content": json.loads(q["action"])[0]["content"]}
    # A task id the real env does not have: the row is named, nothing is built.
    bad = write_lines(tmp_path / "bad.jsonl", [paper_row(), paper_row("boil_v9999")])
    assert sim_cache_main(["--env", "sciworld", "--rows", str(bad), "--cache-dir", str(cache)]) == 2
    assert "bad.jsonl:2: task_id: task 'boil_v9999' has no start state to build" in capsys.readouterr().err


def infos_of(task_id: str, actions: list[str], score: float, reason: str | None) -> dict:
    """The rollout_infos the scheduler writes for an episode (its simulated outcome: ``score``, ``reason``)."""
    return {"env": "sciworld", "task_id": task_id, "turns": len(actions), "actions": actions,
            "observations": [""] * len(actions), "sources": ["wm"] * len(actions), "done": True, "end_reason": reason,
            "outcome": {"done": reason is not None, "reason": reason, "score": score}, "wm_error": False,
            "wm_error_message": None, "unparseable": 0, "reset_options": {"simplification": "easy"}}


def test_replay_reward_is_the_real_envs_score(tmp_path, monkeypatch):
    monkeypatch.setenv("TEXTWM_TRAJECTORY_LOG", str(tmp_path / "traj.jsonl"))
    monkeypatch.setenv("TEXTWM_REPLAY_SESSIONS", "1")
    episodes = [infos_of(TASK_ID, GOLD, 100.0, "success"),
                infos_of(TASK_ID, ["go to outside"], 0.0, "max_turns"),   # the simulator scores no move: 0
                infos_of("boil_v9999", GOLD, 0.0, "max_turns")]           # the server refuses the task
    app = create_env_app(SPEC, PoolConfig(workers=1, max_sessions_per_worker=2))
    with serving(app) as url:
        monkeypatch.setenv("SCIWORLD_ENV_URL", url)
        reward = make_reward_class("sciworld")()
        try:
            values = reward(["a", "b", "c"], rollout_infos=episodes)
        finally:
            reward.replayer.close()
    assert values == [1.0, 0.5, 0.0]       # the real scores 100 and 50; the failed replay keeps its simulated 0
    assert (reward.replayer.replays, reward.replayer.errors) == (3, 1)
    lines = [json.loads(x) for x in (tmp_path / "traj.jsonl").read_text().splitlines()]
    assert [x["reward_source"] for x in lines] == ["replay", "replay", "simulator (replay failed)"]
    assert lines[0]["replay"]["outcome"] == {"done": True, "reason": "success", "score": 100.0}
    assert lines[1]["replay"]["outcome"] == {"done": False, "reason": "max_turns", "score": 50.0}
    assert "boil" in lines[2]["replay"]["error"] and lines[2]["replay"]["outcome"] is None
    # A dead server: every replay fails, and the run stops saying so (never a reward of 0).
    dead = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("SCIWORLD_ENV_URL", dead)
    reward = make_reward_class("sciworld")()
    with pytest.raises(RuntimeError, match=rf"every replay .* at {dead} \(\$SCIWORLD_ENV_URL\) failed \(1 of 1"):
        reward(["a"], rollout_infos=episodes[:1])
