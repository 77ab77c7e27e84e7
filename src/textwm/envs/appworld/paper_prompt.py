"""The paper's AppWorld world-model query, byte for byte (``wm_prompt: paper``), and its record responder.

The paper's plugin writes one prompt per tool call from the row's ``wm_system_prompt`` alone (the agent's
conversation travels only in the user message): ENVIRONMENT STATE (task, date, credentials, the call with its
arguments and whether it validates), TASK CONTEXT, TOOL SCHEMAS (the call's signature, the return shape of
list/search tools), DOMAIN RULES, COMPUTED QUERY STATE (for tools that read a record section: the records that
match the call's filters, paged, as strict JSON) and STEERING DIRECTIVES. The user message is the proxy's
``State: <the conversation as JSON>\\n\\nAction: <[the call as an OpenAI tool-call message] as JSON>``.

The records are read as the paper reads them, quirks included, since a world model trained on the paper's rows
saw what they produce: a section runs to the next ``  name (`` header, so the last one also takes the text after
the records; nothing is sorted; the matched count is of the listed records, not the header's total; some
filters never match (``artist_id`` of a song search, ``entry_type="files"``) and some are not applied.
:func:`paper_response` is the paper's local responder over the same records (list / search / show answered from
them, a canned success for writes); it answers from the records as the row lists them at the start, so it is
only right until the episode's first write, and it is switched on by ``$APPWORLD_PAPER_RESPONDER=1``.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import re
from collections.abc import Collection, Mapping, Sequence
from importlib.resources import files
from typing import Any

from textwm._optional import require

#: Tool -> the ``Database records`` section it reads.
SECTION_BY_TOOL = {
    "spotify__show_song_library": "songs", "spotify__show_liked_songs": "songs", "spotify__search_songs": "songs",
    "spotify__show_album_library": "albums", "spotify__show_album": "albums",
    "spotify__show_playlist_library": "playlists", "spotify__show_playlist": "playlists",
    "spotify__show_recommendations": "songs", "spotify__show_following_artists": "following_artists",
    "spotify__show_artist": "artists", "venmo__show_transactions": "transactions",
    "venmo__show_received_payment_requests": "payment_requests",
    "venmo__show_sent_payment_requests": "payment_requests", "venmo__show_social_feed": "transactions",
    "venmo__search_friends": "venmo_friends", "file_system__show_directory": "directories",
    "file_system__show_file": "files", "simple_note__search_notes": "notes", "simple_note__show_note": "notes",
}
#: Section -> the key of the record list in a list/search response.
RETURN_KEY_BY_SECTION = {
    "songs": "songs", "albums": "albums", "playlists": "playlists", "artists": "artists",
    "following_artists": "artists", "transactions": "transactions", "payment_requests": "payment_requests",
    "venmo_friends": "friends", "directories": "entries", "files": "files", "notes": "notes",
}
#: Show tools (one record) -> (the argument naming it, the record field it must equal).
SHOW_TOOLS = {
    "spotify__show_album": ("album_id", "id"), "spotify__show_playlist": ("playlist_id", "id"),
    "spotify__show_artist": ("artist_id", "id"), "simple_note__show_note": ("note_id", "id"),
    "file_system__show_file": ("file_path", "tilde_path"),
}
#: Calls that change the world; the paper answers them with :data:`CANNED_SUCCESS` and changes nothing.
WRITE_PREFIXES = (
    "spotify__like_", "spotify__unlike_", "spotify__review_", "spotify__create_", "spotify__add_",
    "spotify__remove_", "spotify__follow_", "spotify__download_", "venmo__create_", "venmo__approve_",
    "venmo__like_", "venmo__remind_", "venmo__deny_", "phone__send_", "phone__delete_", "file_system__create_",
    "file_system__move_", "file_system__delete_", "file_system__compress_", "simple_note__update_",
    "simple_note__create_", "simple_note__delete_",
)
CANNED_SUCCESS = {"status": "success", "message": "Action completed"}
CANNED_LOGIN = {"access_token": "tok_valid", "token_type": "Bearer"}
NOT_LOGGED_IN = "401 Unauthorized. Please login first."
PAGE_LIMIT_CAP = 20
DEFAULT_PAGE_LIMIT = 5

_CREDENTIAL = re.compile(r"- ([\w_]+): username=([^,]+), password=(\S+)")
_RECORD_KEY = re.compile(r"(?:(?<=, )|^)([a-zA-Z_]+): ")


@functools.lru_cache(maxsize=1)
def paper_tools() -> dict[str, str]:
    """The paper's 62 tools: name -> its signature as the prompt writes it, ``name(param, ...)``
    (``paper_tools.txt``: the parameter names and order of the paper's tool table)."""
    lines = files("textwm.envs.appworld").joinpath("paper_tools.txt").read_text().splitlines()
    return {line.split("(", 1)[0]: line for line in lines if line.strip()}


# --- the records, read as the paper reads them ------------------------------------------------------------

def _int_or(value: Any, default: int = 0) -> int:
    try:
        return int(value)
    except (ValueError, TypeError):
        return default


def _norm(value: Any) -> str:
    return str(value).strip().strip('"').strip("'").lower()


def _section_records(prompt: str, section: str) -> list[str]:
    """The raw record texts of ``section`` (``    - `` starts one; other lines continue it), in prompt order."""
    match = re.search(rf"^  {re.escape(section)} .*?(?=^  [a-zA-Z_]+ \(|\Z)", prompt, re.DOTALL | re.MULTILINE)
    records: list[list[str]] = []
    for line in (match.group(0).rstrip() if match else "").splitlines()[1:]:
        if line.startswith("    - "):
            records.append([line])
        elif records:
            records[-1].append(line)
    return ["\n".join(lines) for lines in records]


def _field(record: str, name: str) -> str | None:
    match = re.search(rf"\b{re.escape(name)}: (.*?)(?=, [a-zA-Z_]+:|$|\n)", record, re.DOTALL)
    return match.group(1).strip() if match else None


def _field_int(record: str, name: str) -> int | None:
    value = _field(record, name)
    number = re.search(r"-?\d+", value) if value is not None else None
    return int(number.group(0)) if number else None


def _scalar(value: str) -> Any:
    value = value.strip().rstrip(",")
    if value in ("True", "False"):
        return value == "True"
    if value in ("None", "null"):
        return None
    if re.fullmatch(r"-?\d+", value):
        return int(value)
    if re.fullmatch(r"-?\d+\.\d+", value):
        return float(value)
    if (value[:1], value[-1:]) in (("[", "]"), ("{", "}")):
        try:
            return ast.literal_eval(value)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):   # kept as text, as the paper does
            return value
    return value


