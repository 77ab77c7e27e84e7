"""The paper's ``eval_generate.py`` command lines run unchanged on our scripts and write the paper's files.

Each command below is copied by hand from the paper's README.md, sdar/README.md, wedlm/README.md or a
script's docstring (patronus-ai/mdlm_world_modeling); only its paths are pointed at temporary files (and a
tiny output length is appended, so that a random tiny checkpoint decodes in a second on the CPU). The flag
lists are those of the paper's ``sdar/eval_generate.py`` and ``wedlm/eval_generate.py`` argparse.

Each script runs twice: as ``__main__`` in this process (fast: torch is already imported; its log lines are
read from ``caplog``) and, in the slow tier, as a subprocess, exactly as a user runs it (importing torch
alone takes longer than the fast tier's 5 s budget on a loaded 2-core machine).
"""

from __future__ import annotations

import json
import logging
import runpy
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, chat, run_script, write_lines
from textwm.config import ConfigCLI, ConfigError
from textwm.data.markers import SKIPPED_OVERLONG
from textwm.generation.runner import EvalGenerateConfig, Job, WeDLMEvalGenerateConfig, run_shard
from textwm.generation.settings import DecodeSettings

#: Row keys of the paper's scripts' ``<name>_outputs.jsonl``.
SDAR_PAPER_KEYS = {"index", "config", "prediction_raw", "reference", "generated", "ground_truth"}
WEDLM_PAPER_KEYS = {"index", "prediction_raw", "reference", "config", "skipped_overlong"}

#: The paper's commands (README.md "SDAR" / "WeDLM", sdar/README.md step 8, wedlm/README.md step 7,
#: sdar/eval_generate.py's docstring), as written there.
SDAR_COMMANDS = {
    "README.md": "python eval_generate.py --sdar-dir ./SDAR --model-path ./outputs/checkpoint-N "
                 "--data-dir ./data --datasets eval --output-dir ./outputs/eval_results --num-gpus 8",
    "sdar/README.md": "python eval_generate.py --sdar-dir ./SDAR --model-path ./outputs/my-run/checkpoint-1000 "
                      "--data-dir ./data --datasets test --output-dir ./outputs/eval_results --num-gpus 8",
    "sdar/eval_generate.py": "python eval_generate.py --sdar-dir ./SDAR "
                             "--model-path ./outputs/sdar_sft/checkpoint-1000 --data-dir ./data "
                             "--datasets test occubench api_bank --output-dir ./outputs/eval_results --num-gpus 8",
}
WEDLM_COMMANDS = {
    "README.md": "python eval_generate.py --model-path ./outputs/my-run/final --data-dir ./data --datasets eval "
                 "--output-dir ./outputs/eval_results",
    "wedlm/README.md": "python eval_generate.py --model-path ./outputs/my-run/final --data-dir ./data "
                       "--datasets test --output-dir ./outputs/eval_results",
}

SHORT = "State: room {i}\n\nAction: look"
LONG = "State: " + "the kitchen has a stove and a sink. " * 20 + "\n\nAction: look"   # ~270 tokens, tiny tokenizer


@pytest.fixture(params=["in_process", pytest.param("subprocess", marks=pytest.mark.slow)])
def run(request, monkeypatch, capsys, caplog):
    """``run(script, *args)`` -> ``CompletedProcess`` (returncode, stdout, stderr with the log lines)."""
    if request.param == "subprocess":
        return run_script

    def in_process(script: str, *args: str) -> subprocess.CompletedProcess:
        monkeypatch.setattr(sys, "argv", [script, *args])
        code = 0
        with caplog.at_level(logging.INFO):
            try:
                runpy.run_path(str(REPO / script), run_name="__main__")
            except SystemExit as exc:
                code = exc.code
        out = capsys.readouterr()
        return subprocess.CompletedProcess([script, *args], code, out.out, out.err + caplog.text)

    return in_process


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _paper_argv(command: str, model: Path, tmp: Path) -> list[str]:
    """The command's arguments with its paths pointed into ``tmp`` (the model path at ``model``)."""
    argv = shlex.split(command)[2:]   # drop "python eval_generate.py"
    for flag, path in (("--model-path", model), ("--data-dir", tmp / "data"), ("--output-dir", tmp / "out"),
                       ("--sdar-dir", tmp / "SDAR")):
        if flag in argv:
            argv[argv.index(flag) + 1] = str(path)
    return argv


