"""scripts/anchor_experiment.py on tiny random models: every density and placement runs, no anchor is violated."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from textwm.generation.anchors import parse_template

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import anchor_experiment as experiment  # noqa: E402


@pytest.mark.parametrize("placement", experiment.PLACEMENTS)
@pytest.mark.parametrize("density", [0.25, 0.5, 0.75])
def test_anchor_masks_hold_about_the_density_and_leave_a_token_to_fill(placement, density):
    mask = experiment.anchor_mask(40, density, placement)
    assert 0 < sum(mask) < 40 and abs(sum(mask) / 40 - density) <= 0.15
    if placement == "prefix":
        assert mask[0] and not mask[-1]
    if placement == "suffix":
        assert mask[-1] and not mask[0]


def test_a_template_splits_the_reference_into_fixed_strings_and_slots():
    tokens = [ord(c) for c in "abcdef"]
    parts, truths = experiment.template_of(tokens, [True, True, False, False, True, False],
                                           lambda ids: "".join(map(chr, ids)), slack=1)
    assert parts == ["ab", {"fill": 3}, "e", {"fill": 2}] and truths == ["cd", "f"]
    assert experiment.in_order("abXYef", parse_template(["ab", {"fill": 2}, "e", {"fill": 1}]))
    assert not experiment.in_order("Xabef", parse_template(["ab", {"fill": 2}, "e", {"fill": 1}]))


@pytest.mark.parametrize("family", ["sdar", pytest.param("wedlm", marks=pytest.mark.slow),
                                    pytest.param("ar", marks=pytest.mark.slow)])
def test_every_density_and_placement_runs_without_a_violation(family, tiny_sdar_dir, tiny_wedlm_dir, tiny_ar_dir,
                                                              tmp_path):
    model = {"sdar": tiny_sdar_dir, "wedlm": tiny_wedlm_dir, "ar": tiny_ar_dir}[family]
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"messages": [
        {"role": "system", "content": "World model."}, {"role": "user", "content": f"State: hall\n\nAction: {a}"},
        {"role": "assistant", "content": o}]}) + "\n" for a, o in [
            ("go to kitchen", "You move to the kitchen."), ("open door to hall", "The door is already open."),
            ("look at cup", "a cup (containing nothing)"),
            ("look around", "This room is called the hallway. In it, you see: \n\tthe agent\n\ta substance called "
                            "air\nYou also see:\n\tA door to the kitchen (that is open)")]))
    results = {}
    for decoder in ("engine", "reference"):
        out = tmp_path / f"{decoder}.json"
        assert experiment.main(["--model-path", str(model), "--rows", str(rows), "--densities", "0", "0.5",
                                "--placements", *experiment.PLACEMENTS, "structured", "--env", "sciworld",
                                "--decoder", decoder, "--device", "cpu", "--out", str(out)]) == 0
        results[decoder] = json.loads(out.read_text())["results"]
    got = results["engine"]
    assert [(r["density"], r["placement"]) for r in got[:-2]] == [
        (0.0, "none"), *((0.5, p) for p in experiment.PLACEMENTS)]
    # The frame's transitions, unanchored and then framed.
    assert [(r["placement"], r["transitions"], r["density"]) for r in got[-2:-1]] == [("structured_none", 1, 0.0)]
    assert got[-1]["placement"] == "structured" and got[-1]["transitions"] == 1 and 0.5 < got[-1]["density"] < 1
    assert all(r["transitions"] == 4 and r["forwards_per_token"] > 0 for r in got[:-2])
    assert all(r["anchor_violations"] == 0 for r in got)
    # Greedy, the engine's answers are the reference decoder's.
    same = ("exact_match", "free_span_exact", "anchor_violations")
    assert [[r[k] for k in same] for r in got] == [[r[k] for k in same] for r in results["reference"]]


def test_a_structured_frame_gives_its_whitespace_to_the_slot():
    frame = [(False, "On the desk 1, you see "), (True, "a pen 2"), (False, ".")]
    assert experiment.words_first_frame(frame) == [(False, "On the desk 1, you see"), (True, " a pen 2"), (False, ".")]
    parts, truths, _ = experiment.structured_template(frame, lambda text: text.split(" "), slack=0)
    assert parts == ["On the desk 1, you see", {"fill": 4}, "."] and truths == [" a pen 2"]
