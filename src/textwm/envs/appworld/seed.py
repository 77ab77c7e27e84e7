"""A row's world as AppWorld app records: the ``reset`` payload of ``apps_runner.py``, and what it left out.

:func:`plan_seed` maps a :class:`~textwm.envs.appworld.world.World` (the user, their accounts, the date,
the ``Database records`` tables) onto the apps' SQLModel models, keeping the rows' ids (the agent uses
them). A row that cannot be mapped is skipped with a reason in the :class:`SeedReport`; the runner's
answer (:meth:`SeedReport.add_runner`) adds the rows AppWorld itself refused. Nothing is dropped silently.

| table | app: models |
|---|---|
| artists | spotify: Artist (``follower_count`` is AppWorld's count of followings, not kept) |
| albums | spotify: Album, UserLibraryAlbum, AlbumLike (``liked``) |
| songs | spotify: Song (``artists`` names -> ids via artists; an ``album_id`` not in albums -> null), UserLibrarySong (``in_library``), SongLike (``liked``), UserDownloadedSong (``downloaded``) |
| playlists | spotify: Playlist (the user's), PlaylistSong (``song_ids`` listed in songs) |
| following_artists | spotify: UserArtistFollowing (artists listed in artists) |
| recommendations | spotify: Recommendation (songs listed in songs) |
| music_player | spotify: MusicPlayer (queue titles -> song ids; read from the row text) |
| venmo_friends | venmo: User, Friendship |
| social_feed | venmo: Transaction; its people not otherwise listed become users with the feed's names and made-up emails |
| transactions, payment_requests | venmo: Transaction, PaymentRequest (both people must be known) |
| notes | simple_note: Note (title from the content's first line) |
| directories, files | file_system: Directory (plus ``/``, ``/home/`` and the home folder, also for a row without these tables), File |
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from textwm.envs.appworld.world import UNLISTED_APPS, World, parse_record

#: Time of day of the frozen clock (rows give the date only).
TIME_OF_DAY = "12:00:00"
DEFAULT_DATE = "2023-05-18"
APPS = ("spotify", "venmo", "simple_note", "file_system")
STUB_EMAIL_DOMAIN = "example.com"
_HEADER = re.compile(r"^  (?P<table>\w+) \((?P<counts>[^)]*)\):\s*$", re.MULTILINE)
_COUNT = re.compile(r"(\d+) (total|shown)")


@dataclass
class TableReport:
    """One ``Database records`` table: rows the row text lists, rows parsed, seeded, skipped and why."""

    parsed: int = 0
    seeded: int = 0
    #: ``total`` / ``shown`` as the table's header states them (None: not stated).
    total: int | None = None
    shown: int | None = None
    skipped: Counter = field(default_factory=Counter)
    #: Derived records (library entries, likes, playlist songs, ...): model -> [given, inserted].
    links: dict[str, list[int]] = field(default_factory=dict)
    #: Changes made to rows that were seeded (reason -> count).
    altered: Counter = field(default_factory=Counter)

    def to_dict(self) -> dict[str, Any]:
        return {"total": self.total, "shown": self.shown, "parsed": self.parsed, "seeded": self.seeded,
                "skipped": sum(self.skipped.values()), "skip_reasons": dict(self.skipped),
                "links": {k: {"given": g, "inserted": i} for k, (g, i) in self.links.items()},
                "altered": dict(self.altered)}


@dataclass
class SeedReport:
    task_id: str
    tables: dict[str, TableReport] = field(default_factory=dict)

    def table(self, name: str) -> TableReport:
        return self.tables.setdefault(name, TableReport())

    def add_runner(self, batches: list[dict[str, Any]], kinds: list[str]) -> None:
        """Count what the runner inserted (its answers, in the order of the payload's batches, whose
        kinds :attr:`Seed.kinds` gives: ``rows`` of the table itself or derived ``links``)."""
        for batch, kind in zip(batches, kinds):
            report = self.table(batch["table"])
            if kind == "rows":
                report.seeded += batch["inserted"]
                for error in batch["errors"]:
                    report.skipped[f"AppWorld: {error['error'][:160]}"] += 1
                unlisted = batch["given"] - batch["inserted"] - len(batch["errors"])
                if unlisted:
                    report.skipped["AppWorld refused (beyond the errors listed)"] += unlisted
            else:
                given, inserted = report.links.get(batch["model"], [0, 0])
                report.links[batch["model"]] = [given + batch["given"], inserted + batch["inserted"]]

    @property
    def skipped(self) -> int:
        return sum(sum(t.skipped.values()) for t in self.tables.values())

    def to_dict(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "tables": {k: t.to_dict() for k, t in self.tables.items()}}

    def summary(self) -> str:
        parts = [f"{name} {t.seeded}/{t.parsed}" for name, t in self.tables.items()]
        return f"{self.task_id}: seeded {', '.join(parts) or 'no records'} ({self.skipped} rows skipped)"


@dataclass
class Seed:
    """The runner's ``reset`` world and the report of what was left out so far."""

    payload: dict[str, Any]
    report: SeedReport
    #: Per batch of the payload: ``rows`` (the table's own rows) or ``links`` (for :meth:`SeedReport.add_runner`).
    kinds: list[str]


