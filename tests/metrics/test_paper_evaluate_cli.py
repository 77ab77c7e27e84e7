"""Every ``python evaluate.py ...`` line of the paper's READMEs (and its scripts' usage docstrings), run
through OUR ``sdar/``, ``wedlm/`` and ``llm_training/evaluate.py`` with exactly those flags.

Paths of the paper's commands (``./outputs/eval_results``, ``./data``) are re-rooted in ``tmp_path`` and the
endpoint ``http://localhost:8000`` becomes a scripted loopback server; the prediction files are written in
the row formats of the paper's generators (``sdar/eval_generate.py``: index, config, prediction_raw,
reference, generated, ground_truth; ``wedlm/eval_generate.py``: index, prediction_raw, reference, config,
skipped_overlong). Each dataset keeps one row, so MAUVE (which needs two) is skipped and every run is fast.
"""

import json
import shlex

import pytest
from rouge import Rouge

from tests.conftest import chat, run_script, write_lines
from tests.serving.scripted_http import ScriptedServer
from textwm.data.markers import SKIPPED_OVERLONG

OUT = "./outputs/eval_results"

#: (where the paper prints it, our script, the paper's flags verbatim).
PAPER_SCORE_COMMANDS = [
    ("README.md, SDAR", "sdar/evaluate.py", f"--input-dir {OUT} --datasets eval --output-dir {OUT}"),
    ("README.md, WeDLM", "wedlm/evaluate.py", f"--input-dir {OUT} --datasets eval --output-dir {OUT}"),
    ("sdar/README.md step 9", "sdar/evaluate.py", f"--input-dir {OUT} --datasets test --output-dir {OUT}"),
    ("sdar/README.md step 9, 'add: --extract-output-field api_bank'", "sdar/evaluate.py",
     f"--input-dir {OUT} --datasets test --output-dir {OUT} --extract-output-field api_bank"),
    ("wedlm/README.md step 8", "wedlm/evaluate.py", f"--input-dir {OUT} --datasets test --output-dir {OUT}"),
    ("wedlm/README.md step 8, 'add: --extract-output-field api_bank'", "wedlm/evaluate.py",
     f"--input-dir {OUT} --datasets test --output-dir {OUT} --extract-output-field api_bank"),
    ("sdar/evaluate.py usage", "sdar/evaluate.py",
     f"--input-dir {OUT} --datasets test occubench api_bank --output-dir {OUT} --extract-output-field api_bank"),
    ("wedlm/evaluate.py usage", "wedlm/evaluate.py",
     f"--input-dir {OUT} --datasets occubench api_bank intercode --output-dir {OUT}"),
]
API = "http://localhost:8000/v1/chat/completions"
PAPER_API_COMMANDS = [
    ("README.md, AR baselines", f"--api-url {API} --model qwen3_8b_wm --data-dir ./data --datasets test "
                                "--output-dir ./output/eval_results"),
    ("llm_training/README.md step 6", f"--api-url {API} --model qwen3_demo --data-dir ./data --datasets test "
                                      "--output-dir ./output/eval_results"),
    ("llm_training/evaluate.py usage", f"--api-url {API} --model my-model --data-dir ./data "
                                       "--datasets test eval_a eval_b --output-dir ./output/eval_results"),
]
#: Fields the paper's scorer writes per kept row / per dataset; ours writes these and more.
PAPER_SCORED_FIELDS = {"index", "prediction_raw", "prediction_clean", "reference_raw", "reference_clean", "match"}
PAPER_SUMMARY_KEYS = {"num_samples", "exact_match", "semantic_match", "rouge_l_f1", "num_empty_ref_dropped"}

API_BANK_REF = json.dumps({"api_name": "Search", "input": {"q": "x"}, "output": [1, 2], "exception": None})
API_BANK_PRED = '{"output": [1, 2], "exception": null}'


def _argv(flags: str, tmp_path, url: str | None = None) -> list[str]:
    """The paper's flags with ``./...`` paths moved under ``tmp_path`` and the endpoint replaced."""
    args = []
    for arg in shlex.split(flags):
        if url and arg.startswith("http://localhost:8000"):
            arg = url + arg.removeprefix("http://localhost:8000")
        elif arg.startswith("./"):
            arg = str(tmp_path / arg[2:])
        args.append(arg)
    return args


