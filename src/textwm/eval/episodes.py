"""Many agent episodes at once, in lock-step rounds, against any env backend; records and summaries.

A round: (1) free slots start the next pending episodes; (2) one ``agent.reply_batch`` over the
conversation of every live episode (so a local checkpoint decodes them as one batch and an endpoint
gets them concurrently); (3) one parallel env step for every parsed action. A finished episode frees
its slot at once, so the batch stays full while episodes remain.

Unparseable replies (``parse`` returns None) are counted per episode and never sent to the env, and
never answered with an env-like text: the agent gets ``unparseable_note`` (the env's format hint that
RL training uses too, e.g. :data:`textwm.envs.sciworld.rl.INVALID_REPLY_HINT`; by default
:data:`UNPARSEABLE_NOTE`); the turn counts against ``max_turns``, and
``unparseable_limit`` consecutive ones end the episode (reason ``unparseable_streak``), the same
rule the simulated episodes' reward applies.

Episode end reasons: the env's (``success``, ``wrong_focus``, ``env_done``; the simulator's
``repeat``, ``oscillation``, ``invalid_streak``), ``max_turns``, ``unparseable_streak``, and the
failures ``agent_error``, ``env_error``, ``wm_error`` (counted apart in the summary, and kept in
the success-rate denominators: a failed episode did not succeed).
"""

from __future__ import annotations

import logging
import statistics
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from tqdm.auto import tqdm

from textwm.eval.agents import Agent, AgentError

log = logging.getLogger(__name__)

UNPARSEABLE_NOTE = ("[evaluation harness, not the environment] No action was found in your last reply, so the "
                    "environment was not stepped. Reply with exactly one action.")
FAILURE_REASONS = ("agent_error", "env_error", "wm_error")


@dataclass(frozen=True)
class EpisodeJob:
    episode_id: str
    task_id: str
    #: Task family, the unit of the per-task summary (ScienceWorld: ``boil`` for ``boil_v11``).
    task: str
    #: The conversation the agent starts from (system prompt, first user message, ...).
    messages: tuple[dict[str, str], ...]
    max_turns: int
    #: Whatever the backend needs to start the episode (an RL task row, a list of actions, ...).
    payload: Any = None


@dataclass
class Started:
    """An episode's start: the conversation the agent starts from, or why it could not start."""

    messages: list[dict[str, str]] | None = None
    error: str | None = None


@dataclass
class Stepped:
    """One env step's result. ``done`` with ``reason`` when the env ended the episode."""

    observation: str | None
    score: float
    done: bool = False
    reason: str | None = None
    #: Who produced the observation (simulator: ``local`` or ``wm``; None for a real env).
    source: str | None = None
    #: Set when the step failed (the episode ends with ``reason``, ``env_error`` by default).
    error: str | None = None


class EpisodeEnv(Protocol):
    """An env backend with ``slots`` episodes in flight at most."""

    slots: int

    def start(self, jobs: dict[int, EpisodeJob]) -> dict[int, Started]: ...

    def step(self, actions: dict[int, str]) -> dict[int, Stepped]: ...

    def unparseable(self, slot: int) -> None:
        """The agent's reply in ``slot`` held no action (the env is not stepped)."""
        ...

    def release(self, slot: int) -> dict[str, Any]:
        """The episode in ``slot`` is over; returns extra fields for its record."""
        ...


@dataclass
class EpisodeRecord:
    mode: str
    episode_id: str
    task_id: str
    task: str
    score: float
    success: bool
    #: The env ended the episode (success, wrong focus, step limit, ...), as opposed to a cut-off or failure.
    done: bool
    turns: int
    reason: str
    #: One entry per turn: the parsed action (None: unparseable reply), the observation and the score
    #: after it (None where the env was not stepped).
    actions: list[str | None] = field(default_factory=list)
    observations: list[str | None] = field(default_factory=list)
    scores: list[float | None] = field(default_factory=list)
    sources: list[str | None] = field(default_factory=list)
    replies: list[str] = field(default_factory=list)
    unparseable: int = 0
    error: str | None = None
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        extra = d.pop("extra")
        if not any(s is not None for s in self.sources):
            d.pop("sources")
        return {**d, **extra}


@dataclass
class _Live:
    job: EpisodeJob
    messages: list[dict[str, str]]
    started: float
    record: EpisodeRecord
    streak: int = 0
    finished: bool = False

    def finish(self, reason: str, *, done: bool = False, error: str | None = None) -> None:
        self.record.reason, self.record.done, self.record.error, self.finished = reason, done, error, True


def _record(job: EpisodeJob, mode: str) -> EpisodeRecord:
    return EpisodeRecord(mode=mode, episode_id=job.episode_id, task_id=job.task_id, task=job.task, score=0.0,
                         success=False, done=False, turns=0, reason="")


