"""The real AppWorld apps behind the env protocol: a hand-written world seeded, AppWorld's own answers."""

from __future__ import annotations

import json
import stat

import pytest

from tests.conftest import write_lines
from textwm.envs.appworld.apps_python import AppsRunner
from textwm.envs.appworld.real import AppWorldEnv, AppWorldSessionConfig, paper_passwords
from textwm.envs.appworld.seed import plan_seed
from textwm.envs.appworld.world import parse_world
from textwm.envs.protocol import BadRequest, EnvFailed, EpisodeOver

CREDENTIALS = {"spotify": "spot-pass1", "venmo": "venmo-pass1", "file_system": "files-pass1",
               "simple_note": "notes-pass1"}
WORLD = "\n".join([
    "User identity: Ada Lovelace, email: ada.love@gmail.com, phone: 5550001111",
    "",
    "Account credentials:",
    *(f"- {app}: username=ada.love@gmail.com, password={pw}" for app, pw in CREDENTIALS.items()),
    "",
    "Active task: How many songs are in my Spotify song library?",
    "Current date: 2023-05-20",
    "",
    "Database records:",
    "  songs (3 total, 3 shown):",
    "    - release_date: 2020-07-26, title: Night Drive, duration: 200, play_count: 5, like_count: 1, id: 11, "
    "album_id: 4, genre: rock, review_count: 0, artists: ['Nova Lane'], in_library: True, liked: True",
    "    - release_date: 2021-01-02, title: Paper Boats, duration: 187, play_count: 2, like_count: 0, id: 12, "
    "album_id: 9, genre: rock, review_count: 0, artists: ['Nova Lane'], in_library: True",
    "    - release_date: 2021-01-03, title: Ghost Song, duration: 150, id: 13, genre: pop, artists: ['Nobody Known']",
    "  albums (1 total):",
    "    - release_date: 2020-07-01, id: 4, artist_ids: [3], genre: rock, like_count: 2, title: Roads, rating: 4.0, "
    "review_count: 1, song_count: 1",
    "  artists (1 total):",
    "    - id: 3, name: Nova Lane, genre: rock, follower_count: 7",
    "  playlists (1 total):",
    "    - id: 40, user_id: 5, title: Mix, created_at: 2023-01-07, is_public: True, song_ids: [11, 99]",
    "  venmo_friends (1 total, 1 shown):",
    "    - created_at: 2022-12-14, id: 8, last_name: Stone, password: markpass1, first_name: Mark, "
    "email: mark.stone@gmail.com, venmo_balance: 100.0",
    "  transactions (2 total, 2 shown):",
    "    - updated_at: 2023-05-10, id: 500, created_at: 2023-05-10, receiver_id: 8, description: Pizza, private: False, "
    "like_count: 0, sender_id: 6, amount: 25.5, direction: sent",
    "    - updated_at: 2023-05-11, id: 501, created_at: 2023-05-11, receiver_id: 77, description: Taxi, private: False, "
    "like_count: 0, sender_id: 6, amount: 9.0, direction: sent",
    "  notes (1 total, 1 shown):",
    "    - updated_at: 2022-12-31, user_id: 2, content: # Grocery List",
    "  directories (1 total, 1 shown):",
    "    - id: 30, created_at: 2021-10-20, path: /home/ada/documents/, user_id: 9",
    "  files (1 total, 1 shown):",
    "    - id: 31, path: /home/ada/documents/todo.txt, content: call mom, created_at: 2022-08-23, user_id: 9",
])
ROW = {"task_id": "hand_1", "instruction": "How many songs are in my Spotify song library?", "ground_truth": "2",
       "wm_system_prompt": WORLD}


def call(name: str, **parameters) -> str:
    return json.dumps([{"name": name, "parameters": parameters}])


def login(env: AppWorldEnv, app: str = "spotify", password: str | None = None):
    return env.step(call(f"{app}__login", username="ada.love@gmail.com", password=password or CREDENTIALS[app]))


# --- fast: the seed plan, errors without the apps ------------------------------------------------------


def test_seed_plan_keeps_ids_and_reports_what_it_leaves_out():
    seed = plan_seed(parse_world(WORLD, ground_truth="2"), "hand_1")
    assert seed.payload["datetime"] == "2023-05-20T12:00:00"
    assert seed.payload["user_ids"] == {"spotify": 5, "venmo": 6, "simple_note": 2, "file_system": 9}
    assert len(seed.kinds) == len(seed.payload["batches"])
    songs = next(b for b in seed.payload["batches"] if b["model"] == "Song")
    assert [s["id"] for s in songs["rows"]] == [11, 12]
    assert songs["rows"][0]["artist_ids"] == [3] and "album_id" not in songs["rows"][1]
    report = seed.report.tables
    assert report["songs"].total == 3 and report["songs"].parsed == 3
    assert dict(report["songs"].skipped) == {"an artist is not listed in artists": 1}
    assert report["songs"].altered["album_id set to null (album not listed in albums)"] == 1
    assert sum(report["transactions"].skipped.values()) == 1


