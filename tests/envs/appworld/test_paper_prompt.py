"""The paper's AppWorld WM query and record responder (``wm_prompt: paper``) on a hand-written world."""

from __future__ import annotations

import json

import pytest

from tests.envs.appworld import fixtures as fx
from textwm.envs import get_env
from textwm.envs import wm_prompt as cli
from textwm.envs.appworld import paper_prompt as pp

SPEC = get_env("appworld")

#: The paper's builder's prompt for a folk-song search, checked line by line against its code.
EXPECTED_SEARCH = """\
## ENVIRONMENT STATE
The environment is AppWorld tool-response prediction.

Active task:
- What is the title of the longest song in my Spotify song library?

Current date:
- 2023-05-20

Account credentials:
- spotify: username=nora.kim@gmail.com, password=s3cr3t!Q
- venmo: username=nora.kim@gmail.com, password=v#nm0-77
- simple_note: username=nora.kim@gmail.com, password=n0te$pw

Active tool call:
- tool_name: spotify__search_songs
- arguments: {"genre": "folk", "page_index": 0, "page_limit": 2}
- validation_status: valid
- validation_error: null

## TASK CONTEXT
Predict only the JSON tool response for this one AppWorld action. Do not solve the whole user task. Do not echo the action.

## TOOL SCHEMAS
- spotify__search_songs(query, artist_id, album_id, genre, min_release_date, max_release_date, min_play_count, \
max_play_count, min_like_count, max_like_count, page_index, page_limit)
- Return shape for list/search tools: {"total": int, "songs": array}
- Relevant source section: songs
- For invalid calls, return exactly one JSON object with an error key.

## DOMAIN RULES
- Validate the tool name and argument value types before generating a response.
- If validation_status is valid, the active tool is available and the arguments passed validation.
- This is not an unknown-tool case. Do not return an error for tool availability.
- Returned records and IDs must come only from the record lines shown below.
- Return strict valid JSON only. Use JSON true/false/null, not Python True/False/None.
- No markdown, no commentary, no tracebacks, and do not double-quote or escape the whole JSON object.
- Do not include <think> text. Wrap the final JSON in <tool_response> only if the model requires tags.

## COMPUTED QUERY STATE
- matched_count_after_filters: 1
- page_index: 0
- page_limit: 2
- page_offset: 0
- records_on_this_page: 1
- The response total field must equal matched_count_after_filters.
- The response array must contain only the records_on_this_page listed below.

Strict JSON records for this response page:
[
  {
    "release_date": "2020-11-12",
    "title": "Salt and Cedar",
    "duration": 305,
    "play_count": 88,
    "like_count": 2,
    "id": 9,
    "genre": "folk",
    "artists": [
      "Ivo Hart",
      "Mara Vance"
    ],
    "in_library": true,
    "liked": true
  }
]

## STEERING DIRECTIVES
- Expected validation status: valid.
- The tool call is valid; do not return an error.
- For list/search tools, apply filters before pagination; never repeat page 0 for later pages.
- For login success, return a short access token only when credentials match Account credentials.
- If this is a list/search success, return {"total": 1, "songs": [...]} using only Strict JSON records for this \
response page.

PREDICTION TARGET: The strict JSON tool response for the action in the user turn."""


def test_a_search_is_written_as_the_paper_writes_it():
    assert pp.system_prompt(fx.WORLD_TEXT, "spotify__search_songs",
                            {"genre": "folk", "page_index": 0, "page_limit": 2}) == EXPECTED_SEARCH


def test_an_invalid_call_states_its_error_and_has_no_computed_state():
    prompt = pp.system_prompt(fx.WORLD_TEXT, "spotify__login", {"username": fx.EMAIL, "password": "nope"})
    assert "- validation_status: invalid\n- validation_error: Invalid username or password\n" in prompt
    assert '- The exact error response body is: {"error": "Invalid username or password"}.' in prompt
    assert "- Unknown tools, bad credentials, schema/type placeholder arguments, and missing target records" in prompt
    assert "COMPUTED QUERY STATE" not in prompt and "- spotify__login(username, password)\n" in prompt
    assert '{"total": 0, "data": [...]}' in prompt
    unknown = pp.system_prompt(fx.WORLD_TEXT, "spotify__show_song", {"song_id": 9})
    assert "- validation_error: Unknown tool: spotify__show_song" in unknown
    assert "- spotify__show_song(unknown)" in unknown
    schema = pp.validation_error(fx.WORLD_TEXT, "spotify__like_song", {"song_id": {"type": "int"}})
    assert schema == "Invalid argument values: schema/type dictionaries are not runtime values"
    assert pp.validation_error(fx.WORLD_TEXT, "simple_note__show_note", {"note_id": 4}) == "Record not found"


