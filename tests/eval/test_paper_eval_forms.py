"""The paper's evaluation command lines (eval_fast.py, eval_openai.py, eval_parallel.py's and eval_sciworld.py's
positional forms) map onto our flags; each entry point answers --help and refuses a bad flag."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from textwm.eval import parallel
from textwm.eval.paper_forms import (
    OPENAI_URL,
    agent_flags,
    device_of,
    episodes_dir,
    eval_fast_argvs,
    eval_openai_argv,
    sciworld_argv,
)

ROOT = Path(__file__).resolve().parents[2]


def _value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_device_episodes_dir_and_agent_flags():
    assert device_of("3") == "cuda:3" and device_of("cpu") == "cpu" and device_of("cuda:1") == "cuda:1"
    assert episodes_dir(Path("/tmp/x/out.jsonl")) == Path("/tmp/x/out_eval")
    assert agent_flags("expert") == ["--agent", "expert"]
    assert agent_flags("http://h:1/v1", agent_model="m") == ["--agent-url", "http://h:1/v1", "--agent-model", "m"]
    assert agent_flags("ckpt", device="cuda:0", batch_size=4) == ["--agent-path", "ckpt", "--agent-batch-size", "4",
                                                                  "--device", "cuda:0"]


def test_eval_fast_is_one_eval_parallel_positional_form_per_checkpoint(tmp_path):
    runs = eval_fast_argvs(["runs/a/checkpoint-10", "runs/b/checkpoint-20/", "--dataset", "rows.jsonl", "--gpus", "2",
                            "--out-dir", str(tmp_path)])
    assert runs[0] == ["runs/a/checkpoint-10", "rows.jsonl", str(tmp_path / "eval_checkpoint-10.jsonl"), "2",
                       "--max-turns", "35", "--parallel", "32", "--paper-form", "fast"]
    assert runs[1][2] == str(tmp_path / "eval_checkpoint-20.jsonl")
    argv, out_file = parallel.eval_argv(parallel.parse(runs[0]), "alfworld")
    assert out_file == tmp_path / "eval_checkpoint-10.jsonl"
    assert _value(argv, "--device") == "cuda:2" and _value(argv, "--agent-path") == "runs/a/checkpoint-10"
    assert _value(argv, "--output-dir") == str(tmp_path / "eval_checkpoint-10_eval")


def test_eval_fast_refuses_what_it_cannot_reproduce():
    with pytest.raises(ValueError, match="--gpus '0,3'"):
        eval_fast_argvs(["ckpt", "--dataset", "r.jsonl", "--gpus", "0,3"])
    with pytest.raises(ValueError, match="share a basename"):
        eval_fast_argvs(["a/ckpt", "b/ckpt", "--dataset", "r.jsonl"])
    with pytest.raises(SystemExit):
        eval_fast_argvs(["ckpt", "--dataset", "r.jsonl", "--tp", "2"])


def test_eval_openai_is_an_endpoint_agent_with_an_episodes_file(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    out = tmp_path / "oai.jsonl"
    flags = eval_openai_argv(["gpt-x", "rows.jsonl", str(out), "--max-turns", "50", "--concurrency", "16",
                              "--limit", "5"])
    argv, out_file = parallel.eval_argv(parallel.parse(flags), "alfworld")
    assert out_file == out and _value(argv, "--output-dir") == str(tmp_path / "oai_eval")
    assert _value(argv, "--agent-url") == OPENAI_URL and _value(argv, "--agent-model") == "gpt-x"
    assert _value(argv, "--workers") == "16" and _value(argv, "--max-turns") == "50"
    assert _value(argv, "--episodes") == "5"
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    assert _value(eval_openai_argv(["m", "r", "o"]), "--agent") == "http://127.0.0.1:9/v1"


def test_sciworld_positional_form_maps_to_agent_real():
    argv = sciworld_argv(["ckpt", "rows.jsonl", "lfm_sft", "1", "--max-turns", "20"])
    assert argv == ["agent-real", "--agent-path", "ckpt", "--rows", "rows.jsonl", "--device", "cuda:1",
                    "--output-dir", str(Path("data") / "eval_lfm_sft"), "--max-turns", "20"]
    ours = ["agent-real", "--rows", "r.jsonl", "--agent-url", "http://h/v1", "--output-dir", "d"]
    assert sciworld_argv(ours) == ours and sciworld_argv(["--rows", "r", "all"]) == ["--rows", "r", "all"]
    with pytest.raises(ValueError, match="CKPT ROWS LABEL GPU"):
        sciworld_argv(["ckpt", "rows.jsonl", "label"])


def _script(path: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / path), *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("path", ["alfworld/eval_fast.py", "alfworld/eval_openai.py", "sciworld/eval_sciworld.py"])
def test_entry_points_answer_help(path):
    done = _script(path, "--help")
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout


def test_entry_points_refuse_bad_flags():
    assert "unrecognized arguments: --bogus" in _script("alfworld/eval_fast.py", "c", "--dataset", "r",
                                                        "--bogus").stderr
    assert _script("alfworld/eval_openai.py", "m", "r", "o", "--bogus").returncode == 2
    bad = _script("sciworld/eval_sciworld.py", "ckpt", "rows.jsonl")
    assert bad.returncode == 2 and "CKPT ROWS LABEL GPU" in bad.stderr


def _record(task_id, **kw):
    base = {"task_id": task_id, "task": "t", "score": 0.0, "success": False, "done": False, "turns": 2,
            "reason": "max_turns", "actions": ["look", "look"], "replies": ["Action: look", "Action: look"],
            "error": None}
    return {**base, **kw}


def test_alfworld_paper_rows_have_the_papers_fields_per_form():
    from textwm.eval.paper_outputs import ALFWORLD_FIELDS, alfworld_report, alfworld_rows

    rows = [{"game_file": "g/0", "task_type": "pick", "messages": [{"role": "system", "content": "s"}, {
        "role": "user", "content": "You are in a room.\nYour task is to: put a mug in cabinet.\nAdmissible: ..."}]},
            {"game_file": "g/1", "task_type": "cool", "messages": []}]
    records = [_record("a", success=True, reason="success", done=True),
               _record("b", reason="unparseable_streak", actions=[None], replies=["hmm"], turns=1)]
    for form, fields in ALFWORLD_FIELDS.items():
        out = alfworld_rows(records, rows, form)
        assert [list(r) for r in out] == [list(fields)] * 2
    full = alfworld_rows(records, rows, "parallel")
    assert full[0] == {"i": 0, "won": True, "turns": 2, "kill": None, "task_type": "pick",
                            "goal": "put a mug in cabinet.", "game_file": "g/0", "messages": None,
                            "raw_completions": ["Action: look", "Action: look"], "parsed_actions": ["look", "look"]}
    assert (full[1]["kill"], full[1]["parsed_actions"], full[1]["goal"]) == ("unparseable", [None], "")
    assert alfworld_rows([_record("c", reason="agent_error", error="429")], rows, "openai")[0]["kill"] == "api_error:429"
    assert alfworld_rows([_record("c")], rows, "fast")[0]["kill"] == "turn_cap"
    assert alfworld_report(full).splitlines()[0] == "Final: 1/2 = 0.500"
    with pytest.raises(ValueError, match="form must be one of"):
        alfworld_rows(records, rows, "eval")


def test_sciworld_paper_form_also_writes_the_papers_json(tmp_path, monkeypatch, capsys):
    import json

    from textwm.eval.paper_forms import write_sciworld_paper_json

    monkeypatch.chdir(tmp_path)
    (tmp_path / "data" / "eval_lab").mkdir(parents=True)
    records = [_record("boil_v1", score=100.0, done=True, reason="success", actions=["a", "a", "a", "a", None]),
               _record("boil_v2", score=0.0, reason="env_error", error="JVM died", actions=[])]
    (tmp_path / "data/eval_lab/episodes_real.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (tmp_path / "rows.jsonl").write_text(json.dumps({"task_id": "boil_v1", "instruction": "x" * 80}) + "\n")
    path = write_sciworld_paper_json(["ckpt", "rows.jsonl", "lab", "0"])
    assert path == Path("data/eval_lab.json")
    paper = json.loads(path.read_text())
    assert list(paper) == ["label", "avg_score", "results"] and paper["avg_score"] == 50.0
    assert paper["results"][0] == {"score": 100.0, "n_steps": 4, "done": True, "n_repeated": 2, "last_action": "a",
                                   "task_id": "boil_v1", "instruction": "x" * 60}
    assert paper["results"][1]["error"] == "JVM died" and paper["results"][1]["instruction"] is None
    assert "Average score:     50.0/100" in capsys.readouterr().out
