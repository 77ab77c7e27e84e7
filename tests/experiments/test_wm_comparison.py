"""scripts/wm_comparison.py: the arm plan, the same-data check, the diversity of sampled decodings, and
(slow tier) the whole comparison on the CPU with --smoke, resumed."""

import dataclasses
import itertools
import json

import pytest

from tests.conftest import TINY_CORPUS, chat, run_script, write_lines
from tests.experiments.helpers import done_results
from textwm.experiments.wm_comparison import (
    Arm,
    ComparisonConfig,
    check_same_data,
    empty_share,
    plan_arms,
    sampled_diversity,
)


def test_the_plan_gives_every_arm_of_a_regime_the_same_steps():
    arms = plan_arms(ComparisonConfig(steps=100, head_start=0.3))
    assert [a.name for a in arms] == ["scratch/ar", "scratch/sdar", "scratch/wedlm", "convert/ar_head",
                                      "convert/ar", "convert/sdar", "convert/wedlm"]
    assert all(a.steps == 100 for a in arms[:3])
    head = arms[3]
    assert (head.family, head.steps, head.scored) == ("ar", 30, False)
    assert all(a.start == "convert/ar_head" and a.steps == 70 and a.scored for a in arms[4:])
    assert [a.name for a in plan_arms(ComparisonConfig(regimes=("scratch",), families=("ar", "sdar")))] == [
        "scratch/ar", "scratch/sdar"]


@pytest.mark.parametrize(("keys", "message"), [
    ({"families": ("ar", "mdlm")}, "families come from ar, sdar, wedlm"),
    ({"regimes": ()}, "regimes \\(none\\)"),
    ({"head_start": 1.0}, "head_start must be in \\(0, 1\\)"),
    ({"samples": 0}, "samples must be >= 1, got 0"),
    ({"temperature": 0.0}, "temperature must be > 0"),
    ({"families": ("ar", "wedlm")}, "grpo_families \\(ar sdar\\) must be among the families trained \\(ar wedlm\\)"),
    ({"grpo_steps": 0}, "grpo_steps must be >= 1"),
])
def test_bad_settings_are_refused_by_name(keys, message):
    with pytest.raises(ValueError, match=message):
        ComparisonConfig(**keys)


def test_arms_that_saw_other_data_stop_the_run_naming_them():
    arms = [Arm("scratch/ar", "scratch", "ar", "init", 10), Arm("scratch/sdar", "scratch", "sdar", "init", 10)]
    same = {"scratch/ar": {"data_digest": "ab" * 32, "answer_tokens_seen": 90},
            "scratch/sdar": {"data_digest": "ab" * 32, "answer_tokens_seen": 90}}
    assert check_same_data(same, arms) == [
        "scratch from init: scratch/ar, scratch/sdar saw the same 90 answer tokens in the same order "
        "(digest abababababab)"]
    other = {**same, "scratch/sdar": {"data_digest": "cd" * 32, "answer_tokens_seen": 88}}
    with pytest.raises(RuntimeError, match="scratch arms from init did not train on the same data.*"
                                           "scratch/sdar: 88 answer tokens, digest cdcdcdcdcdcd"):
        check_same_data(other, arms)


def test_within_prompt_diversity_of_sampled_decodings(tmp_path):
    def sample(path, texts):
        return write_lines(path, [{"index": i, "prediction_raw": t, "reference": "r"} for i, t in enumerate(texts)])

    files = [sample(tmp_path / "a.jsonl", ["the door is open", "you see fridges", "ERROR: boom"]),
             sample(tmp_path / "b.jsonl", ["the door is open", "stove lies there", "nothing happens"])]
    got = sampled_diversity(files)
    assert (got["samples_per_prompt"], got["prompts"], got["dropped_samples"]) == (2, 3, 1)
    # prompt 0: two equal samples (Self-BLEU 1); prompt 1: no shared word (0); prompt 2: one sample, not counted
    assert got["self_bleu_within_prompt"] == pytest.approx(0.5, abs=1e-6)
    assert 0 < got["distinct_2_samples"] <= 1
    assert empty_share(sample(tmp_path / "c.jsonl", ["", "  ", "x", "y"])) == 0.5


