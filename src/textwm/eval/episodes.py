"""Many agent episodes at once, in lock-step rounds, against any env backend; records and summaries.

A round: (1) free slots start the next pending episodes; (2) one ``agent.reply_batch`` over the
conversation of every live episode (so a local checkpoint decodes them as one batch and an endpoint
gets them concurrently); (3) one parallel env step for every parsed action. A finished episode frees
its slot at once, so the batch stays full while episodes remain.

The turn rules are the ones RL rollouts follow (:class:`~textwm.envs.episode.Trajectory`): the env's
parser, its format hint after an unparseable reply (never an env-like text; the env is not stepped),
its streak limit, the turn limit. End reasons: the env's (``success``, ``wrong_focus``, ``env_done``;
the simulator's ``repeat``, ``oscillation``, ``invalid_streak``), ``max_turns``,
``unparseable_streak``, and the failures ``agent_error``, ``env_error``, ``wm_error`` (counted apart
in the summary, and kept in the success-rate denominators: a failed episode did not succeed).
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Protocol

from tqdm.auto import tqdm

from textwm.envs.contract import Outcome
from textwm.envs.episode import FAILURE_REASONS, Step, Trajectory, TurnRules
from textwm.eval.agents import Agent, AgentError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EpisodeJob:
    episode_id: str
    task_id: str
    #: Task family, the unit of the per-task summary (ScienceWorld: ``boil`` for ``boil_v11``).
    task: str
    #: The conversation the agent starts from (system prompt, first user message, ...).
    messages: tuple[dict[str, str], ...]
    max_turns: int
    #: Whatever the backend needs to start the episode (a TaskStart, a list of actions, ...).
    payload: Any = None


@dataclass
class Started:
    """An episode's start: the conversation the agent starts from, or why it could not start."""

    messages: list[dict[str, str]] | None = None
    error: str | None = None
    #: Extra fields for the episode's record (e.g. ``start_rebuilt``).
    extra: dict[str, Any] = field(default_factory=dict)
    #: What the env reported at the start (the real env's reset info), for agents that read it.
    info: dict[str, Any] = field(default_factory=dict)


class EpisodeEnv(Protocol):
    """An env backend with ``slots`` episodes in flight at most."""

    slots: int

    def start(self, jobs: dict[int, EpisodeJob]) -> dict[int, Started]: ...

    def step(self, actions: dict[int, str]) -> dict[int, Step]: ...

    def unparseable(self, slot: int) -> Outcome | None:
        """The agent's reply in ``slot`` held no action (the env is not stepped); the env's new outcome, if any."""
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
    #: after it (None where the env was not stepped), who answered (local / wm / feedback; None: the real env).
    actions: list[str | None] = field(default_factory=list)
    observations: list[str | None] = field(default_factory=list)
    scores: list[float | None] = field(default_factory=list)
    sources: list[str | None] = field(default_factory=list)
    replies: list[str] = field(default_factory=list)
    unparseable: int = 0
    error: str | None = None
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, job: EpisodeJob, mode: str, t: Trajectory, *, success: bool, seconds: float,
           extra: dict[str, Any]) -> EpisodeRecord:
        return cls(mode=mode, episode_id=job.episode_id, task_id=job.task_id, task=job.task, score=t.score,
                   success=success, done=t.env_ended, turns=t.turns, reason=t.end_reason or "", actions=t.actions,
                   observations=t.observations, scores=t.scores, sources=t.sources, replies=t.replies,
                   unparseable=t.unparseable, error=t.error, seconds=round(seconds, 3), extra=extra)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EpisodeRecord:
        """A record as :meth:`to_dict` wrote it (its extra keys back in ``extra``)."""
        names = {f.name for f in fields(cls)} - {"extra"}
        return cls(**{k: v for k, v in d.items() if k in names}, extra={k: v for k, v in d.items() if k not in names})

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
    trajectory: Trajectory
    started: float
    extra: dict[str, Any]
    #: The env's latest info (reset, then each step), for an agent that reads it (the env's expert).
    info: Any = None


