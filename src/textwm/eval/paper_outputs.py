"""The paper's per-episode output files, mapped from our episode records (``episodes_real.jsonl`` rows, the dicts of
:meth:`textwm.eval.episodes.EpisodeRecord.to_dict`) and the dataset rows they played (patronus-ai/mdlm_world_modeling).

ALFWorld rows (``alfworld/eval_parallel.py`` ``Episode.result``, ``eval_fast.py`` ``Episode.result``,
``eval_openai.py`` ``run_episode`` + ``main``), field by field:

* ``i``: the row's index in the dataset (after ``--limit``), as ours are played in dataset order;
* ``won``: our ``success`` (the goal holds: the same as the env's ``won`` flag);
* ``turns``: our ``turns`` (agent replies, unparseable ones included, as the paper counted);
* ``kill``: from our ``reason``: ``success`` / ``env_done`` -> null (the paper's kill of a won or env-ended game),
  ``max_turns`` -> ``turn_cap``, ``unparseable_streak`` -> ``unparseable``, ``env_error`` -> ``env_error:<error>``,
  ``agent_error`` -> ``api_error:<error>`` (eval_openai) or ``agent_error:<error>`` (no paper value: its local vLLM
  agent could not fail per episode); any other reason as it is. The paper's ``loop``/``loop_abab``/``stuck`` kills
  never appear: our real-env episodes have no such rule;
* ``task_type``, ``game_file``: the dataset row's own columns (null when absent), as the paper read them;
* ``goal``: the text after the last ``Your task is to:`` of the row's first user message, to the line's end,
  stripped, 120 characters at most (the paper's rule);
* ``messages``: null: our records keep the replies, actions and observations, not the formatted conversation;
* ``raw_completions``: our ``replies``; ``parsed_actions``: our ``actions`` (null for an unparseable reply).

ScienceWorld (``sciworld/eval_sciworld.py`` ``run_episode`` + ``main``): ``{"label", "avg_score", "results"}``, a
result per episode: ``score`` (our final ``score``), ``n_steps`` (actions sent to the env: our non-null
``actions``), ``done`` (our ``done``: the env ended it), ``n_repeated`` (positions where an action equals the two
before it, over those actions), ``last_action`` (the last of them, ``""`` for none), ``task_id``, ``instruction``
(the dataset row's, 60 characters at most; null when absent), and ``error`` (our ``error``) only when the episode
failed, as the paper added it only then.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from textwm.data.schema import parse_messages

#: Fields of the paper's ALFWorld rows, in its order, per entry point.
ALFWORLD_FIELDS = {
    "parallel": ("i", "won", "turns", "kill", "task_type", "goal", "game_file", "messages", "raw_completions",
                 "parsed_actions"),
    "fast": ("i", "won", "turns", "kill", "task_type", "game_file"),
    "openai": ("won", "turns", "kill", "messages", "raw_completions", "parsed_actions", "i", "task_type", "goal",
               "game_file"),
}
GOAL_MARKER = "Your task is to:"
GOAL_CHARS, INSTRUCTION_CHARS = 120, 60


def goal_of(row: Mapping[str, Any]) -> str:
    """The paper's ``goal`` of an ALFWorld row (module docstring); ``""`` when the row has no first user message."""
    raw = row.get("messages")
    messages = parse_messages(raw) if raw else []
    text = messages[1]["content"] if len(messages) > 1 else ""
    return text.split(GOAL_MARKER)[-1].split("\n")[0].strip()[:GOAL_CHARS]


def kill_of(record: Mapping[str, Any], form: str) -> str | None:
    """The paper's ``kill`` of one of our records (module docstring)."""
    reason, error = record.get("reason"), record.get("error")
    if reason in ("success", "env_done"):
        return None
    if reason == "agent_error":
        return f"{'api_error' if form == 'openai' else 'agent_error'}:{error}"
    if reason == "env_error":
        return f"env_error:{error}"
    return {"max_turns": "turn_cap", "unparseable_streak": "unparseable"}.get(reason, reason)


