"""Hand-written AppWorld rows in the paper's formats (an RL task row, an SFT demo), for tests."""

from __future__ import annotations

import json

from textwm.envs.appworld import agent, tools

EMAIL = "nora.kim@gmail.com"
PASSWORDS = {"spotify": "s3cr3t!Q", "venmo": "v#nm0-77", "simple_note": "n0te$pw"}

WORLD_TEXT = f"""\
User identity: Nora Kim, email: {EMAIL}, phone: 5550101234

Account credentials:
- spotify: username={EMAIL}, password={PASSWORDS['spotify']}
- venmo: username={EMAIL}, password={PASSWORDS['venmo']}
- simple_note: username={EMAIL}, password={PASSWORDS['simple_note']}

Active task: What is the title of the longest song in my Spotify song library?
Current date: 2023-05-20

Database records:
  songs (3 total, 3 shown):
    - release_date: 2021-03-01, title: Paper Lanterns, duration: 241, play_count: 120, like_count: 4, id: 7, genre: pop, artists: ['Mara Vance'], in_library: True
    - release_date: 2020-11-12, title: Salt and Cedar, duration: 305, play_count: 88, like_count: 2, id: 9, genre: folk, artists: ['Ivo Hart', 'Mara Vance'], in_library: True, liked: True
    - release_date: 2022-06-30, title: Night Ferry, duration: 198, play_count: 301, like_count: 9, id: 12, genre: indie, artists: ['Ivo Hart']
  notes (1 total, 1 shown):
    - id: 3, title: Groceries, content: eggs, rice, limes, tags: ['home'], pinned: False

spotify__show_song_library(page_index: int, page_limit: int) → object
- Returns: {{"total": int, "songs": array of song objects}}
"""

TOOL_NAMES = ["supervisor__show_account_passwords", "supervisor__complete_task", "spotify__login",
              "spotify__show_song_library", "spotify__show_song", "simple_note__login", "simple_note__search_notes"]


def rl_row(*, messages_as_string: bool = True, ground_truth: str = "Salt and Cedar", **overrides) -> dict:
    """An RL task row as the paper's ``appworld_rl_split_clean.jsonl`` writes it."""
    instruction = "What is the title of the longest song in my Spotify song library?"
    messages = [{"role": "system", "content": agent.system_prompt(tools.catalog()[n] for n in TOOL_NAMES)},
                {"role": "user", "content": instruction}]
    row = {"messages": json.dumps(messages) if messages_as_string else messages, "task_id": "a1b2c3d_1",
           "instruction": instruction, "ground_truth": ground_truth, "wm_system_prompt": WORLD_TEXT,
           "max_turns": "8"}
    row.update(overrides)
    return row


def call(name: str, **parameters) -> str:
    return json.dumps([{"name": name, "parameters": parameters}])


def real_token(app: str) -> str:
    """A token as the real app signs it: our subject, another expiry and signature."""
    import base64

    def b64(d: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()
    return f"{b64({'alg': 'HS256', 'typ': 'JWT'})}.{b64({'sub': f'{app}+{EMAIL}', 'exp': 1684412098})}.c2lnbmF0dXJl"


LIBRARY = [{"song_id": 7, "title": "Paper Lanterns", "album_id": None, "duration": 241,
            "artists": [{"id": 1, "name": "Mara Vance"}], "added_at": "2023-05-18T12:00:00"},
           {"song_id": 9, "title": "Salt and Cedar", "album_id": None, "duration": 305,
            "artists": [{"id": 2, "name": "Ivo Hart"}, {"id": 1, "name": "Mara Vance"}],
            "added_at": "2023-05-18T12:00:00"}]

#: (call, real response) steps of a demo solving the RL row's task.
DEMO_STEPS = [
    (call("supervisor__show_account_passwords"),
     json.dumps([{"app": a, "username": EMAIL, "password": p} for a, p in PASSWORDS.items()])),
    (call("spotify__login", username=EMAIL, password="wrong"),
     tools.http_error(401, "Invalid credentials")),
    (call("spotify__login", username=EMAIL, password=PASSWORDS["spotify"]),
     json.dumps({"access_token": real_token("spotify"), "token_type": "Bearer"})),
    (call("spotify__show_song_library", page_index=0, page_limit=20), json.dumps(LIBRARY)),
    (call("spotify__show_song_library", page_index=1, page_limit=20), "[]"),
]
FINAL = call("supervisor__complete_task", answer="Salt and Cedar")


def demo_row(*, final: str | None = FINAL, steps=DEMO_STEPS) -> dict:
    """An SFT demo as the paper's ``appworld_sft_gpt_agent.jsonl`` writes it (messages as a list)."""
    row = rl_row(messages_as_string=False)
    messages = list(row["messages"])
    for action, response in steps:
        messages += [{"role": "assistant", "content": action},
                     {"role": "user", "content": agent.tool_response_message(response)}]
    if final:
        messages.append({"role": "assistant", "content": final})
    return {"messages": messages, "task_id": row["task_id"], "instruction": row["instruction"]}