def record_object(record: str) -> dict[str, Any]:
    """One record text as a dict: keys start the text or follow ``, ``; a value runs to the next key."""
    text = record.strip()
    text = text[2:] if text.startswith("- ") else text
    keys = list(_RECORD_KEY.finditer(text))
    return {m.group(1): _scalar(text[m.end():keys[i + 1].start() - 2 if i + 1 < len(keys) else len(text)])
            for i, m in enumerate(keys)}


def page_args(args: Mapping[str, Any]) -> tuple[int, int]:
    """(page_index >= 0, page_limit in [1, 20]) of a call; 0 and 5 when absent or not numbers."""
    return (max(0, _int_or(args.get("page_index", 0))),
            min(PAGE_LIMIT_CAP, max(1, _int_or(args.get("page_limit", DEFAULT_PAGE_LIMIT), DEFAULT_PAGE_LIMIT))))


def _in_range(args: Mapping[str, Any], bounds: Sequence[tuple[str, str]], value_of: Any, limit_of: Any) -> bool:
    """Every ``min_x`` / ``max_x`` argument present (even as None) holds for ``value_of(field)`` (None: the record
    has no such field, and fails)."""
    for arg, name in bounds:
        if arg not in args:
            continue
        value = value_of(name)
        if value is None:
            return False
        limit = limit_of(args[arg])
        if (arg.startswith("min_") and value < limit) or (arg.startswith("max_") and value > limit):
            return False
    return True


def _amount(record: str, name: str) -> float | None:
    value = _field(record, name)
    return None if value is None else float(re.search(r"-?\d+(?:\.\d+)?", value).group(0))


