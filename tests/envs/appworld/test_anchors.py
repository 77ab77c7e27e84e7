"""AppWorld's anchored calls: the part of a response the call and the API's schema decide goes to the world model as
a template (``APPWORLD_WM_ANCHORS=1``). Fast: the frame rules; slow: every template against the real apps' text."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import write_lines
from tests.envs.appworld import fixtures as fx
from textwm.envs import get_env
from textwm.envs.appworld import tools
from textwm.envs.appworld.responder import (
    LIST_TOKENS,
    REASON_TOKENS,
    known_frame,
    observed_frame,
    track_login,
)
from textwm.envs.appworld.world import parse_world
from textwm.generation.anchors import parse_template, words_first

SPEC = get_env("appworld")
WORLD = parse_world(fx.WORLD_TEXT, ground_truth="Salt and Cedar")
PAGE_LIMIT_422 = tools.http_error(422, "Validation error. Reason: \npage_limit: ensure this value is less than or "
                                       "equal to 20")


def fits(template: list, text: str) -> bool:
    """``text`` is ``template`` filled: its fixed strings in order, byte for byte, a slot anything."""
    pattern = "".join(re.escape(p) if isinstance(p, str) else "(.*?)" for p in template)
    return re.fullmatch(pattern, text, re.DOTALL) is not None


# --- fast: the frame rules -------------------------------------------------------------------------------------


def test_the_switch_is_off_unless_asked_for(monkeypatch):
    from textwm.envs.simulator import anchors_enabled

    assert SPEC.anchors_env == "APPWORLD_WM_ANCHORS" and not anchors_enabled(SPEC.anchors_env)
    monkeypatch.setenv("APPWORLD_WM_ANCHORS", "1")
    assert anchors_enabled(SPEC.anchors_env)
    monkeypatch.setenv("APPWORLD_WM_ANCHORS", "maybe")
    with pytest.raises(ValueError, match=r"\$APPWORLD_WM_ANCHORS='maybe'"):
        anchors_enabled(SPEC.anchors_env)


def test_a_listing_that_cannot_fail_is_framed_by_its_brackets():
    frame = known_frame(WORLD, ["spotify"], "spotify__show_song_library", {})
    assert frame[0] == "[" and frame[2] == "]" and 0 < frame[1]["fill"] <= LIST_TOKENS
    bigger = known_frame(WORLD, ["spotify"], "spotify__show_song_library", {"page_index": 1, "page_limit": 20})
    assert bigger[1]["fill"] > frame[1]["fill"]                       # the slot grows with the page
    assert known_frame(WORLD, ["spotify"], "spotify__search_songs", {"query": "cedar"})[0] == "["
    assert known_frame(WORLD, [], "spotify__show_genres", {})[0] == "["      # no token needed
    assert fits(frame, "[]") and fits(frame, json.dumps([{"song_id": 7, "title": "Paper Lanterns"}]))
    parse_template(frame, max_tokens=LIST_TOKENS)


def test_an_object_response_is_framed_by_its_keys_in_the_models_order():
    frame = known_frame(WORLD, ["spotify"], "spotify__show_account", {})
    keys = list(tools.catalog()["spotify__show_account"].returns)
    assert frame[0] == '{"first_name": ' and frame[-1] == "}"
    assert [re.search(r'"(\w+)": $', p).group(1) for p in frame if isinstance(p, str) and p != "}"] == keys
    assert known_frame(WORLD, ["spotify"], "spotify__show_volume", {}) == ['{"volume": ', {"fill": 8}, "}"]
    assert fits(frame, json.dumps({k: "x" for k in keys}))
    assert not fits(frame, json.dumps({k: "x" for k in reversed(keys)}))
    parse_template(frame, max_tokens=1024)


def test_an_argument_its_checks_refuse_is_framed_as_the_422():
    frame = known_frame(WORLD, ["spotify"], "spotify__show_song_library", {"page_limit": 50})
    assert frame[1] == {"fill": REASON_TOKENS}
    assert "".join([frame[0], "page_limit: ensure this value is less than or equal to 20", frame[2]]) == PAGE_LIMIT_422
    assert fits(frame, PAGE_LIMIT_422)
    # a write, a body argument: the same frame; a value of another type (pydantic may coerce it): no frame
    assert known_frame(WORLD, ["venmo"], "venmo__create_transaction", {"receiver_email": "a@b.com",
                                                                      "amount": -5}) == frame
    assert known_frame(WORLD, ["spotify"], "spotify__show_song_library", {"page_limit": "50"}) is None
    parse_template(frame, max_tokens=REASON_TOKENS)


@pytest.mark.parametrize(("logged_in", "name", "arguments"), [
    ([], "spotify__show_song_library", {}),                           # the responder's 401: answered whole
    (["spotify"], "spotify__review_song", {"song_id": 7}),            # the responder's 422 (rating missing)
    (["spotify"], "spotify__show_song", {"song_id": 7}),              # a record that may not exist
    (["spotify"], "spotify__show_song_library", {"pages": 2}),        # an argument the API does not take
    (["spotify"], "spotify__search_songs", {"genre": "folk"}),        # a filter the app may refuse
    (["spotify"], "spotify__show_liked_songs", {"sort_by": "+title"}),
    (["spotify"], "spotify__show_current_song", {}),                  # fails on an empty queue
    (["spotify"], "spotify__show_profile", {}),                       # fails without an email
    (["spotify"], "spotify__like_song", {"song_id": 7}),              # a write
    (["spotify"], "spotify__logout", {}),
    ([], "venmo__login", {"username": fx.EMAIL, "password": fx.PASSWORDS["venmo"]}),
])
def test_no_frame_where_the_response_is_not_decided(logged_in, name, arguments):
    assert known_frame(WORLD, logged_in, name, arguments) is None


def test_the_checks_a_parameter_states():
    catalog = tools.catalog()
    limit = catalog["spotify__show_song_library"].param("page_limit")
    assert [limit.accepts(v) for v in (1, 20, 0, 21, "5", 5.0, True)] == [True, True, False, False, None, None, None]
    entry = catalog["file_system__show_directory"].param("entry_type")
    assert (entry.accepts("files"), entry.accepts("everything")) == (True, False)
    path = catalog["file_system__show_directory"].param("directory_path")
    assert (path.accepts("/"), path.accepts("")) == (True, False)
    email = catalog["venmo__create_transaction"].param("receiver_email")
    assert email.accepts("a@b.com") is None                           # an email check is not read here


def test_the_simulator_sends_the_episodes_frame_only_when_anchors_are_on():
    from textwm.clients.wm import WMResult
    from textwm.envs.simulator import Simulator

    class WM:
        def __init__(self):
            self.templates = []

        def predict(self, system_prompt, state, action, response_template=None):
            self.templates.append(response_template)
            return WMResult("[]", "[]")

    for anchors in (False, True):
        wm = WM()
        simulator = Simulator(wm, anchors=anchors)
        episode = SPEC.start_episode(SPEC.load_row(fx.rl_row(), need_sim=True))
        simulator.step(episode, fx.call("spotify__login", username=fx.EMAIL, password=fx.PASSWORDS["spotify"]))
        step = simulator.step(episode, fx.call("spotify__show_song_library", page_index=0, page_limit=20))
        assert step.source == "wm" and step.anchored == anchors and simulator.stats.anchored == int(anchors)
        frame = episode.known_frame(fx.call("spotify__show_song_library", page_index=0, page_limit=20))
        assert wm.templates == [words_first(frame) if anchors else None]
    assert wm.templates[0][0] == "["


# --- slow: the real apps ------------------------------------------------------------------------------------------

#: The hand-written world of the real-app tests with a password for every app, so that every app can be logged in to.
MORE_CREDENTIALS = {"phone": "phone-pass1", "gmail": "gmail-pass1", "amazon": "amazon-pass1",
                    "todoist": "todo-pass1", "splitwise": "split-pass1"}


def every_app_row() -> dict:
    from tests.envs.appworld.test_real import ROW
    from tests.envs.appworld.test_real import WORLD as REAL_WORLD

    lines = REAL_WORLD.split("\n")
    at = lines.index("Active task: How many songs are in my Spotify song library?") - 1
    world = parse_world(REAL_WORLD)
    lines[at:at] = [f"- {app}: username={world.phone if app == 'phone' else world.email}, password={password}"
                    for app, password in MORE_CREDENTIALS.items()]
    return {**ROW, "task_id": "anchors_1", "wm_system_prompt": "\n".join(lines)}


def probe_calls(world) -> list[tuple[str, dict]]:
    """Every GET without a required parameter (bare, paged, searched, out of its page checks), and a logout and
    login in between (a new login's token works)."""
    calls = []
    for tool in tools.catalog().values():
        if tool.method != "GET" or tool.app == "admin" or any(p.required for p in tool.params):
            continue
        calls.append((tool.name, {}))
        names = {p.name for p in tool.params}
        if "page_limit" in names:
            calls += [(tool.name, {"page_index": 0, "page_limit": 20}), (tool.name, {"page_index": 1, "page_limit": 1}),
                      (tool.name, {"page_limit": 50}), (tool.name, {"page_index": -1})]
        if "query" in names:
            calls += [(tool.name, {"query": "a"}), (tool.name, {"query": ""})]
    login = next(("spotify__login", {"username": a.username, "password": a.password}) for a in world.accounts
                 if a.app == "spotify")
    return [*calls, ("spotify__logout", {}), login, ("spotify__show_volume", {})]


def refused_value(param: tools.Param):
    """A value of ``param``'s type that its first bound, choice or length check refuses (None: it states none)."""
    for constraint in param.constraints:
        subject, _, rule = constraint.partition(" ")
        if subject == "value" and rule.startswith("in ["):
            return "no-such-choice"
        if m := re.match(r"(>=|>) ([^,\s]+)", rule):
            low = float(m.group(2)) - 1
            if subject == "value" and param.type in ("integer", "number"):
                return int(low) if param.type == "integer" else low
            if subject == "length" and param.type == "string" and low >= 0:
                return "a" * int(low)
    return None


def refused_calls() -> list[tuple[str, dict]]:
    """A call of every API (writes too) per parameter with a check, that check refused, the required arguments
    given values their checks accept where they state any."""
    calls = []
    for tool in tools.catalog().values():
        if tool.app == "admin" or tool.api in ("login", "logout"):
            continue
        for param in tool.params:
            bad = refused_value(param)
            if bad is None:
                continue
            arguments = {q.name: {"integer": 5, "number": 5.0, "boolean": True}.get(q.type, "abcdefghij")
                         for q in tool.params if q.required}
            calls.append((tool.name, {**arguments, param.name: bad}))
    return calls


@pytest.fixture(scope="module")
def every_app(appworld_python, tmp_path_factory):
    """The real apps on :func:`every_app_row`'s world, every app logged in to: (env, world, apps logged in to)."""
    from textwm.envs.appworld.calls import canonical
    from textwm.envs.appworld.real import AppWorldEnv, AppWorldSessionConfig

    row = every_app_row()
    world = parse_world(row["wm_system_prompt"])
    rows = write_lines(tmp_path_factory.mktemp("appworld_anchor_rows") / "rows.jsonl", [row])
    env = AppWorldEnv(AppWorldSessionConfig(rows=[str(rows)], appworld_python=appworld_python))
    env.reset(row["task_id"])
    logged_in: list[str] = []
    for a in world.accounts:
        name = f"{a.app}__login"
        track_login(logged_in, name, env.step(canonical(name, {"username": a.username, "password": a.password}))
                    .observation)
    assert len(logged_in) == len(world.accounts) == 9
    yield env, world, logged_in
    env.close()


def framed_against_real(every_app, calls) -> tuple[dict[str, int], list]:
    """Each call's frame and the real response: how many of each kind were framed, and those that do not fit."""
    from textwm.envs.appworld.calls import canonical

    env, world, logged_in = every_app
    framed, misfits = {"[": 0, "{": 0, "422": 0}, []
    for name, arguments in calls:
        frame = known_frame(world, logged_in, name, arguments)
        real = env.step(canonical(name, arguments)).observation
        track_login(logged_in, name, real)
        if frame is None:
            continue
        framed["422" if "status code is 422" in frame[0] else frame[0][0]] += 1
        # The frame read off the real response (what scripts/anchor_experiment.py measures) has the same fixed text.
        observed = observed_frame(real)
        if not fits(frame, real) or observed is None or [t for slot, t in observed if not slot] != [
                p for p in frame if isinstance(p, str)]:
            misfits.append((name, arguments, frame, real[:300]))
    return framed, misfits


@pytest.mark.slow
def test_every_listing_and_object_frame_fits_the_real_response(every_app):
    framed, misfits = framed_against_real(every_app, probe_calls(every_app[1]))
    assert not misfits, misfits
    # every listing and object API without a required parameter (but those that may fail), paged, searched, refused
    assert framed["["] > 150 and framed["{"] >= 20 and framed["422"] > 60, framed


@pytest.mark.slow
def test_every_refused_argument_gets_the_real_422(every_app):
    framed, misfits = framed_against_real(every_app, refused_calls())
    assert not misfits, misfits
    assert framed["422"] > 300 and framed["["] == framed["{"] == 0, framed