def test_paper_passwords_form():
    result = [{"account_name": "spotify", "password": "p1"}, {"account_name": "phone", "password": "p2"}]
    assert paper_passwords(result, "a@b.com", "555") == [{"app": "spotify", "username": "a@b.com", "password": "p1"},
                                                          {"app": "phone", "username": "555", "password": "p2"}]


def test_runner_that_dies_is_env_failed_with_its_stderr(tmp_path):
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'ImportError: no appworld here' >&2\nexit 3\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    runner = AppsRunner(fake, timeout_s=10)
    with pytest.raises(EnvFailed, match="no appworld here"):
        runner.request("task")
    hung = tmp_path / "hung"
    hung.write_text("#!/bin/sh\necho 'waiting forever' >&2\nsleep 30\n")
    hung.chmod(hung.stat().st_mode | stat.S_IEXEC)
    runner = AppsRunner(hung, timeout_s=0.5)
    with pytest.raises(EnvFailed, match="longer than 0.5 s"):
        runner.request("task")
    assert not runner.alive


def test_unknown_task_id_names_the_download(tmp_path, monkeypatch):
    monkeypatch.delenv("APPWORLD_ROOT", raising=False)
    rows = write_lines(tmp_path / "rows.jsonl", [ROW])
    env = AppWorldEnv(AppWorldSessionConfig(rows=[str(rows)], appworld_python=__import__("sys").executable))
    with pytest.raises(BadRequest, match=r"appworld download data.*APPWORLD_ROOT") as err:
        env.reset("50e1ac9_1")
    assert "APPWORLD_ROOT is not set" in str(err.value)
    env = AppWorldEnv(AppWorldSessionConfig(appworld_python=__import__("sys").executable,
                                            appworld_root=str(tmp_path)))
    with pytest.raises(BadRequest, match="does not exist"):
        env.reset("50e1ac9_1")


# --- slow: the real apps (one runner for the module) ------------------------------------------------


@pytest.fixture(scope="module")
def env(appworld_python, tmp_path_factory):
    rows = write_lines(tmp_path_factory.mktemp("appworld_rows") / "rows.jsonl", [ROW])
    session = AppWorldEnv(AppWorldSessionConfig(rows=[str(rows)], appworld_python=appworld_python))
    yield session
    session.close()


@pytest.fixture
def episode(env):
    env.reset("hand_1")
    return env


@pytest.mark.slow
def test_reset_seeds_the_hand_written_world(env):
    result = env.reset("hand_1")
    assert result.observation == ROW["instruction"]
    info = result.info
    assert info["source"] == "rows" and info["datetime"] == "2023-05-20T12:00:00"
    tables = info["seed_report"]["tables"]
    assert (tables["songs"]["seeded"], tables["songs"]["skipped"]) == (2, 1)
    assert tables["songs"]["links"]["UserLibrarySong"] == {"given": 2, "inserted": 2}
    assert tables["playlists"]["links"]["PlaylistSong"] == {"given": 1, "inserted": 1}
    assert tables["transactions"]["seeded"] == 1 and tables["files"]["seeded"] == 1
    assert tables["notes"]["seeded"] == 1


@pytest.mark.slow
def test_passwords_in_the_papers_form(episode):
    step = episode.step(call("supervisor__show_account_passwords"))
    expected = [{"app": app, "username": "ada.love@gmail.com", "password": pw} for app, pw in CREDENTIALS.items()]
    assert step.observation == json.dumps(expected)
    assert not step.done


@pytest.mark.slow
def test_login_and_the_401s(episode):
    before = episode.step(call("spotify__show_song_library"))
    assert json.loads(before.observation)["error"].startswith(
        "Response status code is 401:\n{\"message\":\"You are either not authorized to access this spotify API")
    wrong = login(episode, password="not-it")
    assert wrong.observation == json.dumps({"error": "Response status code is 401:\n{\"message\":\"Invalid credentials\"}"})
    ok = json.loads(login(episode).observation)
    assert ok["token_type"] == "Bearer" and ok["access_token"].startswith("eyJ")
    library = json.loads(episode.step(call("spotify__show_song_library")).observation)
    assert [s["song_id"] for s in library] == [11, 12]
    files = login(episode, "file_system")
    assert "access_token" in json.loads(files.observation)
    todo = json.loads(episode.step(call("file_system__show_file", file_path="~/documents/todo.txt")).observation)
    assert todo["content"] == "call mom"