def test_pages_filters_and_the_papers_quirks():
    assert pp.page_args({}) == (0, 5) and pp.page_args({"page_index": -2, "page_limit": 99}) == (0, 20)
    assert pp.page_args({"page_limit": "x"}) == (0, 5) and pp.page_args({"page_limit": 0}) == (0, 1)
    matched, page = pp.record_context(fx.WORLD_TEXT, "spotify__show_song_library", {"page_index": 1, "page_limit": 2})
    assert matched == 3 and [pp.record_object(r)["id"] for r in page] == [12]      # prompt order, no sorting
    assert pp.record_context(fx.WORLD_TEXT, "spotify__show_liked_songs", {})[0] == 1
    assert pp.record_context(fx.WORLD_TEXT, "spotify__search_songs", {"min_play_count": 100})[0] == 2
    # Songs list no artist_id field, so the paper's artist filter matches nothing.
    assert pp.record_context(fx.WORLD_TEXT, "spotify__search_songs", {"artist_id": 1})[0] == 0
    assert pp.record_context(fx.WORLD_TEXT, "simple_note__search_notes", {"query": "RICE"})[0] == 1
    # The last section runs to the end of the prompt: its last record takes the text after the records.
    note = pp.record_object(pp.record_context(fx.WORLD_TEXT, "simple_note__show_note", {"note_id": 3})[1][0])
    assert note["content"] == "eggs, rice, limes" and note["tags"] == ["home"]
    assert note["pinned"].startswith("False\n\nspotify__show_song_library(")


def test_the_papers_record_responder():
    def answer(tool, logged_in=("spotify",), **args):
        text = pp.paper_response(fx.WORLD_TEXT, tool, pp.wm_arguments(args), logged_in)
        return None if text is None else json.loads(text)

    assert answer("spotify__show_song_library", logged_in=()) == {"error": "401 Unauthorized. Please login first."}
    library = answer("spotify__show_song_library", page_limit=50)
    assert library["total"] == 3 and [s["id"] for s in library["songs"]] == [7, 9, 12]
    assert answer("spotify__search_songs", logged_in=(), query="ferry")["total"] == 1   # exempt from the login
    assert answer("spotify__login", username=fx.EMAIL, password=fx.PASSWORDS["spotify"]) == pp.CANNED_LOGIN
    assert answer("spotify__login", username=fx.EMAIL, password="x") == {"error": "Invalid username or password"}
    assert answer("spotify__like_song", song_id=12) == pp.CANNED_SUCCESS
    assert answer("simple_note__show_note", logged_in=("simple_note",), note_id=3)["title"] == "Groceries"
    assert answer("supervisor__complete_task", answer="Salt and Cedar") is None      # the world model's
    assert pp.wm_arguments({"access_token": "t", "page_limit": "many"}) == {"page_limit": 5}


def test_the_simulator_queries_in_the_papers_layout(monkeypatch):
    monkeypatch.setenv("APPWORLD_WM_PROMPT", "paper")
    start = SPEC.load_row(fx.rl_row(), need_sim=True)
    episode = SPEC.start_episode(start)
    login = fx.call("spotify__login", username=fx.EMAIL, password=fx.PASSWORDS["spotify"])
    episode.observe(login, episode.local_answer(login), "local")
    action = fx.call("spotify__search_songs", genre="folk", page_index=0, page_limit=2)
    query = episode.wm_query(action)
    assert query.system_prompt == EXPECTED_SEARCH
    conversation = json.loads(query.state)
    assert conversation[:2] == [dict(m) for m in start.messages]
    assert conversation[2] == {"role": "assistant", "content": login}
    assert conversation[3]["content"].startswith("<tool_response>\n{") and conversation[-1]["content"] == action
    call = json.loads(query.action)[0]
    assert call["tool_calls"][0]["function"] == {"name": "spotify__search_songs",
                                                 "arguments": '{"genre": "folk", "page_index": 0, "page_limit": 2}'}
    assert call["tool_calls"][0]["id"].startswith("call_") and episode.wm_query(action) == query   # reproducible
    again = SPEC.episode_from_dict(json.loads(json.dumps(episode.to_dict())))
    assert again.wm_query(action) == query
    monkeypatch.setenv("APPWORLD_WM_PROMPT", "compact")
    with pytest.raises(ValueError, match="APPWORLD_WM_PROMPT='compact': use one of ours, paper"):
        SPEC.start_episode(start)


def test_the_paper_responder_switch(monkeypatch):
    start = SPEC.load_row(fx.rl_row(), need_sim=True)
    listing = fx.call("spotify__show_song_library", page_index=0, page_limit=20)
    login = fx.call("spotify__login", username=fx.EMAIL, password=fx.PASSWORDS["spotify"])
    ours = SPEC.start_episode(start)
    ours.observe(login, ours.local_answer(login), "local")
    assert ours.local_answer(listing) is None                 # ours leaves the listing to the world model
    monkeypatch.setenv("APPWORLD_PAPER_RESPONDER", "1")
    paper = SPEC.start_episode(start)
    paper.observe(login, paper.local_answer(login), "local")
    assert json.loads(paper.local_answer(listing))["total"] == 3
    assert json.loads(paper.local_answer(fx.call("supervisor__show_account_passwords")))[0]["app"] == "spotify"
    monkeypatch.setenv("APPWORLD_PAPER_RESPONDER", "maybe")
    with pytest.raises(ValueError, match="APPWORLD_PAPER_RESPONDER"):
        SPEC.start_episode(start)


