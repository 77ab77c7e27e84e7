"""A scripted expert for the generated question tasks (:mod:`~textwm.envs.appworld.generate`).

It reads only what the agent would read: the task's instruction and the responses so far. Each
question names the listing it needs; the expert looks up the passwords, logs in to the app, pages through
the listing (``page_limit`` 20) until a page comes back empty, looks songs up one by one where the listing
lacks a field (play counts), and answers. It is the generated tasks' reference: in the real apps, it
must answer every one right (which checks the seeding against the rows' ``ground_truth``). In a world model it
plays on whatever comes back: a failed or garbled listing ends the paging, a login that fails twice gives up.

:func:`next_call` is a pure function of (instruction, [(action, response), ...]); None for a task it does not
know or once it has answered.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from textwm.envs.appworld.agent import action_call
from textwm.envs.appworld.calls import canonical
from textwm.envs.appworld.reward import COMPLETE_TASK, SHOW_PASSWORDS

log = logging.getLogger(__name__)

PAGE_LIMIT = 20
#: Pages of one listing at most (a world model may never answer an empty page).
MAX_PAGES = 10


def _call(name: str, **parameters: Any) -> str:
    return canonical(name, parameters)


def _give_up(instruction: str, why: str) -> str:
    log.warning("AppWorld expert gives up on %r: %s", instruction[:80], why)
    return _call(COMPLETE_TASK, answer="")


def _longest(items: list[dict], _: dict) -> str:
    return max(items, key=lambda s: s["duration"])["title"]


def _top_artist(items: list[dict], _: dict) -> str:
    return Counter(a["name"] for s in items for a in s["artists"]).most_common(1)[0][0]


def _most_played(items: list[dict], details: dict) -> str:
    return max(items, key=lambda s: details.get(s["song_id"], {}).get("play_count", 0))["title"]


def _pinned(items: list[dict], _: dict) -> str:
    return next(n["title"] for n in items if n["pinned"])


#: instruction -> (app, listing API, needs song details, answer from (items, details)).
TASKS: dict[str, tuple[str, str, bool, Callable[[list[dict], dict], str]]] = {
    "How many songs are in my Spotify song library?": ("spotify", "show_song_library", False,
                                                       lambda items, _: str(len(items))),
    "How many notes do I have in Simple Note?": ("simple_note", "search_notes", False, lambda items, _: str(len(items))),
    "How many friends do I have on Venmo?": ("venmo", "search_friends", False, lambda items, _: str(len(items))),
    "What is the title of the longest song in my Spotify song library?": ("spotify", "show_song_library", False,
                                                                          _longest),
    "What is the title of the most played song among the songs I liked on Spotify?": (
        "spotify", "show_liked_songs", True, _most_played),
    "What is the title of my pinned note in Simple Note?": ("simple_note", "search_notes", False, _pinned),
    "Which artist has the most songs in my Spotify song library? Give the artist's name.": (
        "spotify", "show_song_library", False, _top_artist),
}


def next_call(instruction: str, history: Sequence[tuple[str, str]]) -> str | None:
    """The expert's next call (canonical form), None when the task is unknown or already answered."""
    task = TASKS.get(instruction.strip())
    if task is None:
        return None
    app, listing, needs_details, answer = task
    calls = [(action_call(a), _json(r)) for a, r in history]
    if any(name == COMPLETE_TASK for (name, _), _ in calls):
        return None
    passwords = next((r for (name, _), r in calls if name == SHOW_PASSWORDS), None)
    account = next((a for a in passwords or [] if isinstance(a, dict) and a.get("app") == app), None)
    if passwords is None:
        return _call(SHOW_PASSWORDS)
    login = f"{app}__login"
    logins = [r for (name, _), r in calls if name == login]
    if account is None or (len(logins) > 1 and not any(isinstance(r, dict) and "access_token" in r for r in logins)):
        return _give_up(instruction, "no account for the app in the passwords, or two logins failed")
    if not any(isinstance(r, dict) and "access_token" in r for r in logins):
        return _call(login, username=account.get("username"), password=account.get("password"))
    pages = [r for (name, _), r in calls if name == f"{app}__{listing}"]
    # Page on while pages are non-empty lists; an error or garbage page ends the listing (no endless retries).
    if not pages or (isinstance(pages[-1], list) and pages[-1] and len(pages) < MAX_PAGES):
        return _call(f"{app}__{listing}", page_index=len(pages), page_limit=PAGE_LIMIT)
    items = [item for page in pages if isinstance(page, list) for item in page if isinstance(item, dict)]
    details = {r["song_id"]: r for (name, _), r in calls
               if name == "spotify__show_song" and isinstance(r, dict) and "song_id" in r}
    asked = {args.get("song_id") for (name, args), _ in calls if name == "spotify__show_song"}
    if needs_details:
        missing = [s.get("song_id") for s in items if s.get("song_id") not in asked]
        if missing:
            return _call("spotify__show_song", song_id=missing[0])
    try:
        return _call(COMPLETE_TASK, answer=answer(items, details))
    except (KeyError, TypeError, ValueError, IndexError, StopIteration) as exc:  # records lacking what it needs
        return _give_up(instruction, f"the listing lacks what the answer needs ({type(exc).__name__}: {exc})")


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None
