"""AppWorld worlds and question tasks generated offline, written as the paper's RL rows.

AppWorld's official tasks and base databases need ``appworld download data`` (internet); the apps
themselves are installed. This module makes worlds of its own: a user with Spotify, Venmo and Simple
Note accounts and records (artists, songs in and out of the library, likes, playlists, friends, payments,
notes), each with a question whose answer follows from the records (``ground_truth``), in the format of
``appworld_rl_split_clean.jsonl`` (``wm_system_prompt`` records), so the simulator, the real apps (seeded
from the same records, :mod:`~textwm.envs.appworld.seed`) and the reward read them as they read the paper's.

Every world is drawn from ``random.Random(seed, index)``: the rows do not depend on how many are made.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from textwm.envs.appworld import agent, tools

FIRST = ["Nora", "Ivo", "Mara", "Theo", "Lena", "Omar", "Ruth", "Kai", "Ada", "Joel", "Zoe", "Emil", "Iris", "Hugo",
         "Vera", "Sami", "Tess", "Remy", "Lila", "Otto"]
LAST = ["Kim", "Hart", "Vance", "Okafor", "Lind", "Moreau", "Patel", "Quinn", "Sato", "Brandt", "Costa", "Ruiz"]
WORDS = ["Paper", "Lanterns", "Salt", "Cedar", "Night", "Ferry", "Copper", "Rain", "Glass", "Harbor", "Velvet",
         "Static", "Orchard", "Winter", "Signal", "Ember", "Silver", "Tide", "Hollow", "Bloom", "Neon", "Dust"]
GENRES = ["pop", "rock", "jazz", "folk", "indie", "R&B", "classical", "EDM"]
NOTE_TOPICS = [("Groceries", "eggs, rice, limes"), ("Gym plan", "mon legs, wed back, fri arms"),
               ("Books to read", "Dune; Middlemarch; The Overstory"), ("Trip ideas", "Lisbon, Kyoto, Oaxaca"),
               ("Gift list", "scarf for mom, records for Theo"), ("Recipes", "dal, shakshuka, pho"),
               ("Work todo", "review slides, book rooms"), ("Passwords hint", "ask the supervisor app")]
APPS = ("spotify", "venmo", "simple_note")
DATE = "2023-05-20"
MAX_TURNS = 20
TOOLS = ["supervisor__show_account_passwords", "supervisor__complete_task",
         "spotify__login", "spotify__show_song_library", "spotify__show_liked_songs", "spotify__show_song",
         "spotify__search_songs", "spotify__show_playlist_library", "spotify__show_playlist", "spotify__like_song",
         "venmo__login", "venmo__search_friends", "venmo__show_transactions",
         "simple_note__login", "simple_note__search_notes", "simple_note__show_note"]


def _title(rng: random.Random, taken: set[str]) -> str:
    while True:
        title = " ".join(rng.sample(WORDS, rng.choice([2, 2, 3])))
        if title not in taken:
            taken.add(title)
            return title


def _password(rng: random.Random) -> str:
    return "".join(rng.choice("abcdefghjkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789!#$%^*") for _ in range(8))


def _value(v: Any) -> str:
    return repr(v) if isinstance(v, (list, bool)) else str(v)


def _record(fields: dict[str, Any]) -> str:
    return "    - " + ", ".join(f"{k}: {_value(v)}" for k, v in fields.items())


@dataclass(frozen=True)
class Question:
    #: The question's kind, the task family (``song_count``, ...).
    kind: str
    instruction: str
    answer: str


def _unique_max(items: list[dict], key: str) -> dict | None:
    if not items:
        return None
    ordered = sorted(items, key=lambda x: x[key], reverse=True)
    return ordered[0] if len(ordered) == 1 or ordered[0][key] != ordered[1][key] else None


def _questions(songs: list[dict], notes: list[dict], friends: list[dict]) -> list[Question]:
    library = [s for s in songs if s.get("in_library")]
    liked = [s for s in songs if s.get("liked")]
    out = [Question("song_count", "How many songs are in my Spotify song library?", str(len(library))),
           Question("note_count", "How many notes do I have in Simple Note?", str(len(notes))),
           Question("friend_count", "How many friends do I have on Venmo?", str(len(friends)))]
    if longest := _unique_max(library, "duration"):
        out.append(Question("longest_song", "What is the title of the longest song in my Spotify song library?",
                            longest["title"]))
    if top := _unique_max(liked, "play_count"):
        out.append(Question("most_played_liked", "What is the title of the most played song among the songs I "
                                                 "liked on Spotify?", top["title"]))
    pinned = [n for n in notes if n["pinned"]]
    if len(pinned) == 1:
        out.append(Question("pinned_note", "What is the title of my pinned note in Simple Note?", pinned[0]["title"]))
    artists = Counter(a for s in library for a in s["artists"]).most_common(2)
    if artists and (len(artists) == 1 or artists[0][1] > artists[1][1]):
        out.append(Question("top_artist", "Which artist has the most songs in my Spotify song library? Give the "
                                          "artist's name.", artists[0][0]))
    return out


def generate_world(seed: int, index: int, *, pick: Callable[[list[Question]], Question] | None = None
                   ) -> dict[str, Any]:
    """One RL task row (the paper's format) of a generated world."""
    rng = random.Random(f"{seed}:{index}")
    first, last = rng.choice(FIRST), rng.choice(LAST)
    email = f"{first.lower()}.{last.lower()}{index}@gmail.com"
    accounts = {app: _password(rng) for app in APPS}
    artists = [{"id": i + 1, "name": f"{rng.choice(FIRST)} {rng.choice(LAST)}", "genre": rng.choice(GENRES),
                "follower_count": rng.randint(3, 90)} for i in range(rng.randint(3, 6))]
    artists = list({a["name"]: a for a in artists}.values())
    taken: set[str] = set()
    songs = []
    for i in range(rng.randint(5, 10)):
        by = rng.sample(artists, rng.choice([1, 1, 2]))
        song = {"release_date": f"20{rng.randint(18, 22)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
                "title": _title(rng, taken), "duration": rng.randint(150, 360), "play_count": rng.randint(1, 999),
                "like_count": rng.randint(0, 30), "id": 10 + i, "genre": rng.choice(GENRES), "review_count": 0,
                "artists": [a["name"] for a in by]}
        if rng.random() < 0.7:
            song["in_library"] = True
        if rng.random() < 0.4:
            song["liked"] = True
        songs.append(song)
    friends = []
    for i in range(rng.randint(2, 4)):
        f, la = rng.choice(FIRST), rng.choice(LAST)
        friends.append({"created_at": f"2022-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}", "id": 40 + i,
                        "last_name": la, "password": _password(rng), "first_name": f,
                        "email": f"{f.lower()}{la.lower()}{i}@gmail.com", "venmo_balance": float(rng.randint(10, 900))})
    notes = [{"id": 3 + i, "title": t, "content": c, "tags": [rng.choice(["home", "work", "fun"])],
              "pinned": i == 0 and rng.random() < 0.6, "created_at": f"2023-0{rng.randint(1, 4)}-0{i + 1}"}
             for i, (t, c) in enumerate(rng.sample(NOTE_TOPICS, rng.randint(2, 4)))]
    questions = _questions(songs, notes, friends)
    question = pick(questions) if pick else rng.choice(questions)
    lines = [f"User identity: {first} {last}, email: {email}, phone: 555{rng.randint(1000000, 9999999)}", "",
             "Account credentials:", *[f"- {app}: username={email}, password={pw}" for app, pw in accounts.items()],
             "", f"Active task: {question.instruction}", f"Current date: {DATE}", "", "Database records:",
             f"  songs ({len(songs)} total, {len(songs)} shown):", *map(_record, songs),
             f"  artists ({len(artists)} total):", *map(_record, artists),
             f"  venmo_friends ({len(friends)} total, {len(friends)} shown):", *map(_record, friends),
             f"  notes ({len(notes)} total, {len(notes)} shown):", *map(_record, notes)]
    system = agent.system_prompt(tools.catalog()[n] for n in TOOLS)
    messages = [{"role": "system", "content": system}, {"role": "user", "content": question.instruction}]
    return {"messages": json.dumps(messages), "task_id": f"{question.kind}_s{seed}i{index}", "instruction": question.instruction,
            "ground_truth": question.answer, "wm_system_prompt": "\n".join(lines) + "\n", "max_turns": MAX_TURNS}


def generate_rows(n: int, seed: int = 0) -> list[dict[str, Any]]:
    return [generate_world(seed, i) for i in range(n)]