def _datasets(argv: list[str]) -> list[str]:
    """The values of ``--datasets`` (up to the next flag)."""
    names: list[str] = []
    for token in argv[argv.index("--datasets") + 1:]:
        if token.startswith("--"):
            break
        names.append(token)
    return names


def _write_data(folder: Path, names: list[str], pattern: str = "eval_{name}.jsonl", long_rows: int = 0) -> None:
    """Paper-format eval files: ``{"messages": [system, user, assistant]}``, the last message the reference;
    the first ``long_rows`` rows have a long user turn."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        rows = [chat(user=LONG if i < long_rows else SHORT.format(i=i), answer=f"You see room {i}.")
                for i in range(4)]
        write_lines(folder / pattern.format(name=name), rows)


@pytest.mark.parametrize("source", sorted(SDAR_COMMANDS))
def test_the_papers_sdar_commands_write_the_papers_rows(source, run, tiny_sdar_dir, tmp_path):
    argv = _paper_argv(SDAR_COMMANDS[source], tiny_sdar_dir, tmp_path)
    names = _datasets(argv)
    _write_data(tmp_path / "data", names)
    res = run("sdar/eval_generate.py", *argv, "--gen-length", "4")
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"--sdar-dir {tmp_path / 'SDAR'} ignored" in res.stderr   # one notice, no SDAR clone needed
    assert "--num-gpus 8 but no CUDA device" in res.stderr
    for name in names:
        rows = _rows(tmp_path / "out" / f"{name}_outputs.jsonl")
        assert [r["index"] for r in rows] == [0, 1, 2, 3] and {r["config"] for r in rows} == {name}
        assert all(set(r) == SDAR_PAPER_KEYS for r in rows)   # exactly the paper's keys: no --max-model-len
        assert rows[2]["reference"] == rows[2]["ground_truth"] == "You see room 2."
        assert not any(r["prediction_raw"].startswith(("ERROR", SKIPPED_OVERLONG)) for r in rows)


@pytest.mark.parametrize("source", sorted(WEDLM_COMMANDS))
def test_the_papers_wedlm_commands_write_the_papers_rows(source, run, tiny_wedlm_dir, tmp_path):
    argv = _paper_argv(WEDLM_COMMANDS[source], tiny_wedlm_dir, tmp_path)
    (name,) = _datasets(argv)
    _write_data(tmp_path / "data", [name])
    res = run("wedlm/eval_generate.py", *argv, "--max-output-tokens", "4")
    assert res.returncode == 0, res.stderr[-3000:]
    rows = _rows(tmp_path / "out" / f"{name}_outputs.jsonl")
    assert all(set(r) >= WEDLM_PAPER_KEYS for r in rows) and [r["index"] for r in rows] == [0, 1, 2, 3]
    assert not any(r["skipped_overlong"] for r in rows) and {r["config"] for r in rows} == {name}
    assert f"{name}: 4 rows -> " in res.stdout and f"(0 ERROR rows) (0 {SKIPPED_OVERLONG} rows)" in res.stdout
    summary = json.loads((tmp_path / "out" / "eval_generate_config.json").read_text())
    decode = summary["config"]["decode"]
    assert (decode["temperature"], decode["entropy_threshold"], decode["gen_length"]) == (0.0, 0.6, 4)
    assert summary["config"]["max_model_len"] == 16384 and summary["prompts_skipped_overlong"] == 0


def test_every_flag_of_the_papers_wedlm_script(run, tiny_wedlm_dir, tmp_path):
    """All 13 flags of the paper's wedlm/eval_generate.py; a small --max-model-len skips the long prompts."""
    _write_data(tmp_path / "data", ["test"], pattern="wm_{name}.jsonl", long_rows=2)
    budget = 150   # between the short (~50 tokens) and the long (~270) prompts
    res = run("wedlm/eval_generate.py", "--model-path", str(tiny_wedlm_dir), "--data-dir",
              str(tmp_path / "data"), "--datasets", "test", "--file-pattern", "wm_{name}.jsonl",
              "--output-dir", str(tmp_path / "out"), "--max-model-len", str(budget + 4 + 64),
              "--max-output-tokens", "4", "--batch-size", "2", "--gpu-memory-utilization", "0.85",
              "--wedlm-window-size", "4", "--wedlm-entropy-threshold", "0.5",
              "--wedlm-pos-penalty-factor", "0.01", "--temperature", "0")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "--gpu-memory-utilization 0.85 ignored" in res.stderr
    assert f"2 prompts longer than {budget} tokens" in res.stderr   # the log names the skips
    assert f"test: 4 rows -> {tmp_path / 'out' / 'test_outputs.jsonl'} (0 ERROR rows) (2 {SKIPPED_OVERLONG} rows)" \
        in res.stdout
    rows = _rows(tmp_path / "out" / "test_outputs.jsonl")
    assert [(r["prediction_raw"] == SKIPPED_OVERLONG, r["skipped_overlong"]) for r in rows] == \
        [(True, True), (True, True), (False, False), (False, False)]
    assert rows[0]["reference"] == "You see room 0." and rows[0]["generated"] == SKIPPED_OVERLONG
    summary = json.loads((tmp_path / "out" / "eval_generate_config.json").read_text())
    assert summary["prompts_skipped_overlong"] == 2 and summary["datasets"]["test"]["skipped_overlong"] == 2
    assert summary["prompt_budget"] == budget
    config, decode = summary["config"], summary["config"]["decode"]
    assert (config["per_batch"], config["max_model_len"]) == (2, budget + 68)
    assert (decode["gen_length"], decode["window_size"], decode["entropy_threshold"], decode["position_penalty"],
            decode["temperature"]) == (4, 4, 0.5, 0.01, 0.0)


