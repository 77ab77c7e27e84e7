"""Stage 2 alone (``--no-stage1``) and Stage 2's new settings: their validation and pretrained defaults, the
calibration rows split off the held-out rows, GRPO agents per seed and the seeds pooled in the paired summary,
and (slow tier) GRPO in the real env alone end to end on a small ScienceWorld build."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_script, write_lines
from tests.experiments.helpers import done_results
from textwm.experiments.common import AGENT_FILES, ComparisonError
from textwm.experiments.comparison_agents import (
    CALIBRATION_FILE,
    _write_agent_data,
    agent_data,
    grpo_agents,
    paired_results,
)
from textwm.experiments.stages import Stage
from textwm.experiments.wm_comparison import Comparison, ComparisonConfig

REAL_ONLY = {"stage1": False, "grpo_families": ("real",)}


@pytest.mark.parametrize(("keys", "message"), [
    ({**REAL_ONLY, "stage2": False}, "Stage 2 alone \\(stage1 off\\) trains no world model: it needs stage2 on and "
                                     "grpo_families real alone, got stage2 False, grpo_families real"),
    ({"stage1": False, "grpo_families": ("ar", "real")}, "got stage2 True, grpo_families ar real"),
    ({"agent_sft_checkpoints": 3}, "agent_sft_checkpoints > 1 picks the SFT stop on the calibration rows: set "
                                   "calibration_episodes"),
    ({"grpo_seeds": ()}, "grpo_seeds must be distinct and at least one, got \\(\\)"),
    ({"grpo_seeds": (0, 1, 0)}, "grpo_seeds must be distinct and at least one, got \\(0, 1, 0\\)"),
    ({"agent_target_success": 1.5}, "agent_target_success must be in \\[0, 1\\], got 1.5"),
    ({"agent_target_success": -0.1}, "agent_target_success must be in \\[0, 1\\], got -0.1"),
    ({"grpo_tasks_per_step": 0}, "grpo_tasks_per_step must be >= 1, got 0"),
    ({"agent_sft_checkpoints": 0}, "agent_sft_checkpoints must be >= 1, got 0"),
    ({"calibration_every": 0}, "calibration_every must be >= 1, got 0"),
])
def test_bad_stage2_settings_are_refused_by_name(keys, message):
    with pytest.raises(ValueError, match=message):
        ComparisonConfig(**keys)


def test_stage2_alone_and_its_edges_are_accepted():
    alone = ComparisonConfig(**REAL_ONLY)
    assert (alone.stage1, alone.grpo_families) == (False, ("real",))
    edges = ComparisonConfig(agent_sft_checkpoints=2, calibration_episodes=1, agent_target_success=1.0,
                             grpo_seeds=(3,))
    assert (edges.agent_target_success, edges.grpo_seeds) == (1.0, (3,))
    assert ComparisonConfig(agent_target_success=0.0).agent_target_success == 0.0


def test_a_pretrained_start_gets_stage2_as_one_runs_grpo_on_a_pretrained_agent():
    c = ComparisonConfig.create(init="x")
    assert (c.grpo_tasks_per_step, c.grpo_dynamic_sample, c.grpo_seeds) == (4, True, (0, 1))
    assert (c.calibration_episodes, c.agent_sft_checkpoints) == (30, 4)
    # without a start: one task a step, no dynamic sampling, one seed, no calibration rows, the last SFT step
    plain = ComparisonConfig.create()
    assert (plain.grpo_tasks_per_step, plain.grpo_dynamic_sample, plain.grpo_seeds) == (1, False, (0,))
    assert (plain.calibration_episodes, plain.agent_sft_checkpoints) == (0, 1)
    smoke = ComparisonConfig.create(smoke=True, init="x")
    assert (smoke.calibration_episodes, smoke.calibration_every, smoke.agent_sft_checkpoints) == (1, 1, 2)


# --- the calibration rows -------------------------------------------------------------------------------------

def _task_row(task_id: str) -> dict:
    return {"task_id": task_id, "messages": [{"role": "system", "content": "You are an agent."},
                                             {"role": "user", "content": f"Task: {task_id}"}]}


def _data_dir(root, held_out: int):
    data = root / "source"
    data.mkdir()
    write_lines(data / "rl_train.jsonl", [_task_row(f"boil_v{i}") for i in range(3)])
    write_lines(data / "sft_train.jsonl", [{**_task_row(f"boil_v{i}"), "messages": [
        *_task_row(f"boil_v{i}")["messages"], {"role": "assistant", "content": "look around"}]} for i in range(3)])
    write_lines(data / "rl_test.jsonl", [_task_row(f"melt_v{i}") for i in range(held_out)])
    return data


def _alone(root, data, out: str = "run", **settings) -> Comparison:
    config = ComparisonConfig.create(stage2=True, data_dir=str(data), out=str(root / out), agent_tasks=(),
                                     **REAL_ONLY, **settings)
    comparison = Comparison(config, echo=lambda line: None)
    comparison.runner.run_stage(Stage("data", comparison.stage_data))
    return comparison


def _ids(path) -> list[str]:
    return [json.loads(line)["task_id"] for line in path.read_text().splitlines()]


def test_stage2_alone_copies_the_agent_files_and_no_world_model_rows(tmp_path):
    data = _data_dir(tmp_path, 4)
    comparison = _alone(tmp_path, data)
    assert comparison.done["data"]["train_rows"] == 0
    assert sorted(p.name for p in comparison.path("data").iterdir()) == sorted(AGENT_FILES)
    (data / "sft_train.jsonl").unlink()
    with pytest.raises(ComparisonError, match="has no sft_train.jsonl, which Stage 2 needs"):
        _alone(tmp_path, data, out="other")


def test_the_calibration_rows_are_a_seeded_sample_kept_out_of_the_final_runs(tmp_path):
    data = _data_dir(tmp_path, 6)
    comparison = _alone(tmp_path, data, calibration_episodes=2)
    _write_agent_data(comparison)
    held_out = _ids(data / "rl_test.jsonl")
    calibration = _ids(agent_data(comparison, CALIBRATION_FILE))
    final = _ids(agent_data(comparison, "rl_test.jsonl"))
    assert agent_data(comparison, "rl_test.jsonl") == comparison.path("stage2_data", "rl_test.jsonl")
    assert len(calibration) == 2 and sorted(calibration + final) == sorted(held_out)
    assert [i for i in held_out if i in final] == final           # the rest keep their order
    assert _ids(comparison.path("data", "rl_test.jsonl")) == held_out    # the run's data untouched
    for name in ("rl_train.jsonl", "sft_train.jsonl"):
        assert agent_data(comparison, name).read_text() == (data / name).read_text()
    # the same seed: the same sample in another run folder; another seed may take other rows
    again = _alone(tmp_path, data, out="again", calibration_episodes=2)
    _write_agent_data(again)
    assert _ids(agent_data(again, CALIBRATION_FILE)) == calibration
    samples = set()
    for seed in range(1, 6):
        other = _alone(tmp_path, data, out=f"seed{seed}", calibration_episodes=2, seed=seed)
        _write_agent_data(other)
        samples.add(tuple(_ids(agent_data(other, CALIBRATION_FILE))))
    assert len(samples | {tuple(calibration)}) > 1


def test_a_resumed_run_keeps_the_calibration_rows_out_of_the_final_runs(tmp_path):
    """run_stage2 calls _write_agent_data on every run of the command, a resumed one included."""
    data = _data_dir(tmp_path, 6)
    comparison = _alone(tmp_path, data, calibration_episodes=2)
    _write_agent_data(comparison)
    final = _ids(agent_data(comparison, "rl_test.jsonl"))
    _write_agent_data(comparison)
    assert _ids(agent_data(comparison, "rl_test.jsonl")) == final


def test_too_few_held_out_rows_for_a_calibration_set_are_refused(tmp_path):
    comparison = _alone(tmp_path, _data_dir(tmp_path, 2), calibration_episodes=2)
    with pytest.raises(ComparisonError, match="rl_test.jsonl has 2 held-out task rows: the calibration set takes 2 "
                                              "and the final runs need the rest"):
        _write_agent_data(comparison)
    assert not agent_data(comparison, CALIBRATION_FILE).exists()


# --- GRPO agents per seed, pooled ----------------------------------------------------------------------------

def test_each_seed_is_a_grpo_agent_of_its_own_named_after_the_first(tmp_path):
    alone = Comparison(ComparisonConfig.create(out=str(tmp_path / "a"), grpo_seeds=(0, 1), **REAL_ONLY),
                       echo=lambda line: None)
    assert [(a.name, a.inside, a.label, a.grpo_key, a.seed) for a in grpo_agents(alone)] == [
        ("grpo_real", "real", "the real env", "grpo/real", 0),
        ("grpo_real_seed1", "real", "the real env", "grpo/real/seed1", 1)]
    arms = Comparison(ComparisonConfig.create(smoke=True, out=str(tmp_path / "b"), grpo_seeds=(5, 2),
                                              grpo_families=("sdar", "real")), echo=lambda line: None)
    assert [(a.name, a.inside, a.grpo_key) for a in grpo_agents(arms)] == [
        ("grpo_convert_sdar", "sdar", "grpo/convert/sdar"),
        ("grpo_convert_sdar_seed2", "sdar", "grpo/convert/sdar/seed2"),
        ("grpo_real", "real", "grpo/real"), ("grpo_real_seed2", "real", "grpo/real/seed2")]


def test_the_summary_sums_the_seeds_and_tests_them_task_by_task(tmp_path):
    comparison = Comparison(ComparisonConfig.create(out=str(tmp_path), grpo_seeds=(0, 1), **REAL_ONLY),
                            echo=lambda line: None)
    runs = {"sft": [True, False, False, True], "grpo_real": [True, True, False, True],
            "grpo_real_seed1": [False, True, True, True]}
    for name, successes in runs.items():
        folder = comparison.path("agent_eval", name)
        folder.mkdir(parents=True)
        write_lines(folder / "episodes_real.jsonl", [{"episode_id": f"melt_v{i}#0", "success": s, "score": 0.0}
                                                     for i, s in enumerate(successes)])
    comparison.runner.record("grpo/real", {"reward_per_step": [0.1, 0.2, 0.3]}, seconds=1.0)
    record = paired_results(comparison)
    summary = json.loads(comparison.path("stage2_summary.json").read_text())
    assert summary["env"] == "sciworld" and set(summary["arms"]) == {"real"}
    real = summary["arms"]["real"]
    # 4 tasks x 2 seeds, the SFT run counted once per seed. The p-value counts each task once (the SFT run is one
    # run): the seeds' mean minus before is -0.5, +1, +0.5, 0: one task worse, two better, an exact sign test.
    assert (real["episodes"], real["success_before"], real["success_after"]) == (8, 4, 6)
    assert real["p_value"] == pytest.approx(1.0)
    assert (real["steps"], real["seeds"]) == (3, [0, 1])
    assert real["per_seed"] == [{"seed": 0, "success_after": 3, "p_value": 1.0},
                                {"seed": 1, "success_after": 3, "p_value": 1.0}]
    agents = record["agents"]
    assert set(agents) == {"grpo_real", "grpo_real_seed1"}
    assert (agents["grpo_real_seed1"]["seed"], agents["grpo_real_seed1"]["episodes"]) == (1, 4)
    assert (agents["grpo_real_seed1"]["only_before"], agents["grpo_real_seed1"]["only_after"]) == (1, 2)
    assert record["arms"] == summary["arms"]


# --- slow: GRPO in the real env alone, end to end --------------------------------------------------------------

@pytest.mark.slow
def test_stage2_alone_runs_grpo_in_the_real_env_per_seed_with_calibration_curves(tmp_path):
    """--no-stage1: no world model trained; the SFT stop chosen on the calibration row, two GRPO seeds in the
    real env with dynamic sampling (each kept step run on the calibration row), pooled in the summary."""
    pytest.importorskip("scienceworld", reason="ScienceWorld is in the [envs] extra")
    pytest.importorskip("swift", reason="ms-swift is in the [rl] extra")
    from textwm.envs.build import build
    from textwm.envs.sciworld.build import SciWorldBuildConfig

    data = tmp_path / "data"
    build("sciworld", SciWorldBuildConfig(out_dir=str(data), tasks=("boil", "melt"), train_variations=1,
                                          dev_variations=0, test_variations=2, explore_episodes=0, workers=2))
    held_out = _ids(data / "rl_test.jsonl")
    assert len(held_out) >= 3
    out = tmp_path / "run"
    args = ["--stage2", "--no-stage1", "--grpo-families", "real", "--agent-tasks", "--data-dir", str(data),
            "--out", str(out), "--agent-sft-steps", "20", "--agent-sft-checkpoints", "2", "--calibration-episodes", "1",
            "--calibration-every", "1", "--grpo-steps", "1", "--grpo-generations", "2", "--grpo-tasks-per-step", "2",
            "--grpo-seeds", "0", "1", "--agent-episodes", "2", "--grpo-dynamic-sample", "--workers", "2",
            "--batch-size", "4", "--agent-cutoff-len", "1024", "--grpo-completion-length", "16", "--grpo-turns", "3",
            "--agent-turns", "4"]
    res = run_script("scripts/wm_comparison.py", *args, timeout=1200)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert not (out / "arms").exists()                                   # no world model trained
    calibration = _ids(out / "stage2_data" / CALIBRATION_FILE)
    assert len(calibration) == 1 and sorted(calibration + _ids(out / "stage2_data" / "rl_test.jsonl")) == sorted(held_out)
    done = done_results(out)
    assert done["agent/sft"]["checkpoints"] == [10, 20]
    stop = done["agent/sft_stop"]
    assert stop["step"] in (10, 20) and stop["tried"][0]["step"] == 10
    assert stop["agent"] == str(out / "agent" / "sft" / f"checkpoint-{stop['step']}")
    assert all(t["episodes"] == 1 for t in stop["tried"])
    for name, key, seed in (("grpo_real", "grpo/real", 0), ("grpo_real_seed1", "grpo/real/seed1", 1)):
        grpo = done[key]
        assert (grpo["seed"], grpo["rollout_env"], grpo["tasks_per_step"]) == (seed, "real", 2)
        assert grpo["real_answered_steps"] >= 1
        assert [s["step"] for s in grpo["steps"]] == [1] and all(s["rounds"] >= 1 for s in grpo["steps"])
        points = done[f"calibration/{name}"]["points"]
        assert [p["step"] for p in points] == [0, 1] and all(p["episodes"] == 1 for p in points)
        assert done[f"agent/eval/{name}"]["episodes"] == 2
    summary = json.loads((out / "stage2_summary.json").read_text())
    assert set(summary["arms"]) == {"real"}
    real = summary["arms"]["real"]
    assert (real["seeds"], real["episodes"], real["steps"]) == ([0, 1], 4, 1)
    assert [s["seed"] for s in real["per_seed"]] == [0, 1]
    report = (out / "report.md").read_text()
    assert "## Stage 2: GRPO in the real env" in report and "![GRPO per step](stage2_steps.png)" in report
    assert (out / "stage2_steps.png").stat().st_size > 0
    assert "| grpo_real_seed1 | the real env | 2 |" in report and "all seeds (0, 1; p: sign test over tasks)" in report
    assert "SFT stop, chosen on the 1 calibration rows" in report
