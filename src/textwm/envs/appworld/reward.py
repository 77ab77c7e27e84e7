"""AppWorld's termination, score and GRPO reward, from the trajectory alone (after the paper's ``AppWorldReward``).

A trajectory is the agent's calls (canonical ``[{"name", "parameters"}]`` JSON, None for an unparseable
reply) and the responses (JSON text; an ``{"error": ...}`` object is a failed call). Nothing here asks
an app: the same rules hold for real, local and world-model responses.

* **Termination**: ``supervisor__complete_task`` ends the episode (``success`` when its answer is right,
  else ``completed``); the same call twice in a row ends it (``repeat``).
* **Question tasks** (a ``ground_truth``): the answer holds the ground truth as whole words (case and
  whitespace folded; a number: the answer's first number equals it) -> 1.0. A wrong first number ->
  ``0.25 * (1 - min(|diff| / max(gt, 1), 1))``, at least the partial credit; otherwise partial credit: 0.15
  when a call returned records, 0.08 when one succeeded, 0.03 when any was made. A ``complete_task`` the
  app refused completes nothing.
* **Action tasks** (no ground truth): ``0.6 * (successful calls / calls)`` + 0.1 when records came back;
  + 0.2 when a login used the account's real credentials; completion + 0.3 after a successful
  state-changing call (any non-GET API but login / logout), + 0.1 after any success, + 0.05 otherwise; not
  completed x0.5.
  Their success needs AppWorld's own state check, which the trajectory cannot give, so their score (the
  reward) is capped at :data:`ACTION_SCORE_CAP`, below the success mark.
* **Penalties** (both kinds, multiplied): no ``supervisor__show_account_passwords`` call x0.1;
  placeholders passed as values (``your_username``, ``<song_id>``, ...) x0.2; JSON-schema fragments
  passed as values (``{"type": "string"}``) x0.3; unknown tool names x ``max(0.1, 1 - share)``; more
  than half of the calls repeating an earlier identical call x0.5 (action tasks).

Differences from the paper, deliberate: state-changing calls come from the APIs' HTTP methods (the paper
keeps a hand-written list that misses ``show_following_artists`` and others); the paper's keyword rule
(x0.3 when the instruction says "unfollow" and any tool name contains "follow") is dropped, since it
also fires on correct calls; the reply-format multiplier is not applied (the episode sees parsed calls).

:func:`paper_reward` is the paper's rule instead (``reward: paper``): its order of terms (the credential
penalties before the completion bonus), its keyword rule, its format factor on the last reply of a completed
episode, x0.3 for giving up in prose and x0.5 for over 50 characters of prose before the last call, and x0.7
(not x0.5) for an unfinished episode still at work (a state-changing call among 8 or more). The notions it
reads a trajectory with (a failed call, records, placeholders, a real login, a state-changing call) are this
module's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from textwm.envs.appworld import tools
from textwm.envs.appworld.agent import action_call
from textwm.envs.appworld.world import World
from textwm.envs.contract import Outcome

COMPLETE_TASK = "supervisor__complete_task"
SHOW_PASSWORDS = "supervisor__show_account_passwords"
SUCCESS_SCORE = 1.0
ACTION_SCORE_CAP = 0.9
UNPARSEABLE_LIMIT = 2

_PLACEHOLDER = re.compile(
    r"^<[^<>]+>$|^\{\{?[^{}]+\}\}?$|\byour[_ ](?:user ?name|password|email|token|access_token|venmo|spotify)\b|"
    r"^(?:your|my|user)_[a-z_]+$|\bplaceholder\b|^xxx+$",
    re.IGNORECASE)


@dataclass(frozen=True)
class Call:
    name: str
    arguments: dict[str, Any]
    response: Any
    #: The response text did not parse as JSON.
    malformed: bool

    @property
    def failed(self) -> bool:
        return self.malformed or (isinstance(self.response, dict) and "error" in self.response)

    @property
    def returned_records(self) -> bool:
        """A success that carries data: a non-empty list, or an object with ids / a non-empty list."""
        if self.failed:
            return False
        r = self.response
        if isinstance(r, list):
            return bool(r)
        return isinstance(r, dict) and any(
            (isinstance(v, list) and v) or k == "id" or k.endswith("_id") for k, v in r.items())

    @property
    def signature(self) -> str:
        return json.dumps([self.name, self.arguments], sort_keys=True, ensure_ascii=False)


def read_call(action: str, observation: str | None) -> Call:
    """One step of the trajectory (``action`` in the canonical form)."""
    name, arguments = action_call(action)
    try:
        response, malformed = json.loads(observation or ""), False
    except json.JSONDecodeError:
        response, malformed = observation, True
    return Call(name, arguments, response, malformed)


def _fold(text: Any) -> str:
    return " ".join(str(text).lower().split())


def first_number(answer: str) -> float | None:
    """The first number in an answer (``"There are 24 songs."`` -> 24.0), None if it has none."""
    m = re.search(r"-?\d+(?:\.\d+)?", answer.replace(",", ""))
    return float(m.group(0)) if m else None


def is_number(text: str) -> bool:
    return re.fullmatch(r"-?\d+(?:\.\d+)?", text.strip().replace(",", "")) is not None


def answer_matches(answer: str, ground_truth: str) -> bool:
    """A number is right when the answer's first number equals it (so listing many numbers does not pay); a text
    when the answer holds it as whole words (case and space folded)."""
    gt = ground_truth.strip()
    if not gt:
        return False
    if is_number(gt):
        return first_number(answer) == float(gt.replace(",", ""))
    return re.search(rf"(?<!\w){re.escape(_fold(gt))}(?!\w)", _fold(answer)) is not None


def _bad_values(args: Any, test: Callable[[Any], bool]) -> bool:
    if isinstance(args, dict):
        if test(args):
            return True
        return any(_bad_values(v, test) for v in args.values())
    if isinstance(args, list):
        return any(_bad_values(v, test) for v in args)
    return test(args)


def _is_placeholder(v: Any) -> bool:
    return isinstance(v, str) and bool(_PLACEHOLDER.search(v.strip()))


def _is_schema(v: Any) -> bool:
    if isinstance(v, dict):
        return "type" in v and isinstance(v["type"], str)
    return isinstance(v, str) and bool(re.search(r"""\{\s*['"]type['"]\s*:""", v))


