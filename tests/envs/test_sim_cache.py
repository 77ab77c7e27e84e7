"""The start-state cache over a test env that bakes its start states from its real game (the toy house): rows
without ``sim_task`` completed once, read back from the cache, the CLI, the in-WM evaluation loader, failures
named by row. (ScienceWorld's own bake, real JVMs: tests/rl/test_sciworld_paper_rows.py.)"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import pytest

from tests.conftest import write_lines
from tests.envs.toy import world
from tests.envs.toy.spec import ToySpec, bake, rl_row
from textwm.data.jsonl import DataError
from textwm.envs.protocol import EnvFailed
from textwm.envs.registry import register
from textwm.envs.sim_cache import SimTaskCache, cache_dir, main, options_key
from textwm.envs.simulator import Simulator
from textwm.eval import closed_loop


class BakingToySpec(ToySpec):
    """The toy env, able to bake a row's missing start state in its real game; counts sessions and bakes."""

    name = "toybake"
    builds_sim_tasks = True

    def __init__(self, crash_on: str = ""):
        self.crash_on, self.sessions, self.bakes = crash_on, 0, 0

    def open_session(self, config: Any = None) -> world.ToyHouse:
        self.sessions += 1
        return world.ToyHouse()

    def build_sim_task(self, session: world.ToyHouse, task_id: str, reset_options: Any) -> dict[str, Any]:
        if task_id == self.crash_on:
            raise EnvFailed("the game process died")
        self.bakes += 1
        return asdict(bake(session, task_id))

    def sim_task_version(self) -> str:
        return "toy=1"


def paper_row(task_id: str) -> dict[str, Any]:
    """A row as the paper releases them: ``messages`` a JSON string, no ``sim_task``."""
    row = rl_row(bake(world.ToyHouse(), task_id))
    del row["sim_task"]
    return {**row, "messages": json.dumps(row["messages"]), "ground_truth": ""}


def test_rows_are_completed_once_then_read_from_the_cache(tmp_path):
    spec = BakingToySpec()
    rows = [paper_row("toy_v0"), paper_row("toy_v1"), paper_row("toy_v0"), rl_row(bake(world.ToyHouse(), "toy_v2"))]
    cache = SimTaskCache(spec, tmp_path, workers=2, progress=False)
    done = cache.complete(rows)
    assert (cache.stats.built, cache.stats.cached, spec.bakes) == (2, 0, 2)   # one per task id, toy_v2 had its own
    assert sorted(p.name for p in (tmp_path / "toybake").iterdir()) == ["toy_v0__default.json", "toy_v1__default.json"]
    for row, out in zip(rows, done):  # every other column as it was, the paper's messages (a JSON string) too
        assert {k: v for k, v in out.items() if k != "sim_task"} == {k: v for k, v in row.items() if k != "sim_task"}
        assert spec.load_row(out, need_sim=True).sim_task.task_id == row["task_id"]
    assert done[3] == rows[3]
    start = spec.load_row(done[0], need_sim=True)
    assert [dict(m) for m in start.messages] == json.loads(rows[0]["messages"])  # the row's conversation, kept
    # A new cache (another process) finds them without opening the env.
    again = BakingToySpec()
    cache = SimTaskCache(again, tmp_path, progress=False)
    assert cache.complete(rows) == done and (cache.stats.built, cache.stats.cached, again.sessions) == (0, 2, 0)
    # A start state built under another version is built again.
    record = json.loads(cache.path_of("toy_v0", {}).read_text())
    cache.path_of("toy_v0", {}).write_text(json.dumps({**record, "version": "toy=0"}))
    cache.complete(rows[:1])
    assert again.bakes == 1 and json.loads(cache.path_of("toy_v0", {}).read_text())["version"] == "toy=1"


def test_build_failures_name_the_row_and_the_task(tmp_path):
    rows = [paper_row("toy_v0"), {**paper_row("toy_v0"), "task_id": "toy_v99"}]
    with pytest.raises(DataError, match=r"rows.jsonl:2: task_id: task 'toy_v99' has no start state to build: .*0..8"):
        SimTaskCache(BakingToySpec(), tmp_path).complete(rows, path="rows.jsonl", lines=[1, 2])
    path = write_lines(tmp_path / "rows.jsonl", [paper_row("toy_v0"), paper_row("toy_v1")])
    spec = BakingToySpec(crash_on="toy_v1")
    cache = SimTaskCache(spec, tmp_path, progress=False)
    with pytest.raises(DataError, match=r"rows.jsonl:2: task_id: cannot build .* task 'toy_v1' .*EnvFailed: the game "
                                        r"process died"):
        closed_loop.load_rows(spec, str(path), need_sim=True, sim_cache=cache)
    assert cache.path_of("toy_v0", {}).is_file() and not cache.path_of("toy_v1", {}).exists()  # kept for a rerun
    # An env that cannot bake refuses the row by name, as without a cache.
    with pytest.raises(DataError, match=r"rows.jsonl:1: sim_task: row 'toy_v0' has no 'sim_task'"):
        closed_loop.load_rows(ToySpec(), str(path), need_sim=True, sim_cache=SimTaskCache(ToySpec(), tmp_path))


def test_in_wm_evaluation_plays_completed_rows(tmp_path):
    path = write_lines(tmp_path / "rows.jsonl", [paper_row("toy_v0")])
    spec = BakingToySpec()
    starts = closed_loop.load_rows(spec, str(path), need_sim=True, sim_cache=SimTaskCache(spec, tmp_path))
    from tests.eval.helpers import ScriptAgent

    result = closed_loop.evaluate_agent_wm(spec, starts, ScriptAgent(["look", "go to kitchen"]),
                                           Simulator(None, use_local=True), max_turns=2, progress=False)
    (record,) = result.records
    assert record.sources == ["local", "local"] and record.observations[1] == "You go to the kitchen."


def test_cli_and_cache_dir(tmp_path, monkeypatch, capsys):
    register(BakingToySpec(), replace=True)
    rows = write_lines(tmp_path / "rows.jsonl", [paper_row("toy_v0"), paper_row("toy_v0")])
    out = tmp_path / "done.jsonl"
    monkeypatch.setenv("TEXTWM_SIM_CACHE", str(tmp_path / "c"))
    assert main(["--env", "toybake", "--rows", str(rows), "--out", str(out), "--no-progress"]) == 0
    assert "2 rows" in capsys.readouterr().out and (tmp_path / "c" / "toybake" / "toy_v0__default.json").is_file()
    done = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(done) == 2 and all(json.loads(row["sim_task"])["task_id"] == "toy_v0" for row in done)
    assert main(["--env", "toybake", "--rows", str(rows), "--out", str(rows)]) == 2
    assert "--out must differ" in capsys.readouterr().err
    assert cache_dir({"TEXTWM_SIM_CACHE": "/a"}).as_posix() == "/a"
    assert cache_dir({"TEXTWM_CACHE": "/b"}).as_posix() == "/b/sim_tasks"
    assert cache_dir({}).as_posix().endswith(".cache/textwm/sim_tasks")
    assert options_key({"simplification": "easy", "b": "x/y"}) == "b=x_y,simplification=easy"