def test_every_flag_of_the_papers_sdar_script(run, tiny_sdar_dir, tmp_path):
    """All 17 flags of the paper's sdar/eval_generate.py, plus --max-model-len (ours here, the WeDLM script's
    there): skipped rows, and the skipped_overlong key on every row."""
    _write_data(tmp_path / "data", ["test"], pattern="wm_{name}.jsonl", long_rows=1)
    res = run("sdar/eval_generate.py", "--sdar-dir", str(tmp_path / "SDAR"), "--model-path",
              str(tiny_sdar_dir), "--data-dir", str(tmp_path / "data"), "--datasets", "test",
              "--file-pattern", "wm_{name}.jsonl", "--output-dir", str(tmp_path / "out"), "--num-gpus", "0",
              "--prompt-truncate", "100", "--gen-length", "4", "--block-length", "4", "--denoising-steps",
              "2", "--per-batch", "2", "--temperature", "0", "--top-p", "0.9", "--top-k", "5",
              "--confidence-threshold", "0.8", "--remasking-strategy", "low_confidence_static",
              "--max-model-len", "218")
    assert res.returncode == 0, res.stderr[-3000:]
    rows = _rows(tmp_path / "out" / "test_outputs.jsonl")
    assert all(set(r) == SDAR_PAPER_KEYS | {"skipped_overlong"} for r in rows)
    assert [r["skipped_overlong"] for r in rows] == [True, False, False, False]
    assert rows[0]["prediction_raw"] == SKIPPED_OVERLONG and f"(1 {SKIPPED_OVERLONG} rows)" in res.stdout
    config = json.loads((tmp_path / "out" / "eval_generate_config.json").read_text())["config"]
    decode = config["decode"]
    assert (config["num_gpus"], config["prompt_truncate"], config["per_batch"]) == (0, 100, 2)
    assert (decode["gen_length"], decode["block_length"], decode["denoising_steps"], decode["temperature"],
            decode["top_p"], decode["top_k"], decode["confidence_threshold"], decode["remasking_strategy"]) == \
        (4, 4, 2, 0.0, 0.9, 5, 0.8, "low_confidence_static")


REQUIRED = ["--model-path", "m", "--data-dir", "d", "--datasets", "test", "--output-dir", "o"]


def test_the_papers_spellings_are_aliases_of_ours():
    paper = ConfigCLI(EvalGenerateConfig).parse([*REQUIRED, "--max-output-tokens", "7", "--batch-size", "3",
                                                 "--wedlm-window-size", "5", "--wedlm-entropy-threshold", "0.3",
                                                 "--wedlm-pos-penalty-factor", "0.1"])[0]
    ours = ConfigCLI(EvalGenerateConfig).parse([*REQUIRED, "--gen-length", "7", "--per-batch", "3",
                                                "--window-size", "5", "--entropy-threshold", "0.3",
                                                "--position-penalty", "0.1"])[0]
    assert paper == ours and paper.decode.gen_length == 7 and paper.per_batch == 3


