"""AppWorld's local responder: the tool responses a row's world decides, worded as the real apps word them.

Answered here (everything else goes to the world model, which sees the world's records):

* a name that is no API -> ``No app named 'x' found.`` / ``No API named 'y' found in the z app.``;
* ``supervisor__show_account_passwords`` -> the world's accounts, ``[{"app", "username", "password"}]``
  (the form of the paper's released demos);
* ``<app>__login`` for an app the world has an account for: the account's username and password -> a
  bearer token; anything else -> ``401 Invalid credentials``; the same 401 for an app whose account the
  supervisor does not list (:data:`~textwm.envs.appworld.world.UNLISTED_APPS`: its password is unknowable);
* a call to a protected API of an app not logged in to in this episode -> AppWorld's 401;
* a call without its required arguments -> AppWorld's 422 with pydantic's reasons;
* ``supervisor__complete_task`` -> ``{"message": "Marked the active task complete."}``.

Where a call goes to the world model, :func:`known_frame` gives the part of its response the call and the API's
schema decide, as a ``response_template`` (fixed text, ``{"fill": N}`` slots for the rest):

* a GET API that cannot fail from here (no required parameter, the app logged in to, only paging and a search
  query passed, each within its stated checks; not one of :data:`MAY_FAIL`): a list response's brackets
  ``["[", slot, "]"]``, an object response's keys in the response model's order ``['{"volume": ', slot, "}"]``;
* a call with an argument its stated checks surely refuse (``page_limit=50`` where ``value <= 20``):
  AppWorld's 422 around a slot for the reasons.

Its fixed text is the real env's observation (:func:`textwm.envs.appworld.real.render`: ``json.dumps``, default
separators, the app's keys in order) byte for byte; ``tests/envs/appworld/test_anchors.py`` checks it against the
real apps.

Tokens: the agent never passes one (the env injects it), so a token's text only has to look like
AppWorld's (a JWT whose subject is ``<app>+<username>``); it is not the real app's signature.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from collections.abc import Collection
from datetime import datetime, timedelta, timezone
from typing import Any

from textwm.envs.appworld import tools
from textwm.envs.appworld.world import UNLISTED_APPS, World

COMPLETE_TASK_RESPONSE = json.dumps({"message": "Marked the active task complete."})
INVALID_CREDENTIALS = tools.http_error(401, "Invalid credentials")
#: Token lifetime in the tokens made here (AppWorld draws 10-30 minutes).
TOKEN_MINUTES = 15
_TOKEN_KEY = b"textwm-appworld-simulated-token"


def unauthorized(app: str) -> str:
    return tools.http_error(401, f"You are either not authorized to access this {app} API endpoint or your access "
                                 "token is missing, invalid or expired.")


def passwords_response(world: World) -> str:
    return json.dumps([{"app": a.app, "username": a.username, "password": a.password} for a in world.accounts])


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def access_token(app: str, username: str, date: str) -> str:
    """A JWT shaped as AppWorld's: ``{"sub": "<app>+<username>", "exp": <date 12:00 + 15 min>}``, HS256."""
    start = datetime.fromisoformat(date or "2023-05-18").replace(hour=12, tzinfo=timezone.utc)
    header = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
    payload = _b64(json.dumps({"sub": f"{app}+{username}", "exp": int((start + timedelta(minutes=TOKEN_MINUTES))
                                                                      .timestamp())}, separators=(",", ":")).encode())
    signature = hmac.new(_TOKEN_KEY, f"{header}.{payload}".encode(), hashlib.sha256).digest()
    return f"{header}.{payload}.{_b64(signature)}"


def login_response(world: World, app: str, arguments: dict[str, Any]) -> str | None:
    """The login's answer, None when the world has no account for ``app`` (the WM answers)."""
    account = world.account(app)
    if account is None:
        return INVALID_CREDENTIALS if app in UNLISTED_APPS else None  # its password is nowhere to be read
    if (arguments.get("username"), arguments.get("password")) != (account.username, account.password):
        return INVALID_CREDENTIALS
    return json.dumps({"access_token": access_token(app, account.username, world.date), "token_type": "Bearer"})


def respond(world: World, logged_in: Collection[str], name: str, arguments: dict[str, Any]) -> str | None:
    """The response the world decides for one call, or None (ask the world model)."""
    unknown = tools.unknown_tool_error(name)
    if unknown is not None:
        return unknown
    tool = tools.catalog()[name]
    if name == "supervisor__show_account_passwords":
        return passwords_response(world)
    if tool.requires_access_token and tool.app not in logged_in:
        return unauthorized(tool.app)
    missing = tools.missing_arguments_error(tool, arguments)
    if missing is not None:
        return missing
    if tool.api == "login":
        return login_response(world, tool.app, arguments)
    if name == "supervisor__complete_task":
        return COMPLETE_TASK_RESPONSE
    return None


def track_login(logged_in: list[str], name: str, response: str) -> None:
    """Update the apps logged in to (``logged_in``, in place) after the call ``name`` got ``response``."""
    app, api = tools.split_name(name)
    change = logged_in_after(app, api, response)
    if change is True and app not in logged_in:
        logged_in.append(app)
    elif change is False and app in logged_in:
        logged_in.remove(app)


def logged_in_after(app: str, api: str, response: str) -> bool | None:
    """What a response does to an app's login: True (logged in), False (logged out), None (no change)."""
    if api not in ("login", "logout"):
        return None
    try:
        value = json.loads(response)
    except json.JSONDecodeError:
        return None
    ok = isinstance(value, dict) and "error" not in value
    if api == "login":
        return True if ok and "access_token" in value else None
    return False if ok else None


