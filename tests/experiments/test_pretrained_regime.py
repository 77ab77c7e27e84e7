"""The comparison's pretrained regime: the plan and settings, the stop rule, the per-epoch same-data check, and
(slow tier) the whole regime on the CPU from a tiny Llama start, resumed."""

from __future__ import annotations

import json

import pytest

from tests.conftest import TINY_CORPUS, chat, run_script, write_lines
from tests.experiments.helpers import done_results
from textwm.experiments.pretrained_regime import should_stop
from textwm.experiments.same_data import check_same_epochs
from textwm.experiments.wm_comparison import ComparisonConfig, plan_arms


def test_init_runs_the_pretrained_regime_alone():
    config = ComparisonConfig.create(init="smollm2-135m-instruct")
    assert (config.regimes, config.stage2, config.eval_rows) == (("pretrained",), False, 1000)
    assert [(a.name, a.family, a.start) for a in plan_arms(config)] == [
        ("pretrained/ar", "ar", "init"), ("pretrained/sdar", "sdar", "init"), ("pretrained/wedlm", "wedlm", "init")]
    assert ComparisonConfig().regimes == ("scratch", "convert")


@pytest.mark.parametrize(("keys", "message"), [
    ({"regimes": ("pretrained",), "stage2": False}, "the pretrained regime needs init"),
    ({"init": "x", "regimes": ("pretrained", "scratch"), "stage2": False}, "init runs the pretrained regime alone"),
    ({"init": "x", "regimes": ("pretrained",), "stage2": False, "temperatures": (0.0,)}, "temperatures must be > 0"),
    ({"init": "x", "regimes": ("pretrained",), "stage2": False, "max_epochs": 0}, "max_epochs"),
])
def test_bad_pretrained_settings_are_refused(keys, message):
    with pytest.raises(ValueError, match=message):
        ComparisonConfig(**keys)


def test_an_arm_stops_once_its_held_out_loss_has_not_improved_for_patience_epochs():
    assert not should_stop([3.0], 1)
    assert not should_stop([3.0, 2.5], 1)
    assert should_stop([3.0, 2.5, 2.6], 1)
    assert not should_stop([3.0, 2.5, 2.6], 2)
    assert should_stop([3.0, 2.5, 2.6, 2.5], 2)      # equal is not better


def test_every_common_epoch_is_checked_for_the_same_data():
    def epochs(*digests):
        return {"epochs": [{"data_digest": d * 32, "answer_tokens_seen": 10 * (i + 1)} for i, d in enumerate(digests)]}

    lines = check_same_epochs({"pretrained/ar": epochs("ab", "cd", "ef"), "pretrained/sdar": epochs("ab", "cd")})
    assert [line.split(":")[0] for line in lines] == ["pretrained, epoch 1", "pretrained, epoch 2"]
    with pytest.raises(RuntimeError, match="in epoch 2 did not train on the same data.*pretrained/ar: 20 answer tokens, digest cdcd"):
        check_same_epochs({"pretrained/ar": epochs("ab", "cd"), "pretrained/sdar": epochs("ab", "ee")})


@pytest.mark.slow
def test_the_pretrained_regime_runs_end_to_end_from_a_tiny_llama_and_resumes(tmp_path):
    from textwm.models.tiny import build_tiny_checkpoint

    rows = [chat(f"State: You are in the kitchen.\n\nAction: open door {i}", f"The door {i} is now open.")
            for i in range(24)]
    data = tmp_path / "data"
    data.mkdir()
    write_lines(data / "wm_train.jsonl", rows[:16])
    write_lines(data / "wm_test.jsonl", rows[16:])
    start = build_tiny_checkpoint(tmp_path / "start", TINY_CORPUS + [r["messages"][-1]["content"] for r in rows],
                                  family="ar", arch="llama", vocab_size=400)
    out = tmp_path / "run"
    args = ["--smoke", "--init", str(start), "--data-dir", str(data), "--out", str(out), "--no-stage2",
            "--bootstrap", "20"]
    res = run_script("scripts/wm_comparison.py", *args, timeout=900)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    done = done_results(out)
    for family in ("ar", "sdar", "wedlm"):
        train = done[f"train/pretrained/{family}"]
        assert 1 <= train["epochs_trained"] <= 2 and 1 <= train["best_epoch"] <= train["epochs_trained"]
        assert all(e["eval_loss"] > 0 for e in train["epochs"])
        scored = done[f"eval/pretrained/{family}"]
        passes = scored["epochs"][0]["passes"]
        assert set(passes) == ({"greedy_s4", "greedy_s1"} if family == "sdar" else {"greedy"})
        assert [row["temperature"] for row in scored["temperature_sweep"]] == [0.7]
        # The SDAR and WeDLM arms were converted from the Llama start; the AR arm stays a Llama.
        config = json.loads((out / "arms" / f"pretrained_{family}" / "epoch1" / "config.json").read_text())
        assert config["model_type"] == "llama" and config.get("diffusion") == (None if family == "ar" else family)
    assert any(line.startswith("pretrained, epoch 1") for line in done["checks/same_data"]["lines"])
    report = (out / "report.md").read_text()
    assert "A pretrained start" in report and "| pretrained/sdar | 1" in report and "(best)" in report
    assert (out / "pretrained.png").is_file()
    again = run_script("scripts/wm_comparison.py", *args, timeout=300)
    assert again.returncode == 0 and "train/pretrained/ar: done earlier, skipped" in again.stdout


