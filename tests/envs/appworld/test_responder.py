"""The local responder's answers, its agreement with real responses on a demo, and the schema fixer."""

from __future__ import annotations

import json

import pytest

from tests.envs.appworld import fixtures as fx
from textwm.data.jsonl import DataError
from textwm.envs.appworld import tools
from textwm.envs.appworld.demos import read_demo, responder_agreement, world_of_demo
from textwm.envs.appworld.fix_tools import fix_rows, main
from textwm.envs.appworld.responder import respond, unauthorized
from textwm.envs.appworld.world import parse_world

WORLD = parse_world(fx.WORLD_TEXT, ground_truth="Salt and Cedar")


def test_the_world_is_read_from_the_row_text():
    assert (WORLD.name, WORLD.email, WORLD.date) == ("Nora Kim", fx.EMAIL, "2023-05-20")
    assert [a.app for a in WORLD.accounts] == ["spotify", "venmo", "simple_note"]
    songs = WORLD.records["songs"]
    assert songs[1] == {"release_date": "2020-11-12", "title": "Salt and Cedar", "duration": 305, "play_count": 88,
                        "like_count": 2, "id": 9, "genre": "folk", "artists": ["Ivo Hart", "Mara Vance"],
                        "in_library": True, "liked": True}
    assert WORLD.records["notes"][0]["content"] == "eggs, rice, limes"  # commas inside a value stay in it


@pytest.mark.parametrize("text", ["", "no identity here", "User identity: A B, email: a@b.c, phone: 1\n"])
def test_a_world_without_identity_or_accounts_is_refused(text):
    with pytest.raises(DataError, match="wm_system_prompt"):
        parse_world(text)


def test_answers_the_world_decides():
    passwords = json.loads(respond(WORLD, [], "supervisor__show_account_passwords", {}))
    assert passwords[0] == {"app": "spotify", "username": fx.EMAIL, "password": fx.PASSWORDS["spotify"]}
    ok = json.loads(respond(WORLD, [], "spotify__login", {"username": fx.EMAIL, "password": fx.PASSWORDS["spotify"]}))
    assert ok["token_type"] == "Bearer" and ok["access_token"].count(".") == 2
    assert respond(WORLD, [], "spotify__login", {"username": fx.EMAIL, "password": "no"}) == \
        '{"error": "Response status code is 401:\\n{\\"message\\":\\"Invalid credentials\\"}"}'
    assert respond(WORLD, [], "spotify__show_song_library", {}) == unauthorized("spotify")
    assert respond(WORLD, [], "spotify__show_songz", {}) == \
        '{"error": "No API named \'show_songz\' found in the spotify app."}'
    assert respond(WORLD, [], "spotfy__login", {}) == '{"error": "No app named \'spotfy\' found."}'
    assert "rating: field required" in respond(WORLD, ["spotify"], "spotify__review_song", {"song_id": 9})
    assert json.loads(respond(WORLD, [], "supervisor__complete_task", {"answer": "x"}))["message"]


def test_the_world_model_answers_the_rest():
    assert respond(WORLD, ["spotify"], "spotify__show_song_library", {"page_index": 0}) is None
    assert respond(WORLD, [], "venmo__login", {"username": fx.EMAIL, "password": "x"}) is not None
    # the phone (gmail, ...) account exists but its password is listed nowhere: every login fails, as in the demos
    assert "Invalid credentials" in respond(WORLD, [], "phone__login", {"username": "5550101234", "password": "x"})
    assert "Invalid credentials" in respond(WORLD, [], "gmail__login", {"username": fx.EMAIL, "password": "x"})
    assert "Invalid API name 'login'" in respond(WORLD, [], "login", {})


def test_agreement_with_the_real_responses_of_a_demo():
    demo = read_demo(fx.demo_row())
    assert world_of_demo(demo).account("venmo").password == fx.PASSWORDS["venmo"]
    result = responder_agreement([demo]).as_dict()
    # passwords, the wrong and the right login (token compared by its subject); the listings go to the WM
    assert (result["calls"], result["answered"], result["agreed"], result["by_construction"]) == (5, 3, 3, 1)
    assert result["agreement"] == 1.0 and not result["disagreements"]


def test_a_demo_with_a_prose_turn_is_refused_by_message():
    row = fx.demo_row()
    row["messages"][2]["content"] = "Let me think about this."
    with pytest.raises(DataError, match="message 2 .* not an assistant tool call"):
        read_demo(row)


def test_tools_come_from_the_apps_code():
    catalog = tools.catalog()
    assert len(catalog) > 400 and {"spotify", "venmo", "simple_note", "file_system", "phone"} <= set(tools.apps())
    login = catalog["spotify__login"]
    assert login.signature() == "spotify__login(username, password)" and not login.requires_access_token
    assert all(p.name != "access_token" for t in catalog.values() for p in t.params)
    schema = catalog["spotify__review_song"].json_schema()
    assert schema["parameters"]["required"] == ["song_id", "rating"]


def test_the_fixer_renames_old_names_and_keeps_real_ones(tmp_path):
    row = fx.demo_row()
    old = json.dumps(row).replace("spotify__show_song_library", "spotify__show_playlists")
    old_row = json.loads(old)
    old_row["messages"][0]["content"] += ('<|tool|>[{"name": "venmo__send_payment", "parameters": {"note": '
                                          '{"type": "string"}}}]<|/tool|>')
    old_row["messages"].insert(-1, {"role": "assistant", "content": json.dumps(
        [{"name": "venmo__send_payment", "parameters": {"recipient_username": "a@b.c", "amount": 5}}])})
    (fixed_old, fixed_new), report = fix_rows([old_row, fx.rl_row()], "rows.jsonl")
    text = json.dumps(fixed_old)
    assert "spotify__show_playlists" not in text and "spotify__show_playlist_library" in text
    assert '"receiver_email": "a@b.c"' in fixed_old["messages"][-2]["content"]
    assert '"name": "venmo__create_transaction", "parameters": {"receiver_email"' in fixed_old["messages"][0]["content"]
    assert report.renamed["venmo__send_payment"] == 2 and report.params_renamed
    new_system = json.loads(fixed_new["messages"])[0]["content"]
    assert isinstance(fixed_new["messages"], str)
    assert [line for line in new_system.splitlines() if line.startswith("- ") and "__" in line][:1] == \
        ["- supervisor__show_account_passwords(no parameters)"]
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(fx.rl_row()) + "\n" + json.dumps({"messages": [
        {"role": "system", "content": "Available tools:\n- spotify__fly_me(x)"}], "task_id": "t_1"}) + "\n")
    assert main([str(path), "--in-place"]) == 2  # line 2 names no API: nothing is written
    assert path.read_text().count("\n") == 2 and "fly_me" in path.read_text()
