"""The stage runner (textwm.experiments.stages) on small real stages: resume, failure, settings, the state file."""

from __future__ import annotations

import json

import pytest

from textwm.experiments.stages import (
    FORMAT,
    STATE_FILE,
    Legacy,
    Redo,
    Stage,
    StageRecord,
    StageRunner,
    StateError,
)

CONFIG = {"out": "x", "steps": 3, "tasks": ["boil"], "port": 1, "grpo_steps": 2}


class Counting:
    """Stages that write a file each and count their calls (the work a resume must not redo)."""

    def __init__(self, out):
        self.out, self.calls = out, []

    def stage(self, name: str, **keys) -> Stage:
        def work():
            self.calls.append(name)
            (self.out / f"{name}.txt").write_text(name)
            return {"wrote": f"{name}.txt", "tuple": (1, 2)}
        return Stage(name, work, **keys)

    def stages(self) -> list[Stage]:
        return [self.stage("data"), self.stage("train", after=("data",)), self.stage("report", always=True)]


def runner(out, config=CONFIG, lines=None, **keys) -> StageRunner:
    return StageRunner(out, pipeline="toy", config=config, ignore=("out", "port"),
                       echo=(lines.append if lines is not None else lambda line: None), **keys)


def test_a_rerun_skips_the_stages_done_and_runs_an_always_stage_again(tmp_path):
    stages = Counting(tmp_path)
    runner(tmp_path).run(stages.stages(), numbered=True)
    assert stages.calls == ["data", "train", "report"]
    state = json.loads((tmp_path / STATE_FILE).read_text())
    assert (state["format"], state["pipeline"], state["config"]) == (FORMAT, "toy", CONFIG)
    assert list(state["stages"]) == ["data", "train", "report"]
    assert state["stages"]["train"]["status"] == "done" and state["stages"]["train"]["seconds"] >= 0
    assert state["stages"]["train"]["result"] == {"wrote": "train.txt", "tuple": [1, 2]}
    lines = []
    again = runner(tmp_path, lines=lines)
    assert again.results["data"] == {"wrote": "data.txt", "tuple": [1, 2]}
    again.run(stages.stages(), numbered=True)
    assert stages.calls == ["data", "train", "report", "report"]
    assert lines[:2] == ["[1/3] data: done earlier, skipped (0 s)", "[2/3] train: done earlier, skipped (0 s)"]
    assert lines[2:] == ["[3/3] report ...", "[3/3] report: 0 s"]


def test_a_failing_stage_is_recorded_with_its_error_and_raises(tmp_path):
    stages = Counting(tmp_path)

    def broken():
        raise ValueError("no rows in data/wm_train.jsonl")

    lines = []
    with pytest.raises(ValueError, match="no rows in data/wm_train.jsonl"):
        runner(tmp_path, lines=lines).run([stages.stage("data"), Stage("train", broken), stages.stage("report")])
    assert stages.calls == ["data"]                       # the run stopped at the failure
    assert lines[-1].startswith("train: FAILED after 0 s: ValueError: no rows in data/wm_train.jsonl (recorded in")
    saved = json.loads((tmp_path / STATE_FILE).read_text())["stages"]
    assert saved["train"] == {"status": "failed", "seconds": 0.0, "error": "ValueError: no rows in data/wm_train.jsonl"}
    assert "report" not in saved
    # A re-run keeps data and runs the failed stage again.
    lines = []
    again = runner(tmp_path, lines=lines)
    assert not again.is_done("train") and set(again.results) == {"data"}
    again.run(stages.stages())
    assert stages.calls == ["data", "train", "report"]
    assert "train: failed in an earlier run (ValueError: no rows in data/wm_train.jsonl); running it again" in lines
    assert json.loads((tmp_path / STATE_FILE).read_text())["stages"]["train"]["status"] == "done"


def test_a_result_that_is_not_json_fails_the_stage_and_leaves_the_state_whole(tmp_path):
    run = runner(tmp_path)
    run.run_stage(Stage("data", lambda: {"rows": 3}))
    with pytest.raises(TypeError, match="the result of stage train is not JSON"):
        run.run_stage(Stage("train", lambda: {"model": object()}))
    with pytest.raises(TypeError, match="stage eval returned a list, not a mapping"):
        run.run_stage(Stage("eval", lambda: [1, 2]))
    saved = json.loads((tmp_path / STATE_FILE).read_text())["stages"]
    assert saved["data"]["result"] == {"rows": 3} and saved["train"]["status"] == "failed"


def test_the_state_is_written_whole_or_not_at_all(tmp_path):
    run = runner(tmp_path)
    run.run_stage(Stage("data", lambda: {"rows": 3}))
    before = (tmp_path / STATE_FILE).read_text()
    # A value json cannot write, halfway through the file: the write fails, the file on disk is the earlier one.
    run.records["train"] = StageRecord("done", 1.0, result={"a": list(range(1000)), "b": object()})
    with pytest.raises(TypeError):
        run.save()
    assert (tmp_path / STATE_FILE).read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [STATE_FILE]      # no temporary file left beside it