def alfworld_rows(records: Sequence[Mapping[str, Any]], rows: Sequence[Mapping[str, Any]], form: str) -> list[dict]:
    """The paper's rows of ``form`` (parallel | fast | openai); ``rows[i]`` is the dataset row record ``i`` played."""
    if form not in ALFWORLD_FIELDS:
        raise ValueError(f"form must be one of {', '.join(ALFWORLD_FIELDS)}, got {form!r}")
    if len(rows) < len(records):
        raise ValueError(f"{len(records)} episodes but {len(rows)} dataset rows: give the rows file they played")
    out = []
    for i, (rec, row) in enumerate(zip(records, rows)):
        values = {"i": i, "won": bool(rec["success"]), "turns": rec["turns"], "kill": kill_of(rec, form),
                  "task_type": row.get("task_type"), "goal": goal_of(row), "game_file": row.get("game_file"),
                  "messages": None, "raw_completions": list(rec.get("replies") or []),
                  "parsed_actions": list(rec.get("actions") or [])}
        out.append({k: values[k] for k in ALFWORLD_FIELDS[form]})
    return out


def alfworld_report(paper_rows: Sequence[Mapping[str, Any]]) -> str:
    """The paper's closing lines: ``Final: W/N = acc``, games won per task type, the kills of the games lost."""
    won = sum(r["won"] for r in paper_rows)
    lines = [f"Final: {won}/{len(paper_rows)} = {won / max(len(paper_rows), 1):.3f}"]
    by_type: dict[Any, list[bool]] = {}
    for r in paper_rows:
        by_type.setdefault(r.get("task_type") or "?", []).append(r["won"])
    lines += [f"  {t:<40} {sum(v)}/{len(v)}" for t, v in sorted(by_type.items(), key=lambda kv: str(kv[0]))]
    kills = Counter(r.get("kill") or "completed" for r in paper_rows if not r["won"])
    lines.append(f"  Kills: {dict(kills.most_common(5))}")
    return "\n".join(lines)


def sciworld_result(record: Mapping[str, Any], row: Mapping[str, Any]) -> dict[str, Any]:
    """One entry of the paper's ``results`` (module docstring)."""
    actions = [a for a in record.get("actions") or [] if a is not None]
    repeated = sum(actions[k] == actions[k - 1] == actions[k - 2] for k in range(2, len(actions)))
    instruction = row.get("instruction")
    out = {"score": float(record["score"]), "n_steps": len(actions), "done": bool(record["done"]),
           "n_repeated": repeated, "last_action": actions[-1] if actions else "", "task_id": record["task_id"],
           "instruction": instruction[:INSTRUCTION_CHARS] if isinstance(instruction, str) else None}
    if record.get("error"):
        out["error"] = record["error"]
    return out


def sciworld_json(label: str, records: Sequence[Mapping[str, Any]], rows: Sequence[Mapping[str, Any]]) -> dict:
    """The paper's ``data/eval_<label>.json``; ``rows``: the dataset rows, matched to records by ``task_id``."""
    by_id = {r.get("task_id"): r for r in rows}
    results = [sciworld_result(rec, by_id.get(rec["task_id"], {})) for rec in records]
    scores = [r["score"] for r in results]
    return {"label": label, "avg_score": sum(scores) / len(scores) if scores else None, "results": results}


def sciworld_report(paper: Mapping[str, Any]) -> str:
    """The paper's closing lines: average score, full (>= 100) and partial (>= 50) completion, steps, per task."""
    results = paper["results"]
    n = max(len(results), 1)
    lines = [f"  {paper['label']}", f"  Average score:     {paper['avg_score'] or 0.0:.1f}/100",
             f"  Full completion:   {sum(r['score'] >= 100 for r in results) / n:.1%}",
             f"  Partial (>=50):    {sum(r['score'] >= 50 for r in results) / n:.1%}",
             f"  Avg steps:         {sum(r['n_steps'] for r in results) / n:.1f}", "  Per-task-type scores:"]
    by_type: dict[str, list[float]] = {}
    for r in results:
        by_type.setdefault(r["task_id"].rsplit("_v", 1)[0], []).append(r["score"])
    lines += [f"    {t}: {sum(s) / len(s):.1f} ({len(s)} tasks)" for t, s in sorted(by_type.items())]
    return "\n".join(lines)
