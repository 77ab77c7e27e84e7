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

Tokens: the agent never passes one (the env injects it), so a token's text only has to look like
AppWorld's (a JWT whose subject is ``<app>+<username>``); it is not the real app's signature.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
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