@dataclass(frozen=True)
class Rules:
    """What the reward needs to know beyond the trajectory: the task and the tools."""

    ground_truth: str
    #: Account passwords per app (a login with them is "real credential use").
    credentials: dict[str, tuple[str, str]]
    #: Is this a known tool?
    known: Callable[[str], bool]
    #: Does this tool change state (its API is not a GET)?
    changes_state: Callable[[str], bool]


def rules_of(world: World) -> Rules:
    """The rules of a row's world: its answer and accounts (:func:`rules_for`)."""
    return rules_for(world.ground_truth, {a.app: (a.username, a.password) for a in world.accounts})


def rules_for(ground_truth: str, credentials: dict[str, tuple[str, str]]) -> Rules:
    """The rules of a task with this answer and these accounts; the tools and which of them change state (any API
    that is not a GET, logins and logouts aside) from the apps' specs."""
    known = tools.catalog()
    return Rules(ground_truth=ground_truth, credentials=credentials, known=lambda name: name in known,
                 changes_state=lambda name: name in known and known[name].changes_state
                 and known[name].api not in ("login", "logout"))


def episode_outcome(rules: Rules, actions: Sequence[str | None], observations: Sequence[str | None]) -> Outcome:
    """Termination, score and reward of a trajectory (see the module docstring)."""
    calls = [read_call(a, o) for a, o in zip(actions, observations) if a is not None]
    reason = None
    # A complete_task the app refused (a 422, an error from the world model) completes nothing.
    completed = next((c for c in calls if c.name == COMPLETE_TASK and not c.failed), None)
    if completed is not None:
        answer = str(completed.arguments.get("answer", ""))
        reason = "success" if answer_matches(answer, rules.ground_truth) else "completed"
    elif len(calls) >= 2 and calls[-1].signature == calls[-2].signature:
        reason = "repeat"
    working = [c for c in calls if c is not completed]
    if rules.ground_truth.strip():
        score = _question_score(rules.ground_truth, completed, working)
        reward = score * _penalty(rules, calls)
    else:
        reward = _action_reward(rules, completed, working, calls)
        score = min(reward, ACTION_SCORE_CAP)
    return Outcome(reason is not None, reason, score, reward=min(reward, 1.0))


def _partial(working: Sequence[Call]) -> float:
    if any(c.returned_records for c in working):
        return 0.15
    if any(not c.failed for c in working):
        return 0.08
    return 0.03 if working else 0.0