def _datasets(argv: list[str]) -> list[str]:
    i = argv.index("--datasets") + 1
    names = []
    while i < len(argv) and not argv[i].startswith("--"):
        names.append(argv[i])
        i += 1
    return names


def _target(name: str) -> tuple[str, str]:
    """(prediction, reference) of the one row per dataset that is kept and scored."""
    return (API_BANK_PRED, API_BANK_REF) if name == "api_bank" else ("You see a door. It is open.",) * 2


def _sdar_rows(name: str) -> list[dict]:
    """sdar/eval_generate.py rows: one good row, its duplicate from a second shard, an ERROR row, an empty reference."""
    pred, ref = _target(name)

    def row(i, p, r):
        return {"index": i, "config": name, "prediction_raw": p, "reference": r, "generated": p, "ground_truth": r}
    return [row(0, pred, ref), row(0, pred, ref), row(1, "ERROR: RuntimeError: CUDA out of memory", ref),
            row(2, "anything", "<think>only a thought</think>")]


def _wedlm_rows(name: str) -> list[dict]:
    """wedlm/eval_generate.py rows: one good row, an overlong prompt, an empty reference."""
    pred, ref = _target(name)

    def row(i, p, r, overlong=False):
        return {"index": i, "prediction_raw": p, "reference": r, "config": name, "skipped_overlong": overlong}
    return [row(0, pred, ref), row(1, SKIPPED_OVERLONG, "You see a very long room.", overlong=True),
            row(2, "anything", "<tool_response> </tool_response>")]


def _check_outputs(out, names, *, extract: set[str]) -> dict:
    summary = json.loads((out / "eval_summary.json").read_text())
    assert list(summary) == names
    for name in names:
        s = summary[name]
        assert set(s) >= PAPER_SUMMARY_KEYS and s["rouge_impl"] == "rouge_score"
        assert s["num_samples"] == 1 and s["num_empty_ref_dropped"] == 1
        matched = name != "api_bank" or name in extract
        assert s["exact_match"] == (1.0 if matched else 0.0)
        scored = [json.loads(line) for line in (out / f"{name}_scored.jsonl").read_text().splitlines()]
        assert len(scored) == 1 and set(scored[0]) >= PAPER_SCORED_FIELDS and scored[0]["match"] is matched
    assert (out / "eval_summary.md").read_text().startswith("# World-model scores")
    assert (out / "eval_summary.png").read_bytes()[:4] == b"\x89PNG"
    return summary


@pytest.mark.parametrize(("where", "script", "flags"), PAPER_SCORE_COMMANDS, ids=[c[0] for c in PAPER_SCORE_COMMANDS])
def test_paper_score_command(tmp_path, where, script, flags):
    argv = _argv(flags, tmp_path)
    names = _datasets(argv)
    out = tmp_path / OUT[2:]
    out.mkdir(parents=True)
    rows = _wedlm_rows if script.startswith("wedlm") else _sdar_rows
    for name in names:
        write_lines(out / f"{name}_outputs.jsonl", rows(name))
    res = run_script(script, *argv)
    assert res.returncode == 0, res.stderr
    extract = set(argv[argv.index("--extract-output-field") + 1:]) if "--extract-output-field" in argv else set()
    summary = _check_outputs(out, names, extract=extract)
    table = (out / "eval_summary.md").read_text()
    for name in names:
        if script.startswith("wedlm"):
            assert summary[name]["num_skipped_overlong"] == 1 and summary[name]["num_dropped_errors"] == 0
            assert f"{name}: dropped 1 overlong prompts, 1 empty references." in table
        else:
            assert (summary[name]["num_duplicates_dropped"], summary[name]["num_dropped_errors"]) == (1, 1)
            assert f"{name}: dropped 1 duplicate indices, 1 ERROR predictions, 1 empty references." in table
    if extract - set(names):
        assert "--extract-output-field names datasets not in --datasets: api_bank (ignored)" in res.stderr


def test_keep_overlong_scores_the_marker_rows(tmp_path):
    out = tmp_path / "eval"
    out.mkdir()
    write_lines(out / "test_outputs.jsonl", _wedlm_rows("test"))
    res = run_script("wedlm/evaluate.py", "--input-dir", str(out), "--datasets", "test", "--output-dir", str(out),
                     "--keep-overlong", "--no-mauve")
    assert res.returncode == 0, res.stderr
    summary = json.loads((out / "eval_summary.json").read_text())["test"]
    assert (summary["num_samples"], summary["num_skipped_overlong"], summary["exact_match"]) == (2, 0, 0.5)
    scored = [json.loads(line) for line in (out / "test_scored.jsonl").read_text().splitlines()]
    assert scored[1]["prediction_raw"] == SKIPPED_OVERLONG and scored[1]["match"] is False


