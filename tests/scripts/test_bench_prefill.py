"""The prefill benchmark: the trace's prompts in a GRPO step's order, joined into a real engine with and without
the prefix cache (a tiny random SDAR model on the bundled ScienceWorld rows)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import bench_prefill  # noqa: E402
import bench_wm_trace  # noqa: E402


def test_prompts_go_group_by_group_turn_by_turn():
    rollouts = [[["g0r0t0", "g0r0t1"], ["g0r1t0"]], [["g1r0t0"]]]
    assert bench_wm_trace.trace_prompts(rollouts) == ["g0r0t0", "g0r1t0", "g0r0t1", "g1r0t0"]


def test_the_cache_arm_finds_the_groups_shared_prefixes_and_the_other_computes_everything(tmp_path):
    out = tmp_path / "prefill.json"
    assert bench_prefill.main(["--rows", str(ROOT / "data/samples/sciworld_wm_train.jsonl"), "--groups", "2",
                               "--group-size", "4", "--max-turns", "2", "--join", "4", "--out", str(out)]) == 0
    cache, nocache = json.loads(out.read_text())["arms"]
    assert cache["prompt_tokens"] == nocache["prompt_tokens"] > 0
    assert cache["hit_tokens"] > 0 and cache["computed_tokens"] < cache["prompt_tokens"]
    assert nocache["hit_tokens"] == 0 and nocache["computed_tokens"] == nocache["prompt_tokens"]
    assert cache["joins"] == nocache["joins"] == 4