def _matches(tool: str, args: Mapping[str, Any], record: str) -> bool:
    """Whether a record passes the call's filters, as the paper applies them."""
    text = _norm(record)
    if tool == "spotify__show_liked_songs" and "liked: True" not in record:
        return False
    if tool == "spotify__search_songs":
        if args.get("genre") and _norm(_field(record, "genre")) != _norm(args["genre"]):
            return False
        for arg in ("album_id", "artist_id"):     # songs list no artist_id: such a search matches nothing
            if args.get(arg) is not None and _field_int(record, arg) != _int_or(args[arg]):
                return False
        if args.get("query") and _norm(args["query"]) not in text:
            return False
        if not _in_range(args, (("min_play_count", "play_count"), ("max_play_count", "play_count"),
                                ("min_like_count", "like_count"), ("max_like_count", "like_count")),
                         lambda name: _field_int(record, name), _int_or):
            return False
        released = _field(record, "release_date")
        if released and ((args.get("min_release_date") and released < str(args["min_release_date"]))
                         or (args.get("max_release_date") and released > str(args["max_release_date"]))):
            return False
    if tool == "venmo__show_transactions":
        if args.get("direction") and _norm(_field(record, "direction")) != _norm(args["direction"]):
            return False
        if args.get("query") and _norm(args["query"]) not in text:
            return False
        try:
            if not (_in_range(args, (("min_amount", "amount"), ("max_amount", "amount"),
                                     ("min_like_count", "like_count")), lambda name: _amount(record, name), float)
                    and _in_range(args, (("min_created_at", "created_at"), ("max_created_at", "created_at")),
                                  lambda name: _field(record, name), str)):
                return False
        except (ValueError, TypeError, AttributeError):    # a bound or an amount that is no number (the paper raises)
            return False
    if tool in ("venmo__show_received_payment_requests", "venmo__show_sent_payment_requests"):
        if _norm(_field(record, "direction")) != ("received" if "received" in tool else "sent"):
            return False
        status = _norm(args["status"]) if args.get("status") else None
        if ((status == "pending" and ("approved_at:" in record or "denied_at:" in record))
                or (status == "approved" and "approved_at:" not in record)
                or (status == "denied" and "denied_at:" not in record)):
            return False
    if tool == "file_system__show_directory":
        path = args.get("directory_path") or args.get("path")
        if (path and _norm(path) not in text) or (args.get("substring") and _norm(args["substring"]) not in text):
            return False
        entry_type = _norm(args.get("entry_type", ""))
        if entry_type == "files" or (entry_type == "directories" and "tilde_path:" not in record):
            return False
    if tool == "simple_note__search_notes" and args.get("query"):
        note = record_object(record)
        if _norm(args["query"]) not in _norm(" ".join(str(note.get(k, "")) for k in ("title", "content", "tags"))):
            return False
    return True


def record_context(prompt: str, tool: str, args: Mapping[str, Any]) -> tuple[int, list[str]]:
    """(records matched, the records of the call's page) of a tool that reads a section (show tools: the named
    record, at most 5, no paging)."""
    records = _section_records(prompt, SECTION_BY_TOOL[tool])
    if tool in SHOW_TOOLS:
        arg, name = SHOW_TOOLS[tool]
        wanted = args.get(arg)
        if wanted is None:
            return 0, []
        if name == "tilde_path":
            matched = [r for r in records if _norm(wanted) == _norm(_field(r, name))]
        else:
            matched = [r for r in records if _int_or(wanted, None) is not None and _field_int(r, name) == int(wanted)]
        return len(matched), matched[:5]
    matched = [r for r in records if _matches(tool, args, r)]
    index, limit = page_args(args)
    return len(matched), matched[index * limit:index * limit + limit]


def validation_error(prompt: str, tool: str, args: Mapping[str, Any]) -> str | None:
    """The paper's reason a call is invalid (unknown tool, a schema as a value, wrong credentials, no such
    record), or None."""
    if tool not in paper_tools():
        return f"Unknown tool: {tool}"
    if any((isinstance(v, dict) and "type" in v) or (isinstance(v, str) and ("{'type'" in v or '{"type"' in v))
           for v in args.values()):
        return "Invalid argument values: schema/type dictionaries are not runtime values"
    if tool.endswith("__login"):
        credentials = {m.group(1): (m.group(2), m.group(3)) for m in _CREDENTIAL.finditer(prompt)}
        app = tool.split("__", 1)[0]
        if app in credentials and (args.get("username"), args.get("password")) != credentials[app]:
            return "Invalid username or password"
    if tool in SHOW_TOOLS and not record_context(prompt, tool, args)[1]:
        return "Record not found"
    return None


