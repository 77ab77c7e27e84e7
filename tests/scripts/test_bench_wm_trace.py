"""The GRPO trace benchmark: its groups and rollouts from world-model rows, its bound on cacheable prompt tokens,
and one replay against a real server on loopback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import bench_wm_trace as trace  # noqa: E402


def row(task, step, text, episode=None):
    messages = [{"role": "system", "content": f"task {task}"}, {"role": "user", "content": text},
                {"role": "assistant", "content": f"answer {text}"}]
    out = {"task_id": task, "step": str(step), "messages": json.dumps(messages)}
    if episode is not None:
        out["episode"] = episode
    return out


def test_a_group_is_a_task_whose_rollouts_take_its_episodes_in_turn():
    rows = [row("a", 1, "a1 second", "a/x"), row("a", 0, "a1 first", "a/x"), row("a", 0, "a2 first", "a/y"),
            row("b", 0, "b first"), row("b", 1, "b second")]
    groups = trace.rollouts_of(rows, groups=2, group_size=3, seed=0)
    by_task = {g[0][0][0]["content"]: g for g in groups}
    a = by_task["task a"]
    assert [[turn[1]["content"] for turn in rollout] for rollout in a] == [
        ["a1 first", "a1 second"], ["a2 first"], ["a1 first", "a1 second"]]
    assert all(turn[-1]["role"] == "user" for rollout in a for turn in rollout)   # the answer is not sent
    assert [len(r) for r in by_task["task b"]] == [2, 2, 2]                     # no episode key: one episode
    assert [len(r) for g in trace.rollouts_of(rows, groups=2, group_size=2, seed=0, max_turns=1) for r in g] == [1] * 4


def test_rows_the_trace_cannot_use_are_named():
    with pytest.raises(ValueError, match="f.jsonl: row 2 has no step"):
        trace.rollouts_of([row("a", 0, "x"), {"task_id": "a", "messages": "[]"}], groups=1, group_size=1, seed=0,
                          where="f.jsonl")
    with pytest.raises(ValueError, match="1 tasks, fewer than the 2 groups"):
        trace.rollouts_of([row("a", 0, "x")], groups=2, group_size=1, seed=0)


def test_the_bound_counts_repeated_prompts_whole_and_else_whole_blocks_sent_before():
    first = list(range(150))
    assert trace.shareable_tokens([first]) == 0
    assert trace.shareable_tokens([first, first]) == 150            # a repeat is shared whole
    assert trace.shareable_tokens([first, [*first, 7]]) == 128      # 2 whole blocks before the last token
    assert trace.shareable_tokens([first, first[:64] + [999] * 86]) == 64
    # The last token of a prompt that is no repeat is always computed: a block that holds it is not cacheable.
    assert trace.shareable_tokens([first[:65], [*first[:65], 1]]) == 64
    assert trace.shareable_tokens([first[:64], [*first[:64], 1]]) == 0


@pytest.mark.slow           # a tiny server started, two replays: ~25 s on 2 cores
def test_a_replay_against_a_fresh_server_counts_its_cache_hits(tmp_path):
    out = tmp_path / "trace.json"
    res = subprocess.run([sys.executable, "scripts/bench_wm_trace.py", "--rows", "data/samples/sciworld_wm_train.jsonl",
                          "--groups", "2", "--group-size", "4", "--concurrency", "8", "--max-tokens", "4",
                          "--max-turns", "3", "--replays", "2", "--max-batch-size", "8", "--out", str(out)],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    report = json.loads(out.read_text())
    (runs,) = report["servers"]
    assert [r["requests"] for r in runs] == [24, 24] and all(r["failed"] == 0 for r in runs)
    for run, bound in zip(runs, report["upper_bound"]):
        # The rollouts of a group share their task's prompt: the server takes some of it from its cache, never
        # more than a cache of every block could.
        assert 0 < run["cache_hit_tokens"] <= bound["shareable_tokens"]
        assert run["generated_tokens_per_s"] > 0 and run["p99_ms"] >= run["p50_ms"]
