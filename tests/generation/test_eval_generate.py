import json

import pytest

from tests.conftest import chat, run_script, write_lines


@pytest.fixture
def data_dir(tmp_path):
    rows = [chat(user=f"State: room {i}\n\nAction: look around", answer=f"You see room {i}.") for i in range(7)]
    write_lines(tmp_path / "eval_test.jsonl", rows)
    write_lines(tmp_path / "eval_ood.jsonl", rows[:3])
    return tmp_path


def _rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("family", ["sdar", "ar", "wedlm"])
def test_eval_generate_writes_the_papers_rows(family, request, data_dir, tmp_path):
    model = request.getfixturevalue(f"tiny_{family}_dir")
    out = tmp_path / "out"
    res = run_script("sdar/eval_generate.py", "--model-path", str(model), "--data-dir", str(data_dir),
                     "--datasets", "test", "ood", "--output-dir", str(out), "--num-gpus", "1", "--per-batch", "3",
                     "--gen-length", "8", "--temperature", "0")
    assert res.returncode == 0, res.stderr
    assert "no CUDA device" in res.stderr  # --num-gpus 1 on a CPU machine falls back, loudly
    rows = _rows(out / "test_outputs.jsonl")
    assert [r["index"] for r in rows] == list(range(7))
    assert set(rows[0]) == {"index", "config", "prediction_raw", "reference", "generated", "ground_truth"}
    assert rows[3]["reference"] == "You see room 3." and rows[3]["config"] == "test"
    assert not any(r["prediction_raw"].startswith("ERROR") for r in rows)
    assert len(_rows(out / "ood_outputs.jsonl")) == 3
    summary = json.loads((out / "eval_generate_config.json").read_text())
    assert summary["config"]["decode"]["block_length"] == 4 and summary["datasets"]["test"]["errors"] == 0
    # The decoding loop's time and rate, beside the whole call's (model load included)
    assert 0 < summary["decode_seconds"] <= summary["seconds"]
    assert summary["decode_tokens_per_second"] >= summary["tokens_per_second"] > 0


def test_failed_batches_become_counted_error_rows(tiny_sdar_dir, data_dir, tmp_path):
    out = tmp_path / "out"
    res = run_script("sdar/eval_generate.py", "--model-path", str(tiny_sdar_dir), "--data-dir", str(data_dir),
                     "--datasets", "ood", "--output-dir", str(out), "--num-gpus", "0", "--gen-length", "4",
                     "--mask-token-id", "999999")  # outside the embedding: every forward fails
    assert res.returncode == 0, res.stderr
    assert "(3 ERROR rows)" in res.stdout
    rows = _rows(out / "ood_outputs.jsonl")
    assert all(r["prediction_raw"].startswith("ERROR: IndexError") for r in rows)
    scored = run_script("sdar/evaluate.py", "--input-dir", str(out), "--datasets", "ood", "--output-dir", str(out),
                        "--no-mauve")
    assert scored.returncode == 0, scored.stderr
    assert json.loads((out / "eval_summary.json").read_text())["ood"]["num_dropped_errors"] == 3


def test_bad_inputs(tiny_sdar_dir, tiny_ar_dir, data_dir, tmp_path):
    res = run_script("sdar/eval_generate.py", "--model-path", str(tiny_sdar_dir), "--data-dir", str(data_dir),
                     "--datasets", "missing", "--output-dir", str(tmp_path), "--num-gpus", "0")
    assert res.returncode == 2 and "eval_missing.jsonl: file not found" in res.stderr
    res = run_script("sdar/eval_generate.py", "--model-path", str(tiny_sdar_dir), "--data-dir", str(data_dir),
                     "--datasets", "test", "--output-dir", str(tmp_path), "--num-gpus", "0", "--block-length", "3")
    assert res.returncode == 2 and "does not divide the model's block_size 8" in res.stderr


@pytest.mark.slow
def test_eval_generate_with_the_static_engine_writes_the_reference_rows(tiny_sdar_dir, data_dir, tmp_path):
    outputs = {}
    for engine in ("reference", "static"):
        out = tmp_path / engine
        res = run_script("sdar/eval_generate.py", "--model-path", str(tiny_sdar_dir), "--data-dir", str(data_dir),
                         "--datasets", "test", "--output-dir", str(out), "--num-gpus", "0", "--per-batch", "3",
                         "--gen-length", "8", "--temperature", "0", "--engine", engine)
        assert res.returncode == 0, res.stderr
        outputs[engine] = [r["prediction_raw"] for r in _rows(out / "test_outputs.jsonl")]
    assert outputs["static"] == outputs["reference"]


@pytest.mark.parametrize("family", ["sdar", "ar"])
def test_passes_of_one_call_write_what_separate_calls_write(family, request, data_dir, tmp_path):
    """Greedy + a seeded sample with one model load give the rows of two calls of their own."""
    from textwm.generation.runner import EvalGenerateConfig, run, run_passes
    from textwm.generation.settings import DecodeSettings

    model = request.getfixturevalue(f"tiny_{family}_dir")

    def config(name, **decode):
        return EvalGenerateConfig(model_path=str(model), data_dir=str(data_dir), datasets=["test"],
                                  output_dir=str(tmp_path / name), num_gpus=0, per_batch=3,
                                  decode=DecodeSettings(gen_length=8, **decode))

    greedy, sampled = dict(temperature=0.0), dict(temperature=1.0, seed=7)
    run_passes([config("one_greedy", **greedy), config("one_sampled", **sampled)])
    run(config("alone_greedy", **greedy))
    run(config("alone_sampled", **sampled))
    for kind in ("greedy", "sampled"):
        assert _rows(tmp_path / f"one_{kind}" / "test_outputs.jsonl") == \
            _rows(tmp_path / f"alone_{kind}" / "test_outputs.jsonl")
    summary = json.loads((tmp_path / "one_sampled" / "eval_generate_config.json").read_text())
    assert summary["passes"] == 2 and summary["config"]["decode"]["seed"] == 7
    assert 0 < summary["decode_seconds"] <= summary["seconds"]


def test_passes_that_differ_beyond_their_decoding_are_refused(tiny_ar_dir, data_dir, tmp_path):
    from textwm.config import ConfigError
    from textwm.generation.runner import EvalGenerateConfig, run_passes

    base = dict(model_path=str(tiny_ar_dir), data_dir=str(data_dir), datasets=["test"], num_gpus=0)
    with pytest.raises(ConfigError, match="pass 2 differs from pass 1 in per_batch"):
        run_passes([EvalGenerateConfig(output_dir=str(tmp_path / "a"), **base),
                    EvalGenerateConfig(output_dir=str(tmp_path / "b"), per_batch=2, **base)])
    with pytest.raises(ConfigError, match="same folder"):
        run_passes([EvalGenerateConfig(output_dir=str(tmp_path / "a"), **base)] * 2)
    assert not (tmp_path / "a").exists()      # refused before any work