def test_a_folder_made_with_other_settings_is_refused_naming_each_change(tmp_path):
    runner(tmp_path).run([Stage("data", dict)])
    runner(tmp_path, config={**CONFIG, "out": "elsewhere", "port": 2})          # ignored settings: a resume
    with pytest.raises(StateError, match=r"holds a toy with other settings \(steps: 3 -> 4, tasks: \['boil'\] -> "
                                         r"\['melt'\]\); use --fresh or another --out"):
        runner(tmp_path, config={**CONFIG, "steps": 4, "tasks": ["melt"]})
    with pytest.raises(StateError, match=r"new: None -> 1"):                      # a setting the saved run lacked
        runner(tmp_path, config={**CONFIG, "new": 1})


def test_a_redo_rule_accepts_its_settings_and_runs_its_stages_again(tmp_path):
    stages = Counting(tmp_path)
    grpo = Redo(("grpo_steps",), lambda name: name.startswith("grpo"), "GRPO settings changed ({changes}): {stages} redone")
    runner(tmp_path, redo=(grpo,)).run([stages.stage("data"), stages.stage("grpo"), stages.stage("grpo_eval")])
    lines = []
    again = runner(tmp_path, config={**CONFIG, "grpo_steps": 5}, lines=lines, redo=(grpo,))
    assert lines == ["GRPO settings changed (grpo_steps: 2 -> 5): grpo, grpo_eval redone"]
    again.run([stages.stage("data"), stages.stage("grpo"), stages.stage("grpo_eval")])
    assert stages.calls == ["data", "grpo", "grpo_eval", "grpo", "grpo_eval"]
    assert json.loads((tmp_path / STATE_FILE).read_text())["config"]["grpo_steps"] == 5
    with pytest.raises(StateError, match=r"other settings \(steps: 3 -> 9, grpo_steps: 5 -> 6\)"):
        runner(tmp_path, config={**CONFIG, "steps": 9, "grpo_steps": 6}, redo=(grpo,))


def test_a_stage_waits_for_the_stages_it_needs(tmp_path):
    with pytest.raises(StateError, match="stage train needs data done first"):
        runner(tmp_path).run_stage(Stage("train", dict, after=("data",)))


def test_fresh_deletes_a_run_of_its_pipeline_only(tmp_path):
    run_dir = tmp_path / "run"
    runner(run_dir).run([Stage("data", dict)])
    (run_dir / "model.bin").write_text("weights")
    assert runner(run_dir, fresh=True).results == {}
    assert not (run_dir / "model.bin").exists()
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "notes.txt").write_text("keep me")
    with pytest.raises(StateError, match="is not a toy run folder \\(no state.json\\) and not empty; not deleting"):
        runner(checkout, fresh=True)
    other = tmp_path / "other"
    StageRunner(other, pipeline="demo", config=CONFIG, echo=lambda line: None).run([Stage("data", dict)])
    with pytest.raises(StateError, match="is not the state of a toy run; not deleting"):
        runner(other, fresh=True)
    with pytest.raises(StateError, match="is the state of a demo run, not of a toy; use another --out"):
        runner(other)
    assert (checkout / "notes.txt").is_file() and (other / STATE_FILE).is_file()


def test_an_older_state_file_is_converted_once(tmp_path):
    def convert(old):
        return {"config": old["settings"],
                "stages": {name: {"status": "done", "seconds": s, "result": {}} for name, s in old["seconds"].items()}}

    (tmp_path / "stages_old.json").write_text(json.dumps({"settings": CONFIG, "seconds": {"data": 4.0}}))
    lines = []
    run = runner(tmp_path, lines=lines, legacy=Legacy("stages_old.json", convert))
    assert run.is_done("data") and run.records["data"].seconds == 4.0
    assert not (tmp_path / "stages_old.json").exists() and lines[0].endswith("converted to the current state format "
                                                                             f"({tmp_path / STATE_FILE})")
    assert json.loads((tmp_path / STATE_FILE).read_text())["format"] == FORMAT
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "stages_old.json").write_text(json.dumps({"seconds": {}}))
    with pytest.raises(StateError, match="stages_old.json: a toy state of an older format that could not be read "
                                         "\\(KeyError: 'settings'\\); use a fresh --out"):
        runner(broken, legacy=Legacy("stages_old.json", convert))
    unknown = tmp_path / "unknown"
    unknown.mkdir()
    (unknown / STATE_FILE).write_text(json.dumps({"done": {}}))
    with pytest.raises(StateError, match="is not a toy state file of format textwm-stages/1"):
        runner(unknown)