# --- the query ----------------------------------------------------------------------------------------------

def wm_arguments(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """A call's arguments as the paper's plugin sends them: no ``access_token``; ``page_limit`` at most 20
    (5 when it is not a number)."""
    args = {k: v for k, v in arguments.items() if k != "access_token"}
    if "page_limit" in args:
        limit = _int_or(args["page_limit"], None)
        args["page_limit"] = DEFAULT_PAGE_LIMIT if limit is None else min(limit, PAGE_LIMIT_CAP)
    return args


def system_prompt(world_text: str, tool: str, args: Mapping[str, Any]) -> str:
    """The paper's WM system prompt for one call (``world_text``: the row's ``wm_system_prompt``; ``args``:
    :func:`wm_arguments` of the call)."""
    error = validation_error(world_text, tool, args)
    section = SECTION_BY_TOOL.get(tool)
    matched, page = record_context(world_text, tool, args) if section and error is None else (0, [])
    credentials = "\n".join(m.group(0) for m in _CREDENTIAL.finditer(world_text))
    task = re.search(r"Active task: (.*?)(?:\n|$)", world_text)
    date = re.search(r"Current date: (.*?)(?:\n|$)", world_text)
    key = RETURN_KEY_BY_SECTION.get(section or "", "data")
    index, limit = page_args(args)
    status = "invalid" if error else "valid"
    parts = ["## ENVIRONMENT STATE", "The environment is AppWorld tool-response prediction.", ""]
    for title, value in (("Active task:", task and f"- {task.group(1)}"), ("Current date:", date and f"- {date.group(1)}"),
                         ("Account credentials:", credentials)):
        if value:
            parts += [title, value, ""]
    parts += ["Active tool call:", f"- tool_name: {tool}",
              f"- arguments: {json.dumps(args, ensure_ascii=False, sort_keys=True)}",
              f"- validation_status: {status}", f"- validation_error: {error or 'null'}", "",
              "## TASK CONTEXT",
              "Predict only the JSON tool response for this one AppWorld action. Do not solve the whole user task. "
              "Do not echo the action.", "",
              "## TOOL SCHEMAS", f"- {paper_tools().get(tool, f'{tool}(unknown)')}"]
    if section:
        parts += [f'- Return shape for list/search tools: {{"total": int, "{key}": array}}',
                  f"- Relevant source section: {section}"]
    parts += ["- For invalid calls, return exactly one JSON object with an error key.", "",
              "## DOMAIN RULES",
              "- Validate the tool name and argument value types before generating a response.",
              "- If validation_status is valid, the active tool is available and the arguments passed validation.",
              "- Unknown tools, bad credentials, schema/type placeholder arguments, and missing target records return "
              "an error JSON object." if error else
              "- This is not an unknown-tool case. Do not return an error for tool availability.",
              "- Returned records and IDs must come only from the record lines shown below.",
              "- Return strict valid JSON only. Use JSON true/false/null, not Python True/False/None.",
              "- No markdown, no commentary, no tracebacks, and do not double-quote or escape the whole JSON object.",
              "- Do not include <think> text. Wrap the final JSON in <tool_response> only if the model requires tags."]
    if section and error is None:
        objects = [record_object(r) for r in page]
        parts += ["", "## COMPUTED QUERY STATE", f"- matched_count_after_filters: {matched}",
                  f"- page_index: {index}", f"- page_limit: {limit}", f"- page_offset: {index * limit}",
                  f"- records_on_this_page: {len(page)}",
                  "- The response total field must equal matched_count_after_filters.",
                  "- The response array must contain only the records_on_this_page listed below.", "",
                  "Strict JSON records for this response page:",
                  json.dumps(objects, ensure_ascii=False, indent=2) if objects else "[]"]
    parts += ["", "## STEERING DIRECTIVES", f"- Expected validation status: {status}.",
              f'- The exact error response body is: {{"error": {json.dumps(error)}}}.' if error else
              "- The tool call is valid; do not return an error.",
              "- For list/search tools, apply filters before pagination; never repeat page 0 for later pages.",
              "- For login success, return a short access token only when credentials match Account credentials.",
              f'- If this is a list/search success, return {{"total": {matched}, "{key}": [...]}} using only Strict '
              "JSON records for this response page.", "",
              "PREDICTION TARGET: The strict JSON tool response for the action in the user turn."]
    return "\n".join(parts)


def action_message(tool: str, args: Mapping[str, Any], turn: int, call_id: str | None = None) -> dict[str, Any]:
    """The call as the OpenAI tool-call message the paper's plugin sends as the action. The paper draws the call
    id at random; here it is derived from the call and its turn (or given), so that a query is reproducible."""
    arguments = json.dumps(dict(args))
    if call_id is None:
        call_id = f"call_{hashlib.sha1(f'{turn}:{tool}:{arguments}'.encode()).hexdigest()[:8]}"
    return {"role": "assistant", "content": "",
            "tool_calls": [{"id": call_id, "type": "function", "function": {"name": tool, "arguments": arguments}}]}


def user_state(messages: Sequence[Mapping[str, Any]]) -> str:
    """The state half of the user message: the agent's conversation, as the paper's proxy writes it."""
    return json.dumps(list(messages))


def user_action(tool: str, args: Mapping[str, Any], turn: int, call_id: str | None = None) -> str:
    return json.dumps([action_message(tool, args, turn, call_id)])


def conversation(start_messages: Sequence[Mapping[str, Any]], history: Sequence[tuple[str, str]],
                 action: str) -> list[dict[str, Any]]:
    """The agent's conversation at a call: its start messages, each earlier call and its tool response, the call."""
    messages = [dict(m) for m in start_messages]
    for call, response in history:
        messages += [{"role": "assistant", "content": call},
                     {"role": "user", "content": f"<tool_response>\n{response}\n</tool_response>"}]
    return [*messages, {"role": "assistant", "content": action}]


# --- the paper's record responder ---------------------------------------------------------------------------

def paper_response(world_text: str, tool: str, args: Mapping[str, Any], logged_in: Collection[str]) -> str | None:
    """The paper's local answer to a call (``args``: :func:`wm_arguments`), or None for the world model: an invalid
    call's error body; a call to an app not logged in to (supervisor calls, logins and song searches exempt);
    a section's records, filtered and paged (show tools: the record itself); a login; a canned write success."""
    error = validation_error(world_text, tool, args)
    if error:
        return json.dumps({"error": error}, ensure_ascii=False)
    app, _, api = tool.partition("__")
    if app != "supervisor" and api != "login" and tool != "spotify__search_songs" and app not in logged_in:
        return json.dumps({"error": NOT_LOGGED_IN}, ensure_ascii=False)
    section = SECTION_BY_TOOL.get(tool)
    if section:
        matched, page = record_context(world_text, tool, args)
        objects = [record_object(r) for r in page]
        if tool in SHOW_TOOLS:
            return json.dumps(objects[0] if objects else {"error": "Record not found"}, ensure_ascii=False)
        return json.dumps({"total": matched, RETURN_KEY_BY_SECTION[section]: objects}, ensure_ascii=False)
    if api == "login":
        return json.dumps(CANNED_LOGIN, ensure_ascii=False)
    if tool.startswith(WRITE_PREFIXES):
        return json.dumps(CANNED_SUCCESS, ensure_ascii=False)
    return None


def repair_wm_answer(text: str) -> str:
    """A world-model answer as the paper's plugin passes it on: think blocks and ``<tool_response>`` tags dropped;
    JSON that does not load repaired by ``json_repair`` and written back (text that is no JSON at all comes out as
    ``""``, as there); a non-empty list becomes its first element; an object with a ``content`` key becomes that
    content's text. JSON that loads is kept as written."""

    text = re.sub(r"</?tool_response>", "", re.sub(r"<think>.*?</think>", "", text.strip(), flags=re.DOTALL).strip())
    text = text.strip()
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        repair = require("json_repair", extra="rl", package="json-repair")
        try:
            value = repair.loads(text)
        except (ValueError, TypeError, RecursionError):     # the paper passes on what it cannot repair as it is
            return text
        text = json.dumps(value)
    if isinstance(value, list) and value:
        value = value[0]
    if isinstance(value, dict) and "content" in value:
        return str(value["content"])
    return text