def test_the_cli_prints_the_query(tmp_path, capsys):
    state = [{"role": "system", "content": "agent"}, {"role": "user", "content": "task"}]
    step = {"system_prompt": fx.WORLD_TEXT, "state": state, "tool_name": "spotify__search_songs",
            "tool_args": {"genre": "folk", "page_index": 0, "page_limit": 2}, "call_id": "call_0a1b2c3d"}
    path = tmp_path / "step.json"
    path.write_text(json.dumps(step))
    assert cli.main(["--env", "appworld", "--format", "paper", "--step", str(path)]) == 0
    system, user = json.loads(capsys.readouterr().out)["messages"]
    assert system["content"] == EXPECTED_SEARCH
    action = [{"role": "assistant", "content": "", "tool_calls": [{"id": "call_0a1b2c3d", "type": "function", "function": {
        "name": "spotify__search_songs", "arguments": '{"genre": "folk", "page_index": 0, "page_limit": 2}'}}]}]
    assert user["content"] == f"State: {json.dumps(state)}\n\nAction: {json.dumps(action)}"


def test_the_builder_writes_rows_in_the_papers_layout(tmp_path):
    from textwm.data.jsonl import read_jsonl
    from textwm.envs.appworld.build import AppWorldBuildConfig
    from textwm.envs.build import build

    demos = tmp_path / "demos.jsonl"
    demos.write_text(json.dumps(fx.demo_row()) + "\n")
    config = AppWorldBuildConfig(out_dir=str(tmp_path / "data"), demos=str(demos), prompt_style="paper",
                                 train_variations=5, dev_variations=5, test_variations=5, workers=1)
    build("appworld", config)
    rows = [r for path in sorted((tmp_path / "data").glob("wm_*.jsonl")) for r in read_jsonl(path, allow_empty=True).rows]
    demo = fx.demo_row()["messages"]
    demo = json.loads(demo) if isinstance(demo, str) else demo
    assert rows and all(r["messages"][0]["content"].startswith("## ENVIRONMENT STATE\n") for r in rows)
    first = rows[0]["messages"][1]["content"]
    state, action = first.removeprefix("State: ").split("\n\nAction: ")
    assert json.loads(state)[:2] == demo[:2] and json.loads(action)[0]["tool_calls"][0]["type"] == "function"
    with pytest.raises(ValueError, match="--prompt-style"):
        AppWorldBuildConfig(out_dir=str(tmp_path / "x"), demos=str(demos), prompt_style="compact")


def test_rows_built_in_the_papers_layout_are_queried_in_it():
    from textwm.envs.alfworld.build import demo_layout as alfworld_layout
    from textwm.envs.appworld.build import demo_layout as appworld_layout

    start = SPEC.load_row(fx.rl_row(wm_prompt="paper"), need_sim=True)
    assert SPEC.start_episode(start).wm_query(fx.call("spotify__show_song_library")).system_prompt.startswith(
        "## ENVIRONMENT STATE\nThe environment is AppWorld tool-response prediction.")
    with pytest.raises(ValueError, match="wm_prompt 'fancy' is no WM prompt layout"):
        SPEC.start_episode(SPEC.load_row(fx.rl_row(wm_prompt="fancy"), need_sim=True))
    # The demo's --prompt-style, per env.
    assert [appworld_layout(s) for s in ("compact", "full", "paper")] == ["ours", "ours", "paper"]
    assert [alfworld_layout(s) for s in ("compact", "full", "paper")] == ["scene", "scene", "paper"]


def test_the_papers_repair_of_world_model_answers(monkeypatch):
    repair = pp.repair_wm_answer
    assert repair('<think>x</think>\n<tool_response>{"total": 1}</tool_response>') == '{"total": 1}'
    assert repair('{"a": 1 "b": "\u00e9"}') == '{"a": 1, "b": "\\u00e9"}'      # repaired, written back as the paper does
    assert repair('[{"content": {"x": 1}}]') == "{'x': 1}" and repair("[]") == "[]"
    assert repair("no json here") == '""'                                    # prose comes out empty, as there
    monkeypatch.setenv("APPWORLD_WM_JSON_REPAIR", "1")
    episode = SPEC.start_episode(SPEC.load_row(fx.rl_row(), need_sim=True))
    action = fx.call("spotify__show_current_song")
    episode.observe(action, '{"title": "Night Ferry" "id": 12}', "wm")
    assert episode.observations[-1] == '{"title": "Night Ferry", "id": 12}' and episode.malformed == 1
    assert episode.agent_message('{"title": "Night Ferry" "id": 12}') == \
        '<tool_response>\n{"title": "Night Ferry", "id": 12}\n</tool_response>'