def test_wedlm_defaults_are_the_papers_wedlm_script_defaults():
    """The paper's wedlm/eval_generate.py argparse defaults, written here by hand; sdar's stay the paper's
    sdar/eval_generate.py defaults (--max-model-len off: that script has none)."""
    wedlm = ConfigCLI(WeDLMEvalGenerateConfig).parse(REQUIRED)[0]
    assert (wedlm.max_model_len, wedlm.decode.gen_length, wedlm.per_batch, wedlm.decode.window_size,
            wedlm.decode.entropy_threshold, wedlm.decode.position_penalty, wedlm.decode.temperature) == \
        (16384, 8192, 32, 16, 0.6, 0.02, 0.0)
    assert wedlm.prompt_truncate is None and wedlm.retry_singly and wedlm.prompt_budget() == 16384 - 8192 - 64
    sdar = ConfigCLI(EvalGenerateConfig).parse(REQUIRED)[0]
    assert (sdar.decode.gen_length, sdar.decode.block_length, sdar.decode.denoising_steps, sdar.per_batch,
            sdar.prompt_truncate, sdar.decode.temperature, sdar.decode.top_p, sdar.decode.top_k,
            sdar.decode.confidence_threshold, sdar.decode.remasking_strategy) == \
        (1024, 4, 4, 8, 8000, 1.0, 1.0, 0, 0.85, "low_confidence_dynamic")
    assert sdar.max_model_len is None and sdar.prompt_budget() is None and not sdar.retry_singly


def test_a_max_model_len_that_leaves_no_prompt_room_is_refused():
    with pytest.raises(ConfigError, match=r"--max-model-len 100 leaves no room for a prompt"):
        ConfigCLI(WeDLMEvalGenerateConfig).parse([*REQUIRED, "--max-model-len", "100", "--max-output-tokens", "40"])


def _jobs(n: int) -> list[Job]:
    return [Job(dataset="test", index=i, prompt=chat(user=SHORT.format(i=i))["messages"][:-1],
                reference=f"ref {i}") for i in range(n)]


def test_a_prompt_of_exactly_the_budget_is_generated_one_more_token_is_skipped(tiny_wedlm_dir):
    """The paper's rule (wedlm/eval_generate.py ``load_eval``): skipped when prompt tokens > max_model_len -
    max_output_tokens - 64, the prompt measured as its rendered chat template."""
    from transformers import AutoTokenizer

    from textwm.data.chat_encoder import ChatEncoder

    (job,) = _jobs(1)
    length = len(ChatEncoder(AutoTokenizer.from_pretrained(tiny_wedlm_dir)).prompt_ids(job.prompt))
    kept, skipped = [run_shard(WeDLMEvalGenerateConfig(
        model_path=str(tiny_wedlm_dir), data_dir="d", datasets=["test"], output_dir="o",
        max_model_len=length + 2 + 64 - cut, decode=DecodeSettings(gen_length=2, temperature=0)),
        [job], device="cpu") for cut in (0, 1)]
    assert kept.skipped_overlong == 0 and kept.rows[0]["prediction_raw"] != SKIPPED_OVERLONG
    assert skipped.skipped_overlong == 1 and skipped.rows[0]["prediction_raw"] == SKIPPED_OVERLONG
    assert skipped.rows[0]["skipped_overlong"] is True and skipped.tokens == 0


@pytest.mark.parametrize("retry", [False, True])
def test_a_failed_batch_is_retried_row_by_row_with_retry_singly(retry, tiny_wedlm_dir, caplog):
    """Every forward fails (mask id outside the embedding): the whole batch becomes ERROR rows, after a retry
    of each row alone under --retry-singly (the paper's WeDLM script), each counted once."""
    config = WeDLMEvalGenerateConfig(model_path=str(tiny_wedlm_dir), data_dir="d", datasets=["test"],
                                     output_dir="o", mask_token_id=999999, retry_singly=retry, per_batch=3)
    with caplog.at_level("INFO"):
        result = run_shard(config, _jobs(3), device="cpu")
    assert result.errors == 3 and all(r["prediction_raw"].startswith("ERROR: ") for r in result.rows)
    failures = [r for r in caplog.records if "failed" in r.getMessage()]
    assert len(failures) == (4 if retry else 1)
