"""What a swift GRPO run folder says per optimizer step (textwm.rl.in_wm.step_records) and the agents it kept
(grpo_checkpoints), read from hand-written run folders in the formats ms-swift and the env plugin write."""

from __future__ import annotations

import pytest

from tests.conftest import write_lines
from textwm.rl.in_wm import grpo_checkpoints, step_records

METRIC = "rewards/SciWorldReward/mean"


def _log(step: int, reward: float, **extra) -> dict:
    """A logging.jsonl line of ms-swift's GRPO trainer for ``step`` of 3."""
    return {"loss": 0.01, METRIC: reward, "kl": 0.001 * step, "entropy/mean": 1.5 - 0.1 * step,
            "num_turns": 2.0 + step, "global_step/max_steps": f"{step}/3", **extra}


def _batch(trainer_step: int, groups: int, flat: int) -> dict:
    """A reward_batches.jsonl line of the plugin (textwm.rl.trajectory_log.batch_record)."""
    return {"time": 1.0, "step": trainer_step, "episodes": 2 * groups, "groups": groups,
            "zero_spread_groups": flat, "mean_reward": 0.5, "successes": 1}


@pytest.fixture
def run_dir(tmp_path):
    write_lines(tmp_path / "logging.jsonl", [
        _log(1, 0.25), _log(2, 0.123456), _log(3, 0.75),
        # the trainer's summary line at the end: no reward metric, not a step
        {"train_runtime": 12.5, "train_loss": 0.02, "global_step/max_steps": "3/3"}])
    return tmp_path


def test_each_step_gets_its_curves_and_the_reward_batches_of_that_step(run_dir):
    # The reward function runs before the optimizer step ends: its trainer global_step is the step number - 1.
    # Step 2 took 3 rounds (dynamic sampling regenerated twice); its zero spread is the first round's.
    write_lines(run_dir / "reward_batches.jsonl", [
        _batch(0, 4, 1),
        _batch(1, 4, 3), _batch(1, 3, 2), _batch(1, 1, 0),
        _batch(2, 4, 0),
        {"step": None, "groups": 4, "zero_spread_groups": 4}])   # no trainer state: counted under no step
    records = step_records(run_dir, METRIC)
    assert [r["step"] for r in records] == [1, 2, 3]
    assert [r["rounds"] for r in records] == [1, 3, 1]
    assert [r["zero_spread"] for r in records] == [0.25, 0.75, 0.0]
    assert records[1] == {"step": 2, "reward": 0.1235, "kl": 0.002, "entropy": 1.3, "turns": 4.0, "rounds": 3,
                          "zero_spread": 0.75}


def test_without_reward_batches_the_rounds_are_unknown(run_dir):
    records = step_records(run_dir, METRIC)
    assert [(r["step"], r["reward"]) for r in records] == [(1, 0.25), (2, 0.1235), (3, 0.75)]
    assert all(r["rounds"] is None and r["zero_spread"] is None for r in records)


def test_a_step_without_a_batch_has_no_rounds_and_another_metric_finds_no_step(run_dir):
    write_lines(run_dir / "reward_batches.jsonl", [_batch(0, 2, 2)])
    first, second, _ = step_records(run_dir, METRIC)
    assert (first["rounds"], first["zero_spread"]) == (1, 1.0)
    assert (second["rounds"], second["zero_spread"]) == (None, None)
    assert step_records(run_dir, "rewards/ALFWorldReward/mean") == []


def test_checkpoints_are_in_step_order_not_name_order(tmp_path):
    for step in (10, 2, 100, 25):
        (tmp_path / f"checkpoint-{step}").mkdir()
    (tmp_path / "runs").mkdir()                   # swift's tensorboard folder beside them
    assert grpo_checkpoints(tmp_path) == [(step, tmp_path / f"checkpoint-{step}") for step in (2, 10, 25, 100)]
    assert grpo_checkpoints(tmp_path / "runs") == []