@pytest.mark.slow
def test_stage2_from_the_pretrained_start_in_the_real_env_and_in_the_best_epochs_world_model(tmp_path):
    """--init with --stage2: the start is also the agent (SFT'd on the gold demos); GRPO in the real env and inside
    the AR arm's best epoch; every agent scored on the held-out tasks and paired with the SFT agent."""
    pytest.importorskip("scienceworld", reason="ScienceWorld is in the [envs] extra")
    pytest.importorskip("swift", reason="ms-swift is in the [rl] extra")
    from textwm.data.jsonl import read_jsonl
    from textwm.envs.build import build
    from textwm.envs.sciworld.build import SciWorldBuildConfig
    from textwm.models.tiny import build_tiny_checkpoint, chat_texts

    data = tmp_path / "data"
    build("sciworld", SciWorldBuildConfig(out_dir=str(data), tasks=("boil", "melt"), train_variations=1,
                                          dev_variations=0, test_variations=1, explore_episodes=0, workers=2))
    rows = [r for f in ("wm_train.jsonl", "rl_train.jsonl", "sft_train.jsonl") for r in read_jsonl(data / f).rows]
    start = build_tiny_checkpoint(tmp_path / "start", list(chat_texts(rows)), family="ar", arch="llama",
                                  vocab_size=1024)
    out = tmp_path / "run"
    args = ["--smoke", "--init", str(start), "--data-dir", str(data), "--out", str(out), "--stage2",
            "--grpo-families", "ar", "real", "--families", "ar", "sdar", "--max-epochs", "1", "--bootstrap", "20",
            "--workers", "2"]
    res = run_script("scripts/wm_comparison.py", *args, timeout=1800)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    done = done_results(out)
    assert done["agent/sft"]["init"] == str(start)               # the pretrained start is the agent
    assert done["grpo/pretrained/ar"]["wm_answered_steps"] + done["grpo/pretrained/ar"]["local_answered_steps"] >= 1
    assert done["grpo/real"]["real_answered_steps"] >= 1
    summary = json.loads((out / "stage2_summary.json").read_text())
    assert set(summary["arms"]) == {"ar", "real"} and all(a["steps"] == 1 for a in summary["arms"].values())
    report = (out / "report.md").read_text()
    assert "A pretrained start" in report and "| grpo_real | the real env |" in report
    assert "| grpo_pretrained_ar | pretrained/ar |" in report and "exact McNemar p |" in report


def test_a_new_max_epochs_keeps_the_epochs_and_decides_anew_where_arms_stop(tmp_path):
    from textwm.experiments.wm_comparison import Comparison

    config = ComparisonConfig.create(smoke=True, init="some-start", out=str(tmp_path))
    first = Comparison(config, echo=lambda line: None)
    for stage in ("data", "init", "train/pretrained/ar", "generate/pretrained/ar/epoch1",
                  "generate/pretrained/ar/sampled", "eval/pretrained/ar"):
        first.runner.record(stage, {}, seconds=1.0)
    said = []
    again = Comparison(ComparisonConfig.create(smoke=True, init="some-start", out=str(tmp_path), max_epochs=5),
                       echo=said.append)
    assert set(again.done) == {"data", "init", "generate/pretrained/ar/epoch1"}
    assert "max_epochs: 2 -> 5" in said[0]
    again.runner.save()
    assert json.loads(again.state_file.read_text())["config"]["max_epochs"] == 5
    with pytest.raises(ValueError, match="other settings"):
        Comparison(ComparisonConfig.create(smoke=True, init="some-start", out=str(tmp_path), batch_size=7))
