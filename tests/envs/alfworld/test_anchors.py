"""ALFWorld's anchored steps: what the state decides around an unknown listing goes to the world model as a
template (``ALFWORLD_WM_ANCHORS=1``), through the WM client and proxy to a real native server (tiny SDAR)."""

from __future__ import annotations

import pytest

from tests.envs.alfworld.test_rows import paper_row
from textwm.envs import get_env
from textwm.envs.alfworld.responder import LISTING_TOKENS

SPEC = get_env("alfworld")


def episode():
    return SPEC.start_episode(SPEC.load_row(paper_row(), need_sim=True))


def test_the_known_frame_of_an_unknown_listing_is_the_template(monkeypatch):
    from textwm.envs.simulator import anchors_enabled

    assert not anchors_enabled(SPEC.anchors_env)                                  # off by default
    monkeypatch.setenv("ALFWORLD_WM_ANCHORS", "1")
    assert anchors_enabled(SPEC.anchors_env)
    monkeypatch.setenv("ALFWORLD_WM_ANCHORS", "maybe")
    with pytest.raises(ValueError, match=r"\$ALFWORLD_WM_ANCHORS='maybe'"):
        anchors_enabled(SPEC.anchors_env)
    ep = episode()
    assert ep.local_answer("go to fridge 1") is None                               # the contents are unknown
    assert ep.known_frame("go to fridge 1") == [
        "You arrive at fridge 1. The fridge 1 is open. In it, you see ", {"fill": LISTING_TOKENS}, "."]
    assert ep.known_frame("examine fridge 1") is None                               # not admissible from here
    # Answered whole by the responder (a closed cabinet) or not a listing (inventory): no template.
    assert ep.known_frame("go to cabinet 2") is None
    assert ep.known_frame("inventory") is None


def test_the_frame_read_off_an_observation_is_the_known_frames_text():
    """What scripts/anchor_experiment.py measures (``observed_frame``) has the fixed text ``known_frame`` sends."""
    frame = SPEC.observed_frame("You arrive at fridge 1. The fridge 1 is open. In it, you see a mug 1, and an egg 2.")
    assert frame == [(False, "You arrive at fridge 1. The fridge 1 is open. In it, you see "),
                     (True, "a mug 1, and an egg 2"), (False, ".")]
    assert [t for slot, t in frame if not slot] == [p for p in episode().known_frame("go to fridge 1")
                                                     if isinstance(p, str)]
    assert SPEC.observed_frame("You open the drawer 1. The drawer 1 is open. In it, you see nothing.")[1] == (
        True, "nothing")
    assert SPEC.observed_frame("On the desk 1, you see a pen 2.") == [
        (False, "On the desk 1, you see "), (True, "a pen 2"), (False, ".")]
    for other in ("Nothing happens.", "You pick up the mug 1 from the fridge 1.", "The fridge 1 is closed."):
        assert SPEC.observed_frame(other) is None


def test_an_anchored_step_through_the_proxy_keeps_the_known_text(tiny_sdar_dir):
    pytest.importorskip("uvicorn")
    from tests.loopback import native_stack
    from textwm.clients.wm import WMClient
    from textwm.envs.simulator import Simulator

    with native_stack(tiny_sdar_dir, max_model_len=2048) as (_, proxy, _):
        simulator = Simulator(WMClient(proxy + "/", max_tokens=12), anchors=True)
        ep = episode()
        step = simulator.step(ep, "go to fridge 1")
    assert step.error is None and step.source == "wm" and step.anchored
    # (the space after "you see" is the slot's, written with the listing's first word: anchors.words_first)
    assert step.observation.startswith("You arrive at fridge 1. The fridge 1 is open. In it, you see")
    assert step.observation.endswith(".")
    assert simulator.stats.as_dict()["anchored"] == 1