#: GET APIs without a required parameter that can still fail with no filter passed, read from the apps' code
#: (appworld 0.1.3.post1): no active task or supervisor, the directory ``/`` missing, an empty song queue. Every
#: app's ``show_profile`` fails too without its ``email`` (a 422), and is never framed either.
MAY_FAIL = frozenset({"supervisor__show_active_task", "supervisor__show_profile", "file_system__show_directory",
                      "spotify__show_current_song", "spotify__show_song_queue"})
#: The only arguments a framed success may carry: paging and a search text fail no listing once they pass their
#: stated checks (the others name records, dates or sort keys, which an app may refuse).
PLAIN_ARGUMENTS = frozenset({"page_index", "page_limit", "query"})
#: Slot sizes: a value of an object response, by its schema example's JSON type; a list's record, per character
#: of its schema example; a list of an API without paging (records); any list's cap; a 422's reasons.
VALUE_TOKENS = {"str": 32, "int": 8, "float": 8, "bool": 2, "NoneType": 4, "list": 128, "dict": 128}
CHARS_PER_TOKEN = 2
UNPAGED_RECORDS = 10
LIST_TOKENS = 2048
REASON_TOKENS = 48
_SLOT = "<slot>"
_PATH_WORD = re.compile(r"[A-Za-z0-9_.@+-]+")


def known_frame(world: World, logged_in: Collection[str], name: str, arguments: dict[str, Any]) -> list | None:
    """The part of the response to one call the call and the API's schema decide, as a ``response_template``;
    None where :func:`respond` answers whole or nothing is known byte for byte (see the module docstring)."""
    if respond(world, logged_in, name, arguments) is not None:
        return None
    tool = tools.catalog()[name]
    if tool.api in ("login", "logout") or not set(arguments) <= {p.name for p in tool.params}:
        return None
    if any(p.accepts(arguments[p.name]) is False for p in tool.params if p.name in arguments):
        return validation_frame(tool, arguments)
    return success_frame(tool, arguments)


def validation_frame(tool: tools.Tool, arguments: dict[str, Any]) -> list | None:
    """AppWorld's 422 (``Validation error. Reason: \\n...``) around a slot for the reasons; None where a path
    argument could change the route (a path is built from the values as they are written)."""
    for p in tool.params:
        if "{" + p.name + "}" in tool.path and p.name in arguments and not _plain_path_value(arguments[p.name]):
            return None
    head, tail = tools.http_error(422, "Validation error. Reason: \n" + _SLOT).split(_SLOT)
    return [head, {"fill": REASON_TOKENS}, tail]


def _plain_path_value(value: Any) -> bool:
    """A path argument that stays one path segment as it is written (an int, or a word without ``/``, ``?``, ...)."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, str) and _PATH_WORD.fullmatch(value) is not None)


def success_frame(tool: tools.Tool, arguments: dict[str, Any]) -> list | None:
    """The success response's fixed JSON of a GET that cannot fail (see :data:`MAY_FAIL`, :data:`PLAIN_ARGUMENTS`);
    None for any other call."""
    if tool.method != "GET" or tool.name in MAY_FAIL or tool.api == "show_profile" or any(
            p.required for p in tool.params):
        return None
    for key, value in arguments.items():
        if key not in PLAIN_ARGUMENTS or tool.param(key).accepts(value) is not True:
            return None
    schema = tool.returns
    if isinstance(schema, list) and schema:
        limit = tool.param("page_limit")
        records = arguments.get("page_limit", limit.default) if limit is not None else UNPAGED_RECORDS
        per_record = max(1, len(json.dumps(schema[0])) // CHARS_PER_TOKEN)
        return ["[", {"fill": min(LIST_TOKENS, per_record * max(1, int(records or 1)))}, "]"]
    if isinstance(schema, dict) and schema:
        parts: list = []
        for i, (key, example) in enumerate(schema.items()):
            parts += [("{" if i == 0 else ", ") + json.dumps(key) + ": ",
                      {"fill": VALUE_TOKENS.get(type(example).__name__, VALUE_TOKENS["str"])}]
        return [*parts, "}"]
    return None


def observed_frame(observation: str) -> list[tuple[bool, str]] | None:
    """:func:`known_frame`'s frame read off a response of one of its shapes: a list's brackets around its records,
    an object's keys around its values, or the 422 around its reasons, as ``(is_slot, text)`` parts; None for
    any other response (and for one whose parts would not give back its text byte for byte)."""
    head, tail = tools.http_error(422, "Validation error. Reason: \n" + _SLOT).split(_SLOT)
    if observation.startswith(head) and observation.endswith(tail) and len(observation) > len(head) + len(tail):
        return [(False, head), (True, observation[len(head):-len(tail)]), (False, tail)]
    try:
        value = json.loads(observation)
    except ValueError:
        return None
    if isinstance(value, list) and observation.startswith("[") and observation.endswith("]"):
        parts = [(False, "["), (True, observation[1:-1]), (False, "]")]
    elif isinstance(value, dict) and value and "error" not in value:
        parts = []
        for i, (key, item) in enumerate(value.items()):
            parts += [(False, ("{" if i == 0 else ", ") + json.dumps(key) + ": "), (True, json.dumps(item))]
        parts.append((False, "}"))
    else:
        return None
    return parts if "".join(text for _, text in parts) == observation else None