def run_episodes(jobs: Sequence[EpisodeJob], agent: Agent, env: EpisodeEnv, *, parse: Callable[[str], str | None],
                 mode: str, success_score: float, unparseable_limit: int, unparseable_note: str = UNPARSEABLE_NOTE,
                 progress: bool = True) -> list[EpisodeRecord]:
    """Play every job to its end; returns one record per job, in job order."""
    pending = deque(jobs)
    live: dict[int, _Live] = {}
    done: dict[str, EpisodeRecord] = {}
    bar = tqdm(total=len(jobs), desc=f"{mode} episodes", unit="ep", disable=not progress, mininterval=2.0)

    def close(slot: int) -> None:
        ep = live.pop(slot)
        rec = ep.record
        rec.success = rec.score >= success_score
        rec.seconds = round(time.perf_counter() - ep.started, 3)
        rec.extra.update(env.release(slot))
        done[rec.episode_id] = rec
        bar.update(1)

    try:
        while pending or live:
            starting = {}
            for slot in range(env.slots):
                if slot not in live and pending:
                    starting[slot] = pending.popleft()
            for slot, start in (env.start(starting) if starting else {}).items():
                job = starting[slot]
                ep = _Live(job, list(start.messages or job.messages), time.perf_counter(), _record(job, mode))
                live[slot] = ep
                if start.error is not None:
                    ep.finish("env_error", error=f"start failed: {start.error}")
                    close(slot)
            if not live:
                continue
            slots = sorted(live)
            replies = agent.reply_batch([live[s].messages for s in slots])
            if len(replies) != len(slots):
                raise RuntimeError(f"the agent returned {len(replies)} replies for {len(slots)} conversations")
            actions: dict[int, str] = {}
            for slot, text in zip(slots, replies):
                ep, rec = live[slot], live[slot].record
                if isinstance(text, AgentError):
                    ep.finish("agent_error", error=str(text))
                    continue
                rec.turns += 1
                rec.replies.append(text)
                ep.messages.append({"role": "assistant", "content": text})
                action = parse(text)
                if action is not None:
                    ep.streak = 0
                    actions[slot] = action
                    continue
                rec.unparseable += 1
                ep.streak += 1
                for seq in (rec.actions, rec.observations, rec.scores, rec.sources):
                    seq.append(None)
                env.unparseable(slot)
                if ep.streak >= unparseable_limit:
                    ep.finish("unparseable_streak")
                elif rec.turns >= ep.job.max_turns:
                    ep.finish("max_turns")
                else:
                    ep.messages.append({"role": "user", "content": unparseable_note})
            for slot, result in (env.step(actions) if actions else {}).items():
                ep, rec = live[slot], live[slot].record
                rec.actions.append(actions[slot])
                rec.observations.append(result.observation)
                rec.scores.append(result.score)
                rec.sources.append(result.source)
                rec.score = result.score
                if result.error is not None:
                    ep.finish(result.reason or "env_error", error=result.error)
                elif result.done:
                    ep.finish(result.reason or "env_done", done=True)
                elif rec.turns >= ep.job.max_turns:
                    ep.finish("max_turns")
                else:
                    ep.messages.append({"role": "user", "content": result.observation or ""})
            for slot in [s for s in slots if live[s].finished]:
                close(slot)
    finally:
        bar.close()
    return [done[job.episode_id] for job in jobs]


def _block(records: Sequence[EpisodeRecord]) -> dict[str, Any]:
    n = len(records)
    k = sum(r.success for r in records)
    return {"episodes": n, "successes": k, "success_rate": k / n if n else None,
            "mean_score": statistics.fmean(r.score for r in records) if n else None}


def summarize(records: Sequence[EpisodeRecord]) -> dict[str, Any]:
    """Success rate and mean score overall (micro: over episodes) and per task, end reasons, failure counts."""
    reasons = Counter(r.reason for r in records)
    by_task: dict[str, list[EpisodeRecord]] = {}
    for r in records:
        by_task.setdefault(r.task, []).append(r)
    summary = _block(records)
    summary.update({
        "mean_turns": statistics.fmean(r.turns for r in records) if records else None,
        "reasons": dict(sorted(reasons.items())),
        "unparseable_replies": sum(r.unparseable for r in records),
        **{f"{reason}s": reasons.get(reason, 0) for reason in FAILURE_REASONS},
        "per_task": {task: _block(rs) for task, rs in sorted(by_task.items())},
    })
    failed = sum(reasons.get(r, 0) for r in FAILURE_REASONS)
    if failed:
        log.warning("%d of %d episodes ended in a failure (%s); they count as unsuccessful", failed, len(records),
                    ", ".join(f"{r}: {reasons[r]}" for r in FAILURE_REASONS if reasons.get(r)))
    return summary


def _fmt(value: Any) -> str:
    if value is None:
        return "n/a"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def summary_markdown(summary: dict[str, Any]) -> str:
    """A per-task table (success rate, mean score) with the overall row and the end reasons."""
    lines = ["| task | episodes | successes | success rate | mean score |", "|---|---|---|---|---|"]
    for task, b in [*summary["per_task"].items(), ("**all**", summary)]:
        lines.append(f"| {task} | {b['episodes']} | {b['successes']} | {_fmt(b['success_rate'])} | "
                     f"{_fmt(b['mean_score'])} |")
    reasons = ", ".join(f"{k}: {v}" for k, v in summary["reasons"].items()) or "none"
    failures = ", ".join(f"{r}s: {summary[f'{r}s']}" for r in FAILURE_REASONS)
    lines += ["", f"- end reasons: {reasons}", f"- unparseable replies: {summary['unparseable_replies']}; "
              f"failures (counted as unsuccessful): {failures}"]
    return "\n".join(lines) + "\n"