def test_the_trainer_digest_is_the_same_for_ar_and_sdar_on_the_same_rows(tmp_path, tiny_sdar_dir):
    """What the comparison's check rests on: the digest covers the answer tokens (block padding left out) in
    training order, so two objectives on the same rows and seed agree, and another seed does not."""
    from textwm.training.config import SFTConfig
    from textwm.training.trainer import train

    rows = [chat(user=f"State: {a}\n\nAction: look", answer=b) for a, b in itertools.pairwise(TINY_CORPUS[:9])]
    data = write_lines(tmp_path / "train.jsonl", rows)

    def run(start, objective, seed, name):
        return train(SFTConfig(model_name_or_path=str(start), objective=objective, train_file=str(data),
                               output_dir=str(tmp_path / name), max_steps=3, per_device_train_batch_size=2,
                               block_length=8, seed=seed, save_steps=100, logging_steps=1, report_to="none"))

    # One checkpoint (one tokenizer) for both: the AR objective trains it as a plain causal LM.
    ar, sdar, other = run(tiny_sdar_dir, "ar", 1, "ar"), run(tiny_sdar_dir, "sdar", 1, "sdar"), run(tiny_sdar_dir, "ar", 2, "o")
    assert ar.data_digest == sdar.data_digest and ar.answer_tokens_seen == sdar.answer_tokens_seen > 0
    assert sdar.tokens_seen > sdar.answer_tokens_seen
    assert other.data_digest != ar.data_digest
    assert [h["step"] for h in ar.log_history if "loss" in h] == [1, 2, 3]