def _question_score(ground_truth: str, completed: Call | None, working: Sequence[Call]) -> float:
    partial = _partial(working)
    if completed is None:
        return partial
    answer = str(completed.arguments.get("answer", ""))
    if answer_matches(answer, ground_truth):
        return SUCCESS_SCORE
    gt, given = ground_truth.strip(), first_number(answer)
    if is_number(gt) and given is not None:
        target = float(gt.replace(",", ""))
        return max(0.25 * (1 - min(abs(given - target) / max(abs(target), 1), 1.0)), partial)
    return partial


def _penalty(rules: Rules, calls: Sequence[Call]) -> float:
    factor = 1.0
    if calls and not any(c.name == SHOW_PASSWORDS for c in calls):
        factor *= 0.1
    if any(_bad_values(c.arguments, _is_placeholder) for c in calls):
        factor *= 0.2
    if any(_bad_values(c.arguments, _is_schema) for c in calls):
        factor *= 0.3
    if calls:
        unknown = sum(not rules.known(c.name) for c in calls)
        factor *= max(0.1, 1 - unknown / len(calls))
    return factor


def _action_reward(rules: Rules, completed: Call | None, working: Sequence[Call], calls: Sequence[Call]) -> float:
    if not calls:
        return 0.0
    successes = [c for c in working if not c.failed]
    reward = _calls_credit(working, calls)
    if any(c.name.endswith("__login") and not c.failed and _real_login(rules, c) for c in working):
        reward += 0.2
    if completed is not None:
        if any(rules.changes_state(c.name) for c in successes):
            reward += 0.3
        else:
            reward += 0.1 if successes else 0.05
    else:
        reward *= 0.5
    return max(0.0, reward * _penalty(rules, calls))


def _calls_credit(working: Sequence[Call], calls: Sequence[Call]) -> float:
    """An action task's credit for its calls: 0.6 x the share that succeeded (0.05 with none but the completion),
    + 0.1 when records came back; x0.5 when more than half of over two calls repeat an earlier one."""
    credit = 0.6 * sum(not c.failed for c in working) / len(working) if working else 0.05
    if any(c.returned_records for c in working):
        credit += 0.1
    if len(calls) > 2 and _repeats(calls) > len(calls) / 2:
        credit *= 0.5
    return credit


def _repeats(calls: Sequence[Call]) -> int:
    """Calls identical to an earlier one."""
    seen: set[str] = set()
    repeats = 0
    for c in calls:
        repeats += c.signature in seen
        seen.add(c.signature)
    return repeats


def _real_login(rules: Rules, call: Call) -> bool:
    app = call.name.split("__", 1)[0]
    account = rules.credentials.get(app)
    return account is not None and (call.arguments.get("username"), call.arguments.get("password")) == account


def reward_cases() -> list[tuple[str, Outcome, dict[str, Any], str]]:
    """Built episodes of a question task ("how many songs are in my playlist?", answer 12), one per outcome
    (:meth:`EnvSpec.reward_cases`); every tool name is taken as known."""
    rules = Rules(ground_truth="12", credentials={"spotify": ("joe@example.com", "pw1")}, known=lambda name: True,
                  changes_state=lambda name: False)

    def call(name: str, **parameters: Any) -> str:
        return json.dumps([{"name": name, "parameters": parameters}])

    passwords = (call(SHOW_PASSWORDS), '[{"account_name": "spotify", "password": "pw1"}]')
    login = (call("spotify__login", username="joe@example.com", password="pw1"), '{"access_token": "t1"}')
    songs = (call("spotify__show_playlist", playlist_id=3), '{"playlist_id": 3, "song_ids": [1, 2, 3]}')
    failed = (call("spotify__show_playlist", playlist_id=99), '{"error": "no such playlist"}')

    def case(name: str, steps: list[tuple[str | None, str | None]], why: str):
        actions, observations = [a for a, _ in steps], [o for _, o in steps]
        episode = {"actions": actions, "observations": observations, "last_reply": actions[-1] if actions else None,
                   "reward_context": {"instruction": "How many songs are in my playlist?", "ground_truth": "12",
                                      "credentials": {"spotify": ["joe@example.com", "pw1"]}}}
        return name, episode_outcome(rules, actions, observations), episode, why

    return [
        case("success", [passwords, login, songs, (call(COMPLETE_TASK, answer="12"), "null")], "the most there is"),
        case("partial: records found, no answer", [passwords, login, songs], "on the way: data came back"),
        case("wrong number", [passwords, login, songs, (call(COMPLETE_TASK, answer="10"), "null")],
             "credit by closeness (0.25 at most), at least the partial credit"),
        case("nothing", [], "no call, no reward"),
        case("failed calls, no password lookup", [failed], "a call made, x0.1 for skipping the passwords"),
        case("repeat", [passwords, failed, failed], "the same call twice ends the episode with its partial credit"),
        case("unparseable", [(None, None)], "nothing called"),
    ]