class _Plan:
    def __init__(self, world: World, task_id: str):
        self.world, self.records = world, world.records
        self.report = SeedReport(task_id)
        self.batches: list[dict[str, Any]] = []
        self.kinds: list[str] = []
        self.user_ids: dict[str, int] = {}
        for m in _HEADER.finditer(world.text):
            counts = {kind: int(n) for n, kind in _COUNT.findall(m["counts"])}
            report = self.report.table(m["table"])
            report.total, report.shown = counts.get("total"), counts.get("shown")
        for table, rows in self.records.items():
            self.report.table(table).parsed = len(rows)

    def add(self, table: str, app: str, model: str, rows: list[dict[str, Any]], *, primary: bool = True) -> None:
        if rows or primary:
            self.batches.append({"table": table, "app": app, "model": model, "rows": rows})
            self.kinds.append("rows" if primary else "links")

    def skip(self, table: str, reason: str, n: int = 1) -> None:
        if n:
            self.report.table(table).skipped[reason] += n


def plan_seed(world: World, task_id: str) -> Seed:
    """The runner's reset payload for ``world`` (see the module docstring)."""
    plan = _Plan(world, task_id)
    first, _, last = world.name.partition(" ")
    accounts = {a.app: a.password for a in world.accounts if a.app in (*APPS, *UNLISTED_APPS)}
    for account in world.accounts:
        if account.app not in accounts:
            plan.skip("accounts", f"app {account.app!r} is not seeded (seeded: {', '.join(APPS)})")
    _spotify(plan)
    _venmo(plan)
    _simple_note(plan)
    _file_system(plan, first)
    hidden = {app: hashlib.sha256(f"{task_id}:{app}".encode()).hexdigest()[:12]
              for app in UNLISTED_APPS if world.account(app) is None}
    payload = {"datetime": f"{world.date or DEFAULT_DATE}T{TIME_OF_DAY}", "apps": [*APPS, *UNLISTED_APPS],
               "hidden_accounts": hidden,
               "user": {"first_name": first, "last_name": last or first, "email": world.email,
                        "phone_number": world.phone},
               "accounts": accounts, "user_ids": plan.user_ids, "task": {"instruction": world.instruction},
               "batches": plan.batches}
    return Seed(payload, plan.report, plan.kinds)


def seed_of(world: World, task_id: str) -> dict[str, Any]:
    """The runner's ``reset`` payload (the world) for ``world``."""
    return plan_seed(world, task_id).payload


def _pick(row: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: row[k] for k in keys if row.get(k) is not None}


def _most_common(values: list[Any]) -> Any:
    values = [v for v in values if v is not None]
    return Counter(values).most_common(1)[0][0] if values else None


# --- spotify -----------------------------------------------------------------------------------------