@pytest.mark.slow
def test_the_smoke_comparison_runs_end_to_end_and_resumes(tmp_path):
    import shutil

    out = tmp_path / "wmc"
    # The GPU part (train, decode, Stage 2), then the scoring and report where the world models are not.
    gpu = run_script("scripts/wm_comparison.py", "--smoke", "--out", str(out), "--until", "agents",
                     "--grpo-families", "ar", "sdar", "real", timeout=1800)
    assert gpu.returncode == 0, gpu.stderr[-3000:]
    assert "every arm has decoded and Stage 2 is done" in gpu.stdout and not (out / "report.md").exists()
    done = done_results(out)
    assert "agent/eval/grpo_convert_sdar" in done and not any(k.startswith("eval/") for k in done)
    shutil.rmtree(out / "arms")
    first = run_script("scripts/wm_comparison.py", "--smoke", "--out", str(out), "--until", "scores",
                       "--grpo-families", "ar", "sdar", "real", timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "train/convert/sdar: done earlier, skipped" in first.stdout and "Not run yet" not in first.stdout
    done = done_results(out)
    assert {"data", "init", "train/convert/ar_head", "generate/scratch/wedlm", "eval/scratch/wedlm",
            "eval/convert/sdar"} <= set(done)
    checks = done["checks/same_data"]["lines"]
    assert len(checks) == 3 and all("saw the same" in line for line in checks)
    report = (out / "report.md").read_text()
    for arm in ("scratch/ar", "scratch/sdar", "scratch/wedlm", "convert/ar", "convert/sdar", "convert/wedlm"):
        assert f"| {arm} | 40 |" in report               # every arm: the same 40 steps
    assert "| greedy rows dropped | sampled rows dropped |" in report
    assert "exact match" in report and "MAUVE" in report and "Self-BLEU within prompt (sampled)" in report
    assert (out / "learning_curves.png").stat().st_size > 0 and (out / "metrics.png").stat().st_size > 0
    # Stage 2: the SFT agent, then GRPO inside the convert regime's AR and SDAR world models, each in the real env
    assert "## Stage 2: GRPO inside each world model" in report
    for agent, inside in (("sft", "none (before GRPO)"), ("grpo_convert_ar", "convert/ar"),
                          ("grpo_convert_sdar", "convert/sdar")):
        assert f"| {agent} | {inside} | 2 |" in report     # the smoke data's 2 held-out task rows (melt, lifespan)
    assert done["agent/sft"]["turn_rows"] > done["agent/sft"]["demos"] >= 1
    assert done["agent/eval/sft"]["success_ci95"] is not None
    assert "| world model | Real | WM | W2R | CR | WM errors |" in report and "| convert/sdar | 0" in report
    fidelity = done["fidelity/convert/ar"]
    assert fidelity["real"]["episodes"] == fidelity["wm"]["episodes"] == fidelity["w2r"]["episodes"] == 2
    assert "![Stage 2](stage2.png)" in report and (out / "stage2.png").stat().st_size > 0
    grpo = done["grpo/convert/sdar"]
    assert grpo["episodes"] >= 1 and len(grpo["reward_per_step"]) == 1
    # GRPO in the real env (an env server started for the step), then every agent paired with the SFT agent.
    real = done["grpo/real"]
    assert real["rollout_env"] == "real" and real["real_answered_steps"] >= 1 and real["wm_answered_steps"] == 0
    assert "| grpo_real | the real env | 2 |" in report and "exact McNemar p |" in report
    summary = json.loads((out / "stage2_summary.json").read_text())
    assert summary["env"] == "sciworld" and set(summary["arms"]) == {"ar", "sdar", "real"}
    assert all(a["episodes"] == 2 and a["steps"] == 1 and 0 <= a["p_value"] <= 1 for a in summary["arms"].values())
    flags = ("--grpo-families", "ar", "sdar", "real")
    again = run_script("scripts/wm_comparison.py", "--smoke", "--out", str(out), *flags, timeout=300)
    # Every stage done is skipped, but the data check, which runs on every run.
    assert again.returncode == 0 and again.stdout.count("done earlier, skipped") == len(done) - 1
    changed = run_script("scripts/wm_comparison.py", "--smoke", "--out", str(out), *flags, "--steps", "50")
    assert changed.returncode == 2 and "holds a comparison with other settings (steps: 40 -> 50)" in changed.stderr


def test_a_resumed_run_carries_its_counts_and_digest_from_the_checkpoint(tmp_path, tiny_sdar_dir):
    import shutil

    from textwm.training.config import SFTConfig
    from textwm.training.trainer import DATA_SEEN_FILE, train

    rows = [chat(user=f"State: {a}\n\nAction: look", answer=b) for a, b in itertools.pairwise(TINY_CORPUS[:9])]
    data = write_lines(tmp_path / "train.jsonl", rows)

    def run(out, **keys):
        return train(SFTConfig(model_name_or_path=str(tiny_sdar_dir), objective="sdar", train_file=str(data),
                               output_dir=str(out), max_steps=4, per_device_train_batch_size=2, block_length=8,
                               seed=1, save_steps=2, logging_steps=1, report_to="none", **keys))

    whole = run(tmp_path / "whole")
    out = tmp_path / "cut"
    run(out)
    shutil.rmtree(out / "checkpoint-4")          # as if the run had died between step 2 and step 4
    assert (out / "checkpoint-2" / DATA_SEEN_FILE).is_file()
    resumed = run(out, resume_from_checkpoint=True)
    assert resumed.data_digest == whole.data_digest
    assert (resumed.tokens_seen, resumed.answer_tokens_seen) == (whole.tokens_seen, whole.answer_tokens_seen)


def test_fresh_refuses_to_delete_a_folder_it_did_not_make(tmp_path):
    (tmp_path / "notes.txt").write_text("keep me")
    result = run_script("scripts/wm_comparison.py", "--smoke", "--out", str(tmp_path), "--fresh")
    assert result.returncode == 2 and "is not a comparison run folder (no state.json)" in result.stderr
    assert (tmp_path / "notes.txt").read_text() == "keep me"


def test_a_data_dir_without_stage2_files_is_named(tmp_path):
    for name in ("wm_train.jsonl", "wm_test.jsonl"):
        write_lines(tmp_path / name, [chat(user="State: a\n\nAction: look", answer="b")])
    result = run_script("scripts/wm_comparison.py", "--smoke", "--out", str(tmp_path / "o"), "--data-dir",
                        str(tmp_path))
    assert result.returncode == 2 and "has no rl_train.jsonl, which Stage 2 needs" in result.stderr
    assert "--no-stage2" in result.stderr


def test_a_data_dir_without_the_wm_files_is_named(tmp_path):
    result = run_script("scripts/wm_comparison.py", "--smoke", "--out", str(tmp_path / "o"), "--data-dir",
                        str(tmp_path))
    assert result.returncode == 2 and f"--data-dir {tmp_path} has no wm_train.jsonl" in result.stderr


@pytest.mark.slow
def test_arms_trained_at_once_give_the_same_models_as_one_at_a_time(tmp_path):
    """--parallel trains a wave of arms in their own processes: the same losses and digests as one after the
    other, recorded as trained alongside each other; and a run folder resumes under another --parallel."""
    args = ["--smoke", "--families", "ar", "sdar", "--regimes", "scratch", "--steps", "4", "--save-steps", "2",
            "--until", "train"]

    def trained(out, *extra):
        result = run_script("scripts/wm_comparison.py", *args, "--out", str(out), *extra, timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
        done = done_results(out)
        return result, {k: v for k, v in done.items() if k.startswith("train/")}

    _, alone = trained(tmp_path / "one")
    both, together = trained(tmp_path / "both", "--parallel", "2")
    assert "train/scratch/ar, train/scratch/sdar: training at once" in both.stdout
    for key in ("train/scratch/ar", "train/scratch/sdar"):
        assert (alone[key]["concurrent_arms"], together[key]["concurrent_arms"]) == (1, 2)
        for field in ("data_digest", "answer_tokens_seen", "train_loss", "loss_curve"):
            assert together[key][field] == alone[key][field], (key, field)
    again, _ = trained(tmp_path / "one", "--parallel", "2")
    assert again.stdout.count("done earlier, skipped") >= 4


def test_the_report_says_when_train_seconds_were_shared():
    from types import SimpleNamespace

    from textwm.experiments.comparison_report import shared_device_note

    arms = plan_arms(ComparisonConfig(regimes=("scratch",), families=("ar", "sdar")))
    solo = SimpleNamespace(arms=arms, done={f"train/{a.name}": {"concurrent_arms": 1} for a in arms})
    assert shared_device_note(solo, "scratch") == []
    shared = SimpleNamespace(arms=arms, done={f"train/{a.name}": {"concurrent_arms": 2} for a in arms})
    assert shared_device_note(shared, "scratch") == [
        "Train s is wall clock with arms sharing the device: scratch/ar trained alongside 1 other(s), "
        "scratch/sdar trained alongside 1 other(s).\n"]


def test_a_stage2_setting_change_redoes_stage2_and_keeps_the_world_models(tmp_path):
    from textwm.experiments.wm_comparison import STAGE2_SETTINGS, Comparison

    assert set(STAGE2_SETTINGS) <= {f.name for f in dataclasses.fields(ComparisonConfig)}
    config = ComparisonConfig.create(smoke=True, out=str(tmp_path))
    first = Comparison(config, echo=lambda line: None)
    for stage, result in (("data", {}), ("train/scratch/ar", {"steps": 40}), ("agent/sft", {}), ("grpo/convert/ar", {}),
                          ("fidelity/convert/ar", {})):
        first.runner.record(stage, result, seconds=1.0)
    said = []
    again = Comparison(ComparisonConfig.create(smoke=True, out=str(tmp_path), grpo_steps=3), echo=said.append)
    assert set(again.done) == {"data", "train/scratch/ar"}
    assert "Stage 2 settings changed (grpo_steps: 1 -> 3): the world models are kept" in said[0]
    with pytest.raises(ValueError, match="other settings \\(steps: 40 -> 41"):
        Comparison(ComparisonConfig.create(smoke=True, out=str(tmp_path), steps=41))


def test_an_arm_that_finished_unrecorded_is_not_trained_again(tmp_path):
    from textwm.experiments.wm_comparison import ARM_RECORD, Comparison

    comparison = Comparison(ComparisonConfig.create(smoke=True, out=str(tmp_path)), echo=lambda line: None)
    arm = comparison.arms[0]
    (tmp_path / "arms" / arm.folder / "final").mkdir(parents=True)
    (tmp_path / "arms" / arm.folder / ARM_RECORD).write_text(json.dumps({"steps": 40, "train_loss": 1.5}))
    # no model, no data: training would fail; the record of the finished arm is used instead
    assert comparison.train_arm(arm) == {"steps": 40, "train_loss": 1.5}


def test_the_report_names_the_stage2_steps_not_run_yet(tmp_path):
    from textwm.experiments.comparison_report import stage2_section
    from textwm.experiments.wm_comparison import Comparison

    comparison = Comparison(ComparisonConfig.create(smoke=True, out=str(tmp_path)), echo=lambda line: None)
    assert stage2_section(comparison)[1] == (
        "Not run yet: `agent/sft`, `agent/eval/sft`, `grpo/convert/ar`, `agent/eval/grpo_convert_ar`, "
        "`grpo/convert/sdar`, `agent/eval/grpo_convert_sdar`, `agent/paired`, `probes/convert/ar`, "
        "`fidelity/convert/ar`, `probes/convert/sdar`, `fidelity/convert/sdar`.\n")
    comparison.runner.record("agent/sft", {"demos": 2, "turn_rows": 9, "steps": 20, "train_loss": 0.5}, seconds=9.0)
    comparison.runner.record("agent/eval/sft", {
        "episodes": 3, "successes": 1, "success_rate": 1 / 3, "success_ci95": [0.06, 0.79], "mean_score": 40.0,
        "agent_errors": 0, "env_errors": 0, "unparseable_replies": 0}, seconds=3.0)
    section = "\n".join(stage2_section(comparison))
    assert "Not run yet: `grpo/convert/ar`," in section and "| sft | none (before GRPO) | 3 | 1 |" in section


def test_the_sampled_decode_rate_is_the_sampled_passes_together(tmp_path):
    from textwm.experiments.wm_comparison import sampled_decode_rate

    for k, (tokens, seconds) in enumerate([(300, 1.0), (100, 1.0)]):
        (tmp_path / f"sample_{k}").mkdir()
        (tmp_path / f"sample_{k}" / "eval_generate_config.json").write_text(
            json.dumps({"generated_tokens": tokens, "decode_seconds": seconds}))
    assert sampled_decode_rate([tmp_path / "sample_0", tmp_path / "sample_1"]) == 200.0


def test_agent_tasks_keep_those_task_types_for_stage2_alone(tmp_path):
    from textwm.data.jsonl import DataError
    from textwm.experiments.common import AGENT_FILES
    from textwm.experiments.comparison_agents import _write_agent_data, agent_data
    from textwm.experiments.wm_comparison import Comparison

    def comparison(**settings):
        return Comparison(ComparisonConfig.create(smoke=True, out=str(tmp_path), **settings), echo=lambda line: None)

    (tmp_path / "data").mkdir()
    ids = ["boil_v0", "lifespan-longest-lived_v1", "melt_v2", "lifespan-longest-lived_v3"]
    for name in AGENT_FILES:
        write_lines(tmp_path / "data" / name, [{"task_id": task_id, "messages": []} for task_id in ids])
    everything = comparison()
    _write_agent_data(everything)
    assert agent_data(everything, "rl_test.jsonl") == tmp_path / "data" / "rl_test.jsonl"
    lifespan = comparison(agent_tasks=("lifespan-longest-lived", "boil"))
    _write_agent_data(lifespan)
    for name in AGENT_FILES:
        rows = [json.loads(line) for line in agent_data(lifespan, name).read_text().splitlines()]
        assert [r["task_id"] for r in rows] == ["lifespan-longest-lived_v1", "lifespan-longest-lived_v3", "boil_v0"]
    assert len((tmp_path / "data" / "rl_train.jsonl").read_text().splitlines()) == 4   # the run's data untouched
    with pytest.raises(DataError, match="rl_train.jsonl: no row of task type freeze \\(its task types: boil, lifespan-longest-lived, melt"):
        _write_agent_data(comparison(agent_tasks=("freeze",)))


def test_stage2_agent_tasks_default_to_the_envs_small_agent_types():
    from textwm.envs.sciworld.build import SMALL_AGENT_TASKS

    assert ComparisonConfig.create().agent_tasks == SMALL_AGENT_TASKS
    assert ComparisonConfig.create(smoke=True).agent_tasks == ()     # the smoke data's every type
    assert ComparisonConfig.create(agent_tasks=()).agent_tasks == ()


def test_a_run_folder_of_the_older_state_format_is_read_and_converted(tmp_path):
    """A run folder from before the one state format (its "done" mapping, each record with its seconds, and the
    data checks beside it) resumes: its stages are done, its checks a stage, the file rewritten in the new format."""
    from textwm.config import config_dict
    from textwm.experiments.wm_comparison import Comparison

    config = ComparisonConfig.create(smoke=True, out=str(tmp_path))
    settings = {k: v for k, v in config_dict(config).items() if k not in config.RUN_ONLY_SETTINGS}
    (tmp_path / "state.json").write_text(json.dumps({
        "config": settings, "data_checks": ["scratch from init: scratch/ar, scratch/sdar saw the same 90 tokens"],
        "done": {"data": {"train_rows": 51, "seconds": 12.0}, "train/scratch/ar": {"steps": 40, "seconds": 30.5}}}))
    said = []
    comparison = Comparison(config, echo=said.append)
    assert comparison.done["train/scratch/ar"] == {"steps": 40, "seconds": 30.5}
    assert comparison.runner.records["train/scratch/ar"].seconds == 30.5
    assert comparison.done["checks/same_data"]["lines"][0].startswith("scratch from init")
    assert "converted to the current state format" in said[0]
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["format"] == "textwm-stages/1" and state["stages"]["data"]["status"] == "done"
    with pytest.raises(ValueError, match="other settings \\(steps: 40 -> 41"):
        Comparison(ComparisonConfig.create(smoke=True, out=str(tmp_path), steps=41))


def test_the_demo_and_the_comparison_refuse_each_others_run_folder(tmp_path):
    from textwm.demo import Demo, DemoConfig
    from textwm.experiments.wm_comparison import Comparison

    Demo(DemoConfig.smoke_test(out=str(tmp_path)), echo=lambda line: None).runner.save()
    with pytest.raises(ValueError, match="state.json is the state of a demo run, not of a comparison; use another "
                                         "--out"):
        Comparison(ComparisonConfig.create(smoke=True, out=str(tmp_path)))
    with pytest.raises(ValueError, match="is not the state of a comparison run; not deleting"):
        Comparison(ComparisonConfig.create(smoke=True, out=str(tmp_path)), fresh=True)
