"""The report writer every pipeline's report.md is written with."""

from __future__ import annotations

from textwm.experiments.report_writer import fmt, image, stage_times, table, write_markdown
from textwm.experiments.stages import StageRecord


def test_figures_are_formatted_one_way_with_each_reports_choices():
    assert (fmt(None), fmt(None, missing="n/a"), fmt(0.123456), fmt(0.123456, digits=3)) == ("—", "n/a", "0.1235",
                                                                                             "0.123")
    assert (fmt(3), fmt("sdar"), fmt(12345.6, whole_from=10), fmt(7, whole_from=10)) == ("3", "sdar", "12,346", "7")
    assert fmt(2.5, whole_from=10) == "2.5000" and fmt(True, whole_from=10) == "True"


def test_a_table_and_a_chart_line(tmp_path):
    assert table(["arm", "steps"], [("scratch/ar", 40), ("scratch/sdar", 40)]) == [
        "| arm | steps |", "|---|---|", "| scratch/ar | 40 |", "| scratch/sdar | 40 |"]
    assert image("metrics", tmp_path / "metrics.png") == ["![metrics](metrics.png)\n"] and image("metrics", None) == []


def test_the_stage_times_come_from_the_state_with_any_failure_named():
    records = {"data": StageRecord("done", 12.5, result={}), "train": StageRecord("done", 30.0, result={}),
               "grpo": StageRecord("failed", 2.0, error="RuntimeError: swift exited with 1")}
    assert stage_times(records) == [
        "| stage | seconds |", "|---|---|", "| data | 12.5 |", "| train | 30.0 |", "| total | 42.5 |",
        "\nFailed in its last run: `grpo` (RuntimeError: swift exited with 1).", ""]


def test_the_report_is_written_whole_with_one_final_newline(tmp_path):
    path = write_markdown(tmp_path / "report.md", ["# Title", "", "text"])
    assert path.read_text() == "# Title\n\ntext\n" and [p.name for p in tmp_path.iterdir()] == ["report.md"]