def _spotify(plan: _Plan) -> None:
    r = plan.records
    if not any(t in r for t in ("songs", "albums", "playlists", "artists", "following_artists", "recommendations")):
        return
    me = plan.user_ids["spotify"] = _most_common([p.get("user_id") for p in r.get("playlists", [])]) or 1
    artists = r.get("artists", [])
    artist_ids = {a["name"]: a["id"] for a in artists if "id" in a and "name" in a}
    plan.add("artists", "spotify", "Artist", [_pick(a, "id", "name", "genre") for a in artists])
    if any("follower_count" in a for a in artists):
        plan.report.table("artists").altered["follower_count not kept (AppWorld counts followings)"] += len(artists)
    albums = r.get("albums", [])
    plan.add("albums", "spotify", "Album", [_pick(a, "id", "title", "artist_ids", "release_date", "genre", "rating",
                                                  "like_count", "review_count") for a in albums])
    plan.add("albums", "spotify", "UserLibraryAlbum", [{"user_id": me, "album_id": a["id"]} for a in albums],
             primary=False)
    plan.add("albums", "spotify", "AlbumLike",
             [{"user_id": me, "album_id": a["id"]} for a in albums if a.get("liked")], primary=False)
    album_ids = {a.get("id") for a in albums}
    songs = []
    for song in r.get("songs", []):
        missing = [n for n in song.get("artists", []) if n not in artist_ids]
        if missing:
            plan.skip("songs", "an artist is not listed in artists")
            continue
        row = _pick(song, "id", "title", "duration", "release_date", "genre", "play_count", "rating", "like_count",
                    "review_count")
        row["artist_ids"] = [artist_ids[n] for n in song.get("artists", [])]
        if song.get("album_id") is not None:
            if song["album_id"] in album_ids:
                row["album_id"] = song["album_id"]
            else:
                plan.report.table("songs").altered["album_id set to null (album not listed in albums)"] += 1
        songs.append((song, row))
    plan.add("songs", "spotify", "Song", [row for _, row in songs])
    for flag, model in (("in_library", "UserLibrarySong"), ("liked", "SongLike"), ("downloaded", "UserDownloadedSong")):
        plan.add("songs", "spotify", model,
                 [{"user_id": me, "song_id": s["id"]} for s, _ in songs if s.get(flag) and s.get("id") is not None],
                 primary=False)
    song_ids = {row["id"] for _, row in songs if "id" in row}
    _playlists(plan, me, song_ids)
    follow = [a for a in r.get("following_artists", []) if a.get("id") in artist_ids.values()]
    plan.skip("following_artists", "artist not listed in artists (its genre is unknown)",
              len(r.get("following_artists", [])) - len(follow))
    plan.add("following_artists", "spotify", "UserArtistFollowing",
             [{"user_id": me, "artist_id": a["id"]} for a in follow])
    recs = [x for x in r.get("recommendations", []) if x.get("song_id") in song_ids]
    plan.skip("recommendations", "song not listed in songs (its duration and release date are unknown)",
              len(r.get("recommendations", [])) - len(recs))
    plan.add("recommendations", "spotify", "Recommendation", [{"user_id": me, "song_id": x["song_id"]} for x in recs])
    _music_player(plan, me, {row["title"]: row["id"] for _, row in songs if "id" in row})


def _playlists(plan: _Plan, me: int | None, song_ids: set[int]) -> None:
    playlists, links, unlisted = [], [], 0
    for p in plan.records.get("playlists", []):
        if p.get("user_id") != me:
            plan.skip("playlists", "owned by another user")
            continue
        playlists.append(_pick(p, "id", "title", "user_id", "created_at", "is_public", "rating", "like_count",
                               "review_count"))
        for song_id in p.get("song_ids", []):
            if song_id in song_ids and p.get("id") is not None:
                links.append({"playlist_id": p["id"], "song_id": song_id})
            else:
                unlisted += 1
    plan.add("playlists", "spotify", "Playlist", playlists)
    plan.add("playlists", "spotify", "PlaylistSong", links, primary=False)
    if unlisted:
        plan.report.table("playlists").altered["playlist song not listed in songs, left out"] += unlisted


def _music_player(plan: _Plan, me: Any, title_ids: dict[str, int]) -> None:
    """``music_player:`` is ``key: value`` lines (not records): the queue's titles and the position."""
    text = plan.world.text
    start = text.find("\n  music_player:")
    if start < 0:
        return
    block = text[start:].split("\n\n", 1)[0]
    queue = re.search(r"^    queue: (\[.*\])\s*$", block, re.MULTILINE)
    position = re.search(r"^    queue_position: (\d+) of \d+", block, re.MULTILINE)
    report = plan.report.table("music_player")
    report.parsed = 1
    if not queue:
        plan.skip("music_player", "no 'queue: [...]' line")
        return
    titles = parse_record(f"queue: {queue.group(1)}")["queue"]
    ids = [title_ids[t] for t in titles if t in title_ids]
    if len(ids) < len(titles):
        report.altered["queue song not listed in songs, left out"] += len(titles) - len(ids)
    cursor = min(int(position.group(1)) - 1, len(ids) - 1) if position and ids else (0 if ids else None)
    plan.add("music_player", "spotify", "MusicPlayer",
             [{"user_id": me, "queue_song_ids": ids, "cursor_position": cursor}])


# --- venmo, simple_note, file_system --------------------------------------------------------------------