@pytest.mark.slow
def test_unknown_api_and_app(episode):
    assert episode.step(call("spotify__review_songs")).observation == json.dumps(
        {"error": "No API named 'review_songs' found in the spotify app."})
    assert episode.step(call("spotifyy__login")).observation == json.dumps({"error": "No app named 'spotifyy' found."})


@pytest.mark.slow
def test_422_missing_or_mistyped_argument_and_409(episode):
    login(episode)
    missing = json.loads(episode.step(call("spotify__review_song", song_id=11)).observation)["error"]
    assert missing == "Response status code is 422:\n{\"message\":\"Validation error. Reason: \\nrating: field required\"}"
    mistyped = json.loads(episode.step(call("spotify__show_song", song_id="eleven")).observation)["error"]
    assert mistyped.startswith("Response status code is 422:") and "song_id: value is not a valid integer" in mistyped
    assert "song_review_id" in json.loads(episode.step(call("spotify__review_song", song_id=11, rating=5)).observation)
    again = json.loads(episode.step(call("spotify__review_song", song_id=11, rating=4)).observation)["error"]
    assert again.startswith("Response status code is 409:")


@pytest.mark.slow
def test_complete_task_right_and_wrong_answer(env):
    env.reset("hand_1")
    env.step(call("supervisor__show_account_passwords"))
    right = env.step(call("supervisor__complete_task", answer="2"))
    assert right.observation == json.dumps({"message": "Marked the active task complete."})
    assert right.done and right.score == 1.0 and right.info["outcome"]["reason"] == "success"
    with pytest.raises(EpisodeOver):
        env.step(call("supervisor__show_account_passwords"))
    env.reset("hand_1")
    env.step(call("supervisor__show_account_passwords"))
    wrong = env.step(call("supervisor__complete_task", answer="5"))
    assert wrong.done and 0 < wrong.score < 1.0 and wrong.info["outcome"]["reason"] == "completed"


@pytest.mark.slow
def test_a_crashed_runner_is_env_failed_then_reset_starts_a_new_one(env):
    env.reset("hand_1")
    env.runner()._proc.kill()
    with pytest.raises(EnvFailed, match="AppWorld runner"):
        env.step(call("supervisor__show_account_passwords"))
    env.reset("hand_1")
    assert "error" not in json.loads(env.step(call("supervisor__show_account_passwords")).observation)


@pytest.mark.slow
def test_the_local_responder_agrees_with_the_real_apps(env):
    """Every call the responder answers, from the same state, gets the real app's own text (tokens by subject)."""
    from textwm.envs.appworld.agent import action_call
    from textwm.envs.appworld.demos import same_response
    from textwm.envs.appworld.responder import respond, track_login

    world = parse_world(WORLD, ground_truth="2")
    env.reset("hand_1")
    calls = [call("supervisor__show_account_passwords"), call("spotify__show_song_library"),
             call("venmo__show_transactions", page_index=0), call("phone__search_contacts"),
             call("spotify__login", username="ada.love@gmail.com", password="nope"),
             call("spotify__login", username="ada.love@gmail.com"), call("spotify__login", password="x"),
             call("phone__login", username="ada.love@gmail.com", password=CREDENTIALS["venmo"]),
             call("phone__login", username="5550001111", password=CREDENTIALS["venmo"]),
             call("spotify__login", username="ada.love@gmail.com", password=CREDENTIALS["spotify"]),
             call("spotify__review_song", song_id=11), call("spotify__review_song"), call("spotify__like_song"),
             call("spotify__show_songs"), call("spotifyy__login"), call("venmo__login", username="ada.love@gmail.com",
                                                                          password=CREDENTIALS["venmo"]),
             call("venmo__create_transaction", amount=3), call("venmo__logout"), call("venmo__show_transactions"),
             call("login"), call("__login"), call("gmail__login", username="ada.love@gmail.com", password="x"),
             call("amazon__show_cart"), call("supervisor__complete_task", answer="2")]
    logged_in, answered = [], 0
    for action in calls:
        name, arguments = action_call(action)
        ours = respond(world, logged_in, name, arguments)
        real = env.step(action).observation
        if ours is not None:
            answered += 1
            assert same_response(ours, real), (action, ours, real)
        track_login(logged_in, name, real)
    assert answered == len(calls) - 1  # all but logout, which the world model answers