def test_rouge_impl_pltrdy_on_a_paper_command(tmp_path):
    flags = PAPER_SCORE_COMMANDS[2][2] + " --rouge-impl pltrdy"
    out = tmp_path / OUT[2:]
    out.mkdir(parents=True)
    pred, ref = "You see a door. It is red.", "You see the door. It is blue."
    write_lines(out / "test_outputs.jsonl", [{"index": 0, "config": "test", "prediction_raw": pred, "reference": ref,
                                              "generated": pred, "ground_truth": ref}])
    res = run_script("sdar/evaluate.py", *_argv(flags, tmp_path))
    assert res.returncode == 0, res.stderr
    summary = json.loads((out / "eval_summary.json").read_text())["test"]
    expected = Rouge().get_scores(pred, ref)[0]["rouge-l"]["f"]
    assert (summary["rouge_impl"], summary["rouge_l_f1"], summary["num_rouge_errors"]) == ("pltrdy", expected, 0)
    assert "ROUGE-L: pltrdy (PyPI rouge, rouge-l f, as the paper's evaluate.py)." in (out / "eval_summary.md").read_text()


@pytest.fixture
def echo_server():
    """An OpenAI-compatible endpoint answering each prompt with the reference the test put in it."""
    def respond(method, path, body):
        if method == "GET":
            return 200, {"object": "list", "data": [{"id": "wm", "object": "model"}]}, 0
        answer = body["messages"][-1]["content"].removeprefix("answer: ")
        return 200, {"choices": [{"index": 0, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": answer}}]}, 0
    server = ScriptedServer(respond)
    yield server
    server.close()


@pytest.mark.parametrize(("where", "flags"), PAPER_API_COMMANDS, ids=[c[0] for c in PAPER_API_COMMANDS])
def test_paper_generate_and_score_command(tmp_path, echo_server, where, flags):
    argv = _argv(flags, tmp_path, url=echo_server.url)
    names = _datasets(argv)
    data = tmp_path / "data"
    data.mkdir()
    for name in names:
        ref = f"You see the {name} room."
        write_lines(data / f"{name}.jsonl", [chat(user=f"answer: {ref}", answer=ref)])
    res = run_script("llm_training/evaluate.py", *argv)
    assert res.returncode == 0, res.stderr
    out = tmp_path / "output" / "eval_results"
    summary = json.loads((out / "eval_summary.json").read_text())
    assert list(summary) == names
    model = argv[argv.index("--model") + 1]
    posts = [body for method, _, body in echo_server.requests if method == "POST"]
    assert {body["model"] for body in posts} == {model} and len(posts) == len(names)
    for name in names:
        assert set(summary[name]) >= PAPER_SUMMARY_KEYS
        assert (summary[name]["num_samples"], summary[name]["exact_match"]) == (1, 1.0)
        generated = [json.loads(line) for line in (out / f"{name}_outputs.jsonl").read_text().splitlines()]
        assert len(generated) == 1 and {"index", "prediction_raw"} <= set(generated[0])
        scored = [json.loads(line) for line in (out / f"{name}_scored.jsonl").read_text().splitlines()]
        assert set(scored[0]) >= PAPER_SCORED_FIELDS and scored[0]["match"] is True


def test_generation_flags_without_api_url_are_announced(tmp_path):
    write_lines(tmp_path / "test_outputs.jsonl", _sdar_rows("test"))
    res = run_script("llm_training/evaluate.py", "--input-dir", str(tmp_path), "--datasets", "test", "--model", "m",
                     "--max-workers", "4", "--output-dir", str(tmp_path / "o"))
    assert res.returncode == 0, res.stderr
    assert "notice: --model, --concurrency only apply with --api-url (generation); ignored" in res.stderr
    res = run_script("llm_training/evaluate.py", "--model", "m", "--datasets", "test", "--output-dir", str(tmp_path))
    assert res.returncode == 2 and "--input-dir is required (or give --api-url" in res.stderr
