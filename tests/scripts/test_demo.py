"""The README's main job, in its --smoke setting (slow tier; CI runs it)."""

import json
import os
import socket
import subprocess
import sys
import time

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_demo_smoke_runs_end_to_end_and_resumes(repo, tmp_path):
    out = tmp_path / "demo"
    cmd = ["bash", str(repo / "scripts" / "demo.sh"), "--smoke", "--out", str(out), "--wm-port", str(free_port()),
           "--proxy-port", str(free_port())]
    env = {**os.environ, "PYTHON": sys.executable}
    started = time.monotonic()
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    elapsed = time.monotonic() - started
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    report = (out / "report.md").read_text()
    for needle in ("exact_match", "rewards/SciWorldReward/mean", "CR = W2R / Real", "Wall time per stage",
                   "**Which won at this budget:**", "says little about the paper"):
        assert needle in report
    assert (out / "wm_eval" / "comparison.png").stat().st_size > 10_000
    assert "![GRPO per step](grpo_steps.png)" in report and (out / "grpo_steps.png").stat().st_size > 10_000
    state = json.loads((out / "state.json").read_text())
    assert (state["format"], state["pipeline"], state["config"]["train_steps"]) == ("textwm-stages/1", "demo", 40)
    stages = state["stages"]
    assert list(stages) == ["data", "train", "wm_eval", "grpo", "agent_eval", "report"]
    assert all(s["status"] == "done" for s in stages.values())
    assert stages["grpo"]["result"]["reward_per_step"]
    print(f"smoke demo: {elapsed:.0f} s")
    # A re-run resumes: every finished stage is skipped.
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count("done earlier") == 5


@pytest.mark.slow
def test_alfworld_demo_smoke(repo, tmp_path):
    """The same pipeline on ALFWorld games generated offline (scripts/demo.sh --env alfworld --smoke)."""
    pytest.importorskip("alfworld", reason="ALFWorld is in the [envs] extra")
    out = tmp_path / "demo"
    cmd = ["bash", str(repo / "scripts" / "demo.sh"), "--env", "alfworld", "--smoke", "--out", str(out),
           "--wm-port", str(free_port()), "--proxy-port", str(free_port())]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env={**os.environ, "PYTHON": sys.executable})
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    report = (out / "report.md").read_text()
    for needle in ("real ALFWorld env", "rewards/AlfWorldReward/mean", "CR = W2R / Real"):
        assert needle in report
    assert sorted(p.parts[-4] for p in (out / "games").glob("*/*/*/game.tw-pddl")) == \
        ["eval_out_of_distribution"] * 6 + ["train"] * 6


@pytest.mark.slow
def test_appworld_demo_smoke(repo, tmp_path):
    """The same pipeline on worlds generated offline, in the real AppWorld apps (scripts/demo.sh --env appworld)."""
    from tests.envs.appworld.conftest import appworld_interpreter
    from textwm.envs.appworld.apps_python import ENV_VAR

    out = tmp_path / "demo"
    cmd = ["bash", str(repo / "scripts" / "demo.sh"), "--env", "appworld", "--smoke", "--out", str(out),
           "--wm-port", str(free_port()), "--proxy-port", str(free_port())]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=900,
                         env={**os.environ, "PYTHON": sys.executable, ENV_VAR: appworld_interpreter()})
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    report = (out / "report.md").read_text()
    for needle in ("real AppWorld env", "rewards/AppWorldReward/mean", "CR = W2R / Real"):
        assert needle in report
    card = json.loads((out / "data" / "dataset_card.json").read_text())
    assert card["gold_below_success"] == [] and card["sft_demos"] > 0  # the expert answers every generated task


def test_demo_resume_accepts_same_settings_and_names_changed_ones(tmp_path):
    from textwm.demo import Demo, DemoConfig

    config = DemoConfig.smoke_test(out=str(tmp_path / "demo"))
    first = Demo(config, echo=lambda _: None)
    first.runner.save()
    # Same settings (tuples read back from JSON as lists), other ports: a resume.
    Demo(DemoConfig.smoke_test(out=str(tmp_path / "demo"), wm_port=1, proxy_port=2), echo=lambda _: None)
    with pytest.raises(ValueError, match=r"train_steps: 40 -> 41"):
        Demo(DemoConfig.smoke_test(out=str(tmp_path / "demo"), train_steps=41), echo=lambda _: None)


def test_a_demo_folder_of_the_older_stages_json_is_read_and_converted(tmp_path):
    from textwm.demo import Demo, DemoConfig

    config = DemoConfig.smoke_test(out=str(tmp_path))
    settings = {k: v for k, v in Demo(config, echo=lambda _: None).runner.config.items()
                if k not in config.RUN_ONLY_SETTINGS}
    (tmp_path / "state.json").unlink(missing_ok=True)
    (tmp_path / "stages.json").write_text(json.dumps({"config": settings, "stages": {
        "data": {"name": "data", "seconds": 12.5, "figures": {"transitions": 51}}}}))
    said = []
    demo = Demo(config, echo=said.append)
    assert demo.runner.results == {"data": {"transitions": 51}} and demo.runner.records["data"].seconds == 12.5
    assert not (tmp_path / "stages.json").exists() and "converted to the current state format" in said[0]
    assert json.loads((tmp_path / "state.json").read_text())["stages"]["data"]["status"] == "done"


def test_demo_families_must_include_the_sdar_world_model():
    from textwm.demo import DemoConfig

    assert DemoConfig(families=("ar", "sdar", "wedlm")).families == ("ar", "sdar", "wedlm")
    with pytest.raises(ValueError, match="families must include sdar"):
        DemoConfig(families=("ar", "wedlm"))
    with pytest.raises(ValueError, match="families must include sdar"):
        DemoConfig(families=("sdar", "gpt"))
    assert DemoConfig(prompt_style="paper").prompt_style == "paper"
    with pytest.raises(ValueError, match="prompt_style must be one of compact, full, paper"):
        DemoConfig(prompt_style="scene")


def test_demo_agent_tasks_come_from_the_env_and_give_way_to_other_tasks():
    from textwm.demo import DemoConfig
    from textwm.envs.sciworld.build import DEMO_TASKS, SMALL_AGENT_TASKS

    default = DemoConfig.create()
    assert default.agent_tasks == SMALL_AGENT_TASKS and set(SMALL_AGENT_TASKS) <= set(DEMO_TASKS)
    assert DemoConfig.create(smoke=True).agent_tasks == ("lifespan-longest-lived",)
    # Other task types without agent_tasks: the agent gets every type of them, not a type the data lacks.
    assert DemoConfig.create(tasks=("boil", "melt")).agent_tasks == ()
    assert DemoConfig.create(env="alfworld").agent_tasks == ()
    with pytest.raises(ValueError, match=r"agent_tasks freeze not among tasks \(boil melt\)"):
        DemoConfig.create(tasks=("boil", "melt"), agent_tasks=("freeze",))