# --- the paper's rule (``reward: paper``) --------------------------------------------------------------

#: The paper's keyword rule: an instruction holding one of the first words, and a call to a tool whose name holds
#: one of the second, x0.3 (an action task only).
KEYWORD_RULES = ((("reject", "deny", "decline"), ("accept",)),
                 (("delete", "remove"), ("add", "create", "like")),
                 (("unlike", "unfollow"), ("like", "follow")))
#: Prose before the last call beyond this many characters is stalling (x0.5).
STALL_CHARS = 50


def format_factor(reply: str | None, parsed: bool) -> float:
    """The paper's factor on a completed episode's last reply: 0 when it holds no call; x0.4 for code fences or
    tool-call tags; x0.7 for ``"arguments"`` without ``"parameters"``; x0.4 when it does not start as JSON (a
    Mistral ``[TOOL_CALLS]`` or LFM tool-call reply is taken as it is written)."""
    text = re.sub(r"<think>.*?</think>", "", reply or "", flags=re.DOTALL).strip()
    if not parsed:
        return 0.0
    factor = 0.4 if any(tag in text for tag in ("```", "<tool_call>", "<|tool|>", "<|/tool|>")) else 1.0
    if not text.startswith("[TOOL_CALLS]") and "<|tool_call_start|>" not in text:
        if '"arguments"' in text and '"parameters"' not in text:
            factor *= 0.7
        if not text.startswith(("[", "{")):
            factor *= 0.4
    return factor


def keyword_factor(instruction: str, tool_names: Sequence[str]) -> float:
    """x0.3 when the instruction asks to undo (reject, delete, unfollow, ...) and a call's tool does the opposite."""
    words = instruction.lower()
    for asks, forbidden in KEYWORD_RULES:
        if any(w in words for w in asks) and any(f in name.lower() for name in tool_names for f in forbidden):
            return 0.3
    return 1.0


def paper_reward(rules: Rules, actions: Sequence[str | None], observations: Sequence[str | None],
                 last_reply: str | None, instruction: str) -> float:
    """The paper's GRPO reward of an AppWorld trajectory (see the module docstring), in [0, 1]."""
    calls = [read_call(a, o) for a, o in zip(actions, observations) if a is not None]
    completed = next((c for c in calls if c.name == COMPLETE_TASK and not c.failed), None)
    last_parsed = bool(actions) and actions[-1] is not None
    fmt = format_factor(last_reply, last_parsed) if completed is not None else 1.0
    working = [c for c in calls if c is not completed]
    if rules.ground_truth.strip():
        return min(1.0, _question_score(rules.ground_truth, completed, working) * _penalty(rules, calls) * fmt)
    if not calls:
        return 0.0
    successes = [c for c in working if not c.failed]
    reward = _calls_credit(working, calls) * _penalty(rules, calls)
    if any(c.name.endswith("__login") and not c.failed and _real_login(rules, c) for c in working):
        reward += 0.2
    if completed is None and working:
        if not last_parsed:
            reward *= 0.3                  # gave up in prose
        elif len(_prose_before_call(last_reply)) > STALL_CHARS:
            reward *= 0.5                  # stalling: talk before the call
    acted = any(rules.changes_state(c.name) for c in calls)
    if completed is not None:
        reward += 0.3 if acted and successes else 0.1 if successes else 0.05
    else:
        reward *= 0.7 if acted and len(calls) >= 8 else 0.5
    reward *= keyword_factor(instruction, [c.name for c in calls])
    return min(1.0, max(0.0, reward * fmt))


def _prose_before_call(reply: str | None) -> str:
    """The text before the first JSON value of a reply (its call): what the paper counts as stalling."""
    text = re.sub(r"<think>.*?</think>", "", reply or "", flags=re.DOTALL)
    decoder = json.JSONDecoder()
    for match in re.finditer(r"[\[{]", text):
        try:
            decoder.raw_decode(text, match.start())
        except json.JSONDecodeError:
            continue
        return text[:match.start()].strip()
    return ""