def _venmo(plan: _Plan) -> None:
    r = plan.records
    if not any(t in r for t in ("transactions", "payment_requests", "venmo_friends", "social_feed")):
        return
    mine = [t.get("sender_id") if t.get("direction") == "sent" else t.get("receiver_id")
            for t in r.get("transactions", []) + r.get("payment_requests", [])]
    others = [f.get("id") for f in r.get("venmo_friends", [])] + [
        t.get(k) for t in r.get("social_feed", []) for k in ("sender_id", "receiver_id")]
    me = plan.user_ids["venmo"] = _most_common(mine) or max((i for i in others if i), default=0) + 1
    friends = [f for f in r.get("venmo_friends", []) if f.get("id") is not None and f.get("id") != me]
    plan.add("venmo_friends", "venmo", "User",
             [{**_pick(f, "id", "first_name", "last_name", "email", "password", "venmo_balance", "created_at"),
               "verified": True} for f in friends])
    plan.add("venmo_friends", "venmo", "Friendship", [{"user_id": me, "friend_id": f["id"]} for f in friends],
             primary=False)
    known = {me, *(f["id"] for f in friends)}
    stubs: dict[int, str] = {}
    for t in r.get("social_feed", []):
        for side in ("sender", "receiver"):
            person, name = t.get(f"{side}_id"), t.get(f"{side}_name")
            if person not in known and name:
                stubs.setdefault(person, name)
    plan.add("social_feed", "venmo", "User", [_stub_user(i, n) for i, n in sorted(stubs.items())], primary=False)
    if stubs:
        plan.report.table("social_feed").altered["users made from the feed's names (emails made up)"] += len(stubs)
    known |= set(stubs)
    seen: set[int] = set()
    keys = ("id", "sender_id", "receiver_id", "amount", "description", "created_at", "updated_at", "private")
    for table, model, extra in (("transactions", "Transaction", ("like_count", "receipt_download_count")),
                                ("social_feed", "Transaction", ("like_count", "receipt_download_count")),
                                ("payment_requests", "PaymentRequest", ("approved_at", "denied_at"))):
        rows = []
        for t in r.get(table, []):
            if t.get("sender_id") not in known or t.get("receiver_id") not in known:
                plan.skip(table, "sender or receiver not listed (not the user, a friend or in the feed)")
            elif model == "Transaction" and t.get("id") in seen:
                plan.skip(table, "same transaction as a row of transactions")
            else:
                seen.add(t.get("id"))
                row = _pick(t, *keys, *extra)
                if t.get("payment_card_digits") is not None:
                    row["payment_card_digits"] = str(t["payment_card_digits"])
                rows.append(row)
        if table in r:
            plan.add(table, "venmo", model, rows)


def _stub_user(user_id: int, name: str) -> dict[str, Any]:
    first, _, last = name.partition(" ")
    handle = re.sub(r"[^a-z0-9]+", ".", name.lower()).strip(".") or "user"
    return {"id": user_id, "first_name": first, "last_name": last or first, "verified": True,
            "email": f"{handle}.{user_id}@{STUB_EMAIL_DOMAIN}", "password": f"unknown-{user_id}"}


def _simple_note(plan: _Plan) -> None:
    notes = plan.records.get("notes")
    if notes is None:
        return
    me = plan.user_ids["simple_note"] = _most_common([n.get("user_id") for n in notes]) or 1
    rows = []
    for note in notes:
        content = str(note.get("content", ""))
        title = note.get("title") or (content.strip().splitlines()[0].lstrip("# ").strip() if content.strip() else "")
        if not title:
            plan.skip("notes", "no title and no content to take one from")
            continue
        row = _pick(note, "id", "content", "tags", "created_at", "updated_at", "pinned")
        rows.append({**row, "user_id": me, "title": title, "content": content})
    plan.add("notes", "simple_note", "Note", rows)


def _file_system(plan: _Plan, first_name: str) -> None:
    """Directories and files; ``/`` and the home folder always (every AppWorld file_system user has them)."""
    r = plan.records
    if "directories" not in r and "files" not in r and plan.world.account("file_system") is None:
        return
    me = plan.user_ids["file_system"] = _most_common([d.get("user_id") for d in r.get("directories", []) + r.get("files", [])]) or 1
    listed = {d.get("path") for d in r.get("directories", [])}
    home = f"/home/{first_name.lower()}/"
    added = [{"path": p, "user_id": me} for p in ("/", "/home/", home) if p not in listed]
    plan.add("directories", "file_system", "Directory", added, primary=False)
    keys = ("id", "path", "created_at", "updated_at")
    if "directories" in r:
        plan.add("directories", "file_system", "Directory",
                 [{**_pick(d, *keys), "user_id": me} for d in r["directories"]])
    if "files" in r:
        plan.add("files", "file_system", "File",
                 [{**_pick(f, *keys, "compressed_data"), "content": str(f.get("content", "")), "user_id": me}
                  for f in r["files"]])
