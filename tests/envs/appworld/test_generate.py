"""Generated worlds in the paper's row format, and the scripted expert's moves on hand-written responses.

That the expert answers every generated task right in the real apps is the slow tier's (the contract suite's
AppWorld case builds from generated worlds and requires every expert run to succeed)."""

from __future__ import annotations

import json

from textwm.envs.appworld import expert
from textwm.envs.appworld.generate import generate_rows
from textwm.envs.appworld.spec import AppWorldSpec
from textwm.envs.appworld.world import parse_world


def test_rows_are_deterministic_paper_rows_with_answers_from_their_records():
    rows = generate_rows(30, seed=3)
    assert rows == generate_rows(30, seed=3) and rows[:5] != generate_rows(5, seed=4)
    spec = AppWorldSpec()
    kinds = set()
    for row in rows:
        start = spec.load_row(row, need_sim=True)
        world = start.sim_task
        kinds.add(start.family)
        library = [s for s in world.records["songs"] if s.get("in_library")]
        if start.family == "song_count":
            assert row["ground_truth"] == str(len(library))
        if start.family == "longest_song":
            assert row["ground_truth"] == max(library, key=lambda s: s["duration"])["title"]
        if start.family == "note_count":
            assert row["ground_truth"] == str(len(world.records["notes"]))
        assert {a.app for a in world.accounts} == {"spotify", "venmo", "simple_note"}
        assert isinstance(row["messages"], str) and row["instruction"] in expert.TASKS
    assert len(kinds) >= 5


def call(name, **parameters):
    return json.dumps([{"name": name, "parameters": parameters}])


def test_the_expert_pages_looks_up_and_answers():
    q = "What is the title of the most played song among the songs I liked on Spotify?"
    history = []
    assert expert.next_call(q, history) == call("supervisor__show_account_passwords")
    history.append((expert.next_call(q, history), json.dumps([{"app": "spotify", "username": "a@b.c", "password": "p"}])))
    assert expert.next_call(q, history) == call("spotify__login", username="a@b.c", password="p")
    history.append((expert.next_call(q, history), json.dumps({"access_token": "t", "token_type": "Bearer"})))
    assert expert.next_call(q, history) == call("spotify__show_liked_songs", page_index=0, page_limit=20)
    page = [{"song_id": 4, "title": "A", "artists": []}, {"song_id": 7, "title": "B", "artists": []}]
    history.append((expert.next_call(q, history), json.dumps(page)))
    assert expert.next_call(q, history) == call("spotify__show_liked_songs", page_index=1, page_limit=20)
    history.append((expert.next_call(q, history), "[]"))
    for song_id, plays in ((4, 10), (7, 30)):
        assert expert.next_call(q, history) == call("spotify__show_song", song_id=song_id)
        history.append((call("spotify__show_song", song_id=song_id), json.dumps({"song_id": song_id, "play_count": plays})))
    final = expert.next_call(q, history)
    assert final == call("supervisor__complete_task", answer="B")
    history.append((final, '{"message": "Marked the active task complete."}'))
    assert expert.next_call(q, history) is None and expert.next_call("Do something else.", []) is None


def test_the_expert_gives_up_on_a_listing_without_what_its_answer_needs():
    # A world model can write songs without artists: the expert answers "" (a failed task), it does not crash the run.
    q = "Which artist has the most songs in my Spotify song library? Give the artist's name."
    history = [(call("supervisor__show_account_passwords"),
                json.dumps([{"app": "spotify", "username": "a@b.c", "password": "p"}])),
               (call("spotify__login", username="a@b.c", password="p"), json.dumps({"access_token": "t"})),
               (call("spotify__show_song_library", page_index=0, page_limit=20),
                json.dumps([{"song_id": 1, "title": "A", "artists": []}])),
               (call("spotify__show_song_library", page_index=1, page_limit=20), "[]")]
    assert expert.next_call(q, history) == call("supervisor__complete_task", answer="")


def test_parse_world_of_a_generated_row_keeps_every_table():
    row = generate_rows(1)[0]
    world = parse_world(row["wm_system_prompt"])
    assert set(world.records) == {"songs", "artists", "venmo_friends", "notes"}
    assert all(f["password"] for f in world.records["venmo_friends"])  # AppWorld's users need one


def test_the_expert_agent_reads_the_conversation_so_it_plays_in_the_world_model_too():
    from textwm.eval.agents import AgentError, ExpertAgent

    row = next(r for r in generate_rows(20) if r["task_id"].startswith("song_count"))
    spec = AppWorldSpec()
    start = list(spec.load_row(row).messages)
    agent = ExpertAgent(spec)
    (first,) = agent.reply_batch([start])  # no env info: a simulated episode
    assert first == call("supervisor__show_account_passwords")
    world = parse_world(row["wm_system_prompt"])
    passwords = [{"app": a.app, "username": a.username, "password": a.password} for a in world.accounts]
    conversation = [*start, {"role": "assistant", "content": first},
                    {"role": "user", "content": f"<tool_response>\n{json.dumps(passwords)}\n</tool_response>"}]
    (second,) = agent.reply_batch([conversation])
    assert json.loads(second)[0]["name"] == "spotify__login"
    (none,) = agent.reply_batch([[{"role": "system", "content": "x"}, {"role": "user", "content": "Sing."}]])
    assert isinstance(none, AgentError) and "simulated episode" in str(none)
