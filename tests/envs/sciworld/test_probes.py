"""The lifespan probes of a world model: the parsing they rest on (fast), and a whole run against the real
ScienceWorld with scripted world models on loopback (slow): one that accepts every focus, one that refuses all."""

from __future__ import annotations

import json

import pytest

from textwm.envs.sciworld.probes import (
    ANIMAL_POOL,
    absent_animal,
    accepts_focus,
    animal_words,
    listed_objects,
)

OUTSIDE = ("This outside location is called the outside. Here you see: \n\tthe agent\n\ta substance called air\n"
           "\ta baby brown bear\n\ta parrot egg\n\ta fire pit (containing nothing)\nYou also see:\n"
           "\tA door to the kitchen (that is open)")


def test_a_listing_is_the_rooms_objects_without_articles_or_doors():
    assert listed_objects(OUTSIDE) == {"agent", "substance called air", "baby brown bear", "parrot egg",
                                       "fire pit (containing nothing)"}
    assert listed_objects("No known action matches that input.") == set()


def test_an_absent_animal_shares_no_word_of_its_kind_with_the_listing():
    # The gold runs name animals by stage first ("egg parrot", "baby baby brown bear"); either form is present.
    assert animal_words("baby baby brown bear") == {"brown", "bear"} and animal_words("egg parrot") == {"parrot"}
    pool = ["egg parrot", "baby baby brown bear", "crocodile", "baby elephant"]
    absent = absent_animal("lifespan-longest-lived_v1", OUTSIDE, pool)
    assert not animal_words(absent) & {"parrot", "brown", "bear"}
    assert absent_animal("x", OUTSIDE, pool) == absent_animal("x", OUTSIDE, pool)        # reruns agree
    assert absent_animal("x", OUTSIDE, ["egg parrot"]) in ANIMAL_POOL       # one row alone: the pool still has some
    everything = OUTSIDE + " ".join(ANIMAL_POOL)
    with pytest.raises(ValueError, match="no absent one"):
        absent_animal("x", everything, ["egg parrot"])


def test_a_focus_is_accepted_only_when_the_answer_says_so():
    assert accepts_focus("You focus on the crocodile egg.") and not accepts_focus(None)
    assert not accepts_focus("No known action matches that input.")


@pytest.fixture(scope="module")
def lifespan_rows(tmp_path_factory):
    pytest.importorskip("scienceworld", reason="ScienceWorld is in the [envs] extra")
    from textwm.data.jsonl import read_jsonl
    from textwm.envs.build import build
    from textwm.envs.sciworld.build import SciWorldBuildConfig

    out = tmp_path_factory.mktemp("lifespan")
    build("sciworld", SciWorldBuildConfig(out_dir=str(out), tasks=("lifespan-longest-lived",), train_variations=0,
                                          dev_variations=0, test_variations=4, explore_episodes=0, workers=1))
    return read_jsonl(out / "rl_test.jsonl").rows


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["gullible", "refusing"])
def test_probes_against_the_real_env(lifespan_rows, tmp_path, kind):
    from tests.eval.helpers import GoldWM
    from textwm.clients.wm import WMClient
    from textwm.envs.registry import get_env

    def gullible(action):      # lists one made-up animal, accepts every focus
        if action == "look around":
            return "This outside location is called the outside. Here you see: \n\tthe agent\n\ta baby wolf\n"
        return f"You focus on the {action[len('focus on '):]}." if action.startswith("focus on ") else None

    wm = GoldWM([], fallback=gullible if kind == "gullible" else None)
    try:
        summary = get_env("sciworld").probe_world_model(lifespan_rows, WMClient(wm.url), tmp_path,
                                                           workers=1 if kind == "gullible" else 3)
    finally:
        wm.close()
    assert summary["rows"] == 4 and summary["wm_failures"] == 0
    # The real env: never a focus on an absent animal, always the gold one.
    assert summary["absent_accepted_real"] == 0.0 and summary["right_accepted_real"] == 1.0
    accepted = 1.0 if kind == "gullible" else 0.0
    assert summary["absent_accepted_wm"] == summary["right_accepted_wm"] == accepted
    assert summary["look_exact"] == 0.0 and summary["look_recall"] < 0.5
    records = [json.loads(x) for x in (tmp_path / "probes.jsonl").read_text().splitlines()]
    assert len(records) == 4 and all(r["look_real"].startswith("This outside location") for r in records)
    assert json.loads((tmp_path / "probes.json").read_text()) == summary
    assert get_env("sciworld").probe_world_model([{"task_id": "boil_v0"}], WMClient(wm.url), tmp_path) is None