def run_episodes(jobs: Sequence[EpisodeJob], agent: Agent, env: EpisodeEnv, *, rules: TurnRules, mode: str,
                 is_success: Callable[[float], bool], progress: bool = True,
                 keep_messages: bool = False) -> list[EpisodeRecord]:
    """Play every job to its end; returns one record per job, in job order. With ``keep_messages`` each record's
    ``extra["messages"]`` is the conversation as the agent had it, plus the last observation when the env ended
    the episode (SFT demos are made of it: :mod:`textwm.eval.agent_sft`)."""
    pending = deque(jobs)
    live: dict[int, _Live] = {}
    done: dict[str, EpisodeRecord] = {}
    bar = tqdm(total=len(jobs), desc=f"{mode} episodes", unit="ep", disable=not progress, mininterval=2.0)

    def close(slot: int) -> None:
        ep = live.pop(slot)
        extra = {**ep.extra, **env.release(slot)}
        if keep_messages:
            last = ep.trajectory.observations[-1] if ep.trajectory.observations else None
            ending = [{"role": "user", "content": last}] if ep.trajectory.env_ended and last is not None else []
            extra["messages"] = [*ep.messages, *ending]
        done[ep.job.episode_id] = EpisodeRecord.of(ep.job, mode, ep.trajectory, success=is_success(ep.trajectory.score),
                                                   seconds=time.perf_counter() - ep.started, extra=extra)
        bar.update(1)

    try:
        while pending or live:
            starting = {}
            for slot in range(env.slots):
                if slot not in live and pending:
                    starting[slot] = pending.popleft()
            for slot, start in (env.start(starting) if starting else {}).items():
                job = starting[slot]
                trajectory = Trajectory(job.task_id, max_turns=job.max_turns)
                live[slot] = _Live(job, list(start.messages or job.messages), trajectory, time.perf_counter(),
                                   dict(start.extra), dict(start.info))
                if start.error is not None:
                    trajectory.fail("env_error", f"start failed: {start.error}")
                elif job.max_turns < 1:
                    trajectory.finish("max_turns")
                if trajectory.finished:
                    close(slot)
            if not live:
                continue
            slots = sorted(live)
            conversations = [live[s].messages for s in slots]
            if getattr(agent, "reads_env_info", False):  # the env's own expert
                replies = agent.reply_batch(conversations, infos=[live[s].info for s in slots])
            else:
                replies = agent.reply_batch(conversations)
            if len(replies) != len(slots):
                raise RuntimeError(f"the agent returned {len(replies)} replies for {len(slots)} conversations")
            actions: dict[int, str] = {}
            for slot, text in zip(slots, replies):
                ep = live[slot]
                if isinstance(text, AgentError):
                    ep.trajectory.fail("agent_error", str(text))
                    continue
                ep.messages.append({"role": "assistant", "content": text})
                action = ep.trajectory.reply(text, rules)
                if action is not None:
                    actions[slot] = action
                else:
                    ep.trajectory.skipped(rules, env.unparseable(slot))
            for slot, step in (env.step(actions) if actions else {}).items():
                live[slot].trajectory.stepped(actions[slot], step)
                live[slot].info = dict(step.info)
            for slot in slots:
                ep = live[slot]
                if ep.trajectory.finished:
                    close(slot)
                elif ep.trajectory.pending is not None:
                    ep.messages.append({"role": "user", "content": ep.trajectory.pending})
    finally:
        bar.close()
    return [done[job.episode_id] for job in jobs]


def wilson_interval(successes: int, episodes: int, z: float = 1.96) -> list[float] | None:
    """The Wilson score interval of a success rate (95% for z 1.96): unlike rate +- z * stderr it stays inside
    [0, 1] and is not empty at 0 or all successes, the usual case for a few dozen agent episodes."""
    if episodes == 0:
        return None
    rate, z2 = successes / episodes, z * z
    centre = (rate + z2 / (2 * episodes)) / (1 + z2 / episodes)
    half = z * math.sqrt(rate * (1 - rate) / episodes + z2 / (4 * episodes * episodes)) / (1 + z2 / episodes)
    return [round(max(0.0, centre - half), 4), round(min(1.0, centre + half), 4)]


def _block(records: Sequence[EpisodeRecord]) -> dict[str, Any]:
    n = len(records)
    k = sum(r.success for r in records)
    return {"episodes": n, "successes": k, "success_rate": k / n if n else None,
            "success_ci95": wilson_interval(k, n),
            "mean_score": statistics.fmean(r.score for r in records) if n else None}


def fmt_ci(interval: list[float] | None) -> str:
    """A 95% interval cell, ``[0.120, 0.450]``; ``n/a`` without episodes."""
    return "n/a" if interval is None else f"[{interval[0]:.3f}, {interval[1]:.3f}]"


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


def fmt(value: Any) -> str:
    """A table cell: ``n/a`` for None, three decimals for a float."""
    if value is None:
        return "n/a"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def summary_markdown(summary: dict[str, Any]) -> str:
    """A per-task table (success rate, mean score) with the overall row and the end reasons."""
    lines = ["| task | episodes | successes | success rate | 95% interval (Wilson) | mean score |",
             "|---|---|---|---|---|---|"]
    for task, b in [*summary["per_task"].items(), ("**all**", summary)]:
        lines.append(f"| {task} | {b['episodes']} | {b['successes']} | {fmt(b['success_rate'])} | "
                     f"{fmt_ci(b.get('success_ci95'))} | {fmt(b['mean_score'])} |")
    reasons = ", ".join(f"{k}: {v}" for k, v in summary["reasons"].items()) or "none"
    failures = ", ".join(f"{r}s: {summary[f'{r}s']}" for r in FAILURE_REASONS)
    lines += ["", f"- end reasons: {reasons}", f"- unparseable replies: {summary['unparseable_replies']}; "
              f"failures (counted as unsuccessful): {failures}"]
    return "\n".join(lines) + "\n"
