"""Closed-loop evaluation over any registered env: the agent in the real env, in the world model, and W2R replay.

* :func:`evaluate_agent_real` — episodes over a :class:`~textwm.envs.blocking.BlockingPool` (the env
  server's worker pool: one real env session per worker, stepped in parallel). Score, success and
  termination are the env's (``spec.end_reason``).
* :func:`evaluate_agent_wm` — the same loop with the :class:`~textwm.envs.simulator.Simulator` as the
  env; score and termination from the trajectory alone (the env's ``SimEpisode.outcome``, as in RL
  training); a WM failure ends the episode as ``wm_error``, or with ``--wm-on-error fallback`` is answered by
  the env's fallback observation (counted: ``fallback_steps``).
* :func:`replay_in_real` — W2R: each WM episode's actions, in order, replayed in the real env from the
  same task's start (the same episode loop, with an agent that replays them); the real score is recorded.
* :func:`step_agreement` — per step, the WM episode's observation against the real env's after the same action
  in its W2R replay.

Rows are read once by the env's spec (:meth:`~textwm.envs.contract.EnvSpec.load_row`) into
:class:`~textwm.envs.contract.TaskStart`; rows without a simulator start state (the paper's released
rows) are completed for the world model through :mod:`textwm.envs.sim_cache`. The turn rules are the
env's (:class:`TurnRules`).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from textwm.data.jsonl import DataError, read_jsonl
from textwm.envs.blocking import BlockingPool
from textwm.envs.contract import EnvSpec, Outcome, TaskStart
from textwm.envs.episode import Step, TurnRules
from textwm.envs.protocol import BadRequest, EnvError, ResetResult
from textwm.envs.sim_cache import SimTaskCache
from textwm.envs.simulator import FALLBACK, LOCAL, WM, Simulator
from textwm.eval.agents import Agent, AgentError, Conversation
from textwm.eval.episodes import EpisodeJob, EpisodeRecord, Started, run_episodes, summarize

log = logging.getLogger(__name__)

#: End reason of a W2R replay that ran out of actions before the real env ended the episode.
REPLAY_END = "replay_end"


class EvalInputError(ValueError):
    """Bad input to an evaluation (rows, task ids, endpoints); the message says what to fix."""


# --- rows and jobs -------------------------------------------------------------------------------------


def load_rows(spec: EnvSpec, path: str, *, need_sim: bool = False, tasks: Sequence[str] = (), limit: int = 0,
              sim_cache: SimTaskCache | None = None) -> list[TaskStart]:
    """RL task rows (``rl_{split}.jsonl``) read by the env's spec; only ``tasks`` (families) if given, the first
    ``limit`` if > 0. With ``need_sim``, rows without a simulator start state (the paper's released rows) are
    completed through ``sim_cache`` (from the cache, else baked from the real env once), or refused without one.

    Raises:
        DataError: missing file or a bad row (file, line and field named); no row left after the task filter.
    """
    report = read_jsonl(path)
    kept = [(row, line, _start_of(spec, row, path, line, need_sim=False))
            for row, line in zip(report.rows, report.line_numbers)]
    if tasks:
        wanted = set(tasks)
        kept = [k for k in kept if k[2].family in wanted]
        if not kept:
            raise DataError(f"no row of the tasks {', '.join(sorted(wanted))}", path=path)
    kept = kept[:limit] if limit > 0 else kept
    if not need_sim:
        return [start for _, _, start in kept]
    rows, lines = [row for row, _, _ in kept], [line for _, line, _ in kept]
    if sim_cache is not None:
        rows = sim_cache.complete(rows, path=path, lines=lines)
    return [_start_of(spec, row, path, line, need_sim=True) for row, line in zip(rows, lines)]


def _start_of(spec: EnvSpec, row: Any, path: str, line: int, *, need_sim: bool) -> TaskStart:
    """One row read by the spec; a DataError located at ``path:line``."""
    try:
        start = spec.load_row(row, need_sim=need_sim)
        if len(start.messages) < 2:
            raise DataError("row has no agent conversation (system + first user message)", field="messages")
    except DataError as exc:
        raise exc.at(path, line) from None
    return start


def make_jobs(spec: EnvSpec, starts: Sequence[TaskStart], *, repeats: int = 1, max_turns: int = 0) -> list[EpisodeJob]:
    """``repeats`` episodes per row; ``max_turns`` > 0 overrides the rows' own ``max_turns``."""
    counts = Counter(s.task_id for s in starts)
    jobs = []
    for i, start in enumerate(starts):
        base = start.task_id if counts[start.task_id] == 1 else f"{start.task_id}@{i}"
        turns = max_turns if max_turns > 0 else (start.max_turns or spec.default_max_turns)
        for k in range(repeats):
            jobs.append(EpisodeJob(episode_id=f"{base}#{k}", task_id=start.task_id, task=start.family,
                                   messages=tuple(dict(m) for m in start.messages), max_turns=turns, payload=start))
    return jobs


# --- the real env ----------------------------------------------------------------------------------------


def _bad_input(reply: Any, task_id: str) -> None:
    if isinstance(reply, BadRequest):  # an unknown task or variation: bad input, not a flaky env
        raise EvalInputError(f"the real env rejects task {task_id!r}: {reply}")


class RealBackend:
    """The real env behind the episode loop: one pool session per slot, reset again for every episode."""

    def __init__(self, spec: EnvSpec, pool: BlockingPool):
        self.spec, self.pool, self.slots = spec, pool, pool.slots
        self._outcome: dict[int, Outcome] = {}

    def start(self, jobs: dict[int, EpisodeJob]) -> dict[int, Started]:
        replies = self.pool.reset({s: (j.task_id, j.payload.reset_options) for s, j in jobs.items()})
        out = {}
        for slot, reply in replies.items():
            job = jobs[slot]
            _bad_input(reply, job.task_id)
            self._outcome[slot] = Outcome(False, None, 0.0)
            if isinstance(reply, EnvError):
                out[slot] = Started(error=str(reply))
                continue
            reset = ResetResult(reply["observation"], reply["task_description"], reply.get("info", {}))
            messages, rebuilt = self.spec.real_start(job.payload, reset)
            extra = {"start_rebuilt": True} if rebuilt else {}
            out[slot] = Started(messages=messages, extra={**extra, **self.spec.reset_record(reset)},
                                info=dict(reset.info))
        return out

    def step(self, actions: dict[int, str]) -> dict[int, Step]:
        out = {}
        for slot, reply in self.pool.step(actions).items():
            if isinstance(reply, EnvError):
                out[slot] = Step(None, self._outcome[slot], error=str(reply))
                continue
            score, done = float(reply["score"]), bool(reply["done"])
            self._outcome[slot] = Outcome(done, self.spec.end_reason(score) if done else None, score)
            info = reply.get("info") or {}
            out[slot] = Step(reply["observation"], self._outcome[slot],
                             message=self.spec.agent_message(reply["observation"], info), info=info)
        return out

    def unparseable(self, slot: int) -> Outcome | None:
        return None

    def release(self, slot: int) -> dict[str, Any]:
        self._outcome.pop(slot, None)
        return {}


# --- the world model: the Simulator ----------------------------------------------------------------------


class SimBackend:
    """The Simulator behind the episode loop; the WM steps of one round run concurrently in threads."""

    def __init__(self, spec: EnvSpec, simulator: Simulator, slots: int):
        self.spec, self.simulator, self.slots = spec, simulator, slots
        self._episodes: dict[int, Any] = {}
        self._errors: dict[int, int] = {}
        self._threads = ThreadPoolExecutor(max_workers=slots, thread_name_prefix="sim")

    def start(self, jobs: dict[int, EpisodeJob]) -> dict[int, Started]:
        for slot, job in jobs.items():
            self._episodes[slot], self._errors[slot] = self.spec.start_episode(job.payload), 0
        return {slot: Started(messages=list(job.messages)) for slot, job in jobs.items()}

    def _step(self, slot: int, action: str) -> Step:
        step = self.simulator.step(self._episodes[slot], action)
        self._errors[slot] += step.error is not None
        return step

    def step(self, actions: dict[int, str]) -> dict[int, Step]:
        futures = {slot: self._threads.submit(self._step, slot, action) for slot, action in actions.items()}
        return {slot: fut.result() for slot, fut in futures.items()}

    def unparseable(self, slot: int) -> Outcome:
        episode = self._episodes[slot]
        episode.unparseable()
        return episode.outcome()

    def release(self, slot: int) -> dict[str, Any]:
        self._episodes.pop(slot, None)
        return {"wm_errors": self._errors.pop(slot, 0)}

    def close(self) -> None:
        self._threads.shutdown(wait=True)


# --- evaluations ---------------------------------------------------------------------------------------


@dataclass
class EvalResult:
    records: list[EpisodeRecord]
    summary: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)


def evaluate_agent_real(spec: EnvSpec, starts: Sequence[TaskStart], agent: Agent, *, workers: int = 2,
                        max_turns: int = 0, repeats: int = 1, pool: BlockingPool | None = None,
                        progress: bool = True, keep_messages: bool = False) -> EvalResult:
    """Play every row ``repeats`` times in the real env; ``pool`` (started or not) is reused and left open,
    else one of ``workers`` processes is started and closed here."""
    jobs = make_jobs(spec, starts, repeats=repeats, max_turns=max_turns)
    own = pool is None
    pool = pool or BlockingPool(spec, workers)
    try:
        pool.start()
        started = time.perf_counter()
        records = run_episodes(jobs, agent, RealBackend(spec, pool), rules=TurnRules.of(spec), mode="real",
                               is_success=spec.is_success, progress=progress, keep_messages=keep_messages)
        seconds = time.perf_counter() - started
    finally:
        if own:
            pool.close()
    summary = summarize(records)
    summary["start_rebuilt"] = sum(bool(r.extra.get("start_rebuilt")) for r in records)
    summary["seconds"] = round(seconds, 2)
    summary["worker_restarts"] = pool.restarts
    return EvalResult(records, summary)


def evaluate_agent_wm(spec: EnvSpec, starts: Sequence[TaskStart], agent: Agent, simulator: Simulator, *,
                      concurrency: int = 8, max_turns: int = 0, repeats: int = 1, progress: bool = True) -> EvalResult:
    """Play every row ``repeats`` times in the simulator (``concurrency`` episodes at once); rows need ``sim_task``."""
    for start in starts:
        if start.sim_task is None:
            raise DataError(spec.missing_sim_task(start.task_id), field="sim_task")
        spec.check_sim_task(start.sim_task)
    jobs = make_jobs(spec, starts, repeats=repeats, max_turns=max_turns)
    backend = SimBackend(spec, simulator, concurrency)
    before = simulator.stats.as_dict()
    started = time.perf_counter()
    try:
        records = run_episodes(jobs, agent, backend, rules=TurnRules.of(spec), mode="wm", is_success=spec.is_success,
                               progress=progress)
    finally:
        backend.close()
    for r in records:
        r.extra = {"local_steps": r.sources.count(LOCAL), "wm_steps": r.sources.count(WM),
                   "fallback_steps": r.sources.count(FALLBACK), **r.extra}
    after = simulator.stats.as_dict()
    summary = summarize(records)
    summary.update({"seconds": round(time.perf_counter() - started, 2),
                    "local_steps": after["local"] - before["local"], "wm_steps": after["wm"] - before["wm"],
                    "fallback_steps": after["fallback"] - before["fallback"],
                    "anchored_wm_steps": after["anchored"] - before["anchored"],
                    "wm_step_errors": after["wm_errors"] - before["wm_errors"], "responder": simulator.use_local,
                    "on_wm_error": simulator.on_wm_error,
                    "wm_endpoint": getattr(simulator.wm, "endpoint", None)})
    return EvalResult(records, summary)


class ReplayAgent:
    """Replies with the recorded actions of each WM episode, in order (W2R); conversations are told apart by
    their position in the episode loop's batch, so it is driven with one conversation per job slot."""

    def __init__(self, actions_by_start: dict[str, list[str]]):
        self.actions = actions_by_start

    def reply_batch(self, conversations: Sequence[Conversation]) -> list[str | AgentError]:
        out: list[str | AgentError] = []
        for messages in conversations:
            key = messages[0]["content"]
            turn = sum(m["role"] == "assistant" for m in messages)
            actions = self.actions.get(key)
            out.append(actions[turn] if actions and turn < len(actions) else AgentError("replay: no action left"))
        return out

    def describe(self) -> dict[str, Any]:
        return {"kind": "replay"}


def replay_in_real(spec: EnvSpec, wm_records: Sequence[EpisodeRecord], starts_by_task_id: dict[str, TaskStart], *,
                   workers: int = 2, pool: BlockingPool | None = None, progress: bool = True) -> EvalResult:
    """W2R: replay each WM episode's parsed actions in order in the real env (stopping when the env ends the
    episode); the record's score is the real score after the replay, its reason ``replay_end`` when the actions
    ran out first."""
    jobs, actions = [], {}
    for r in wm_records:
        replayed = [a for a in r.actions if a is not None]
        # The replay's conversation is just a key (the episode id) the ReplayAgent looks its actions up by.
        key = f"w2r:{r.episode_id}"
        actions[key] = replayed
        jobs.append(EpisodeJob(episode_id=r.episode_id, task_id=r.task_id, task=r.task,
                               messages=({"role": "system", "content": key},), max_turns=len(replayed),
                               payload=starts_by_task_id[r.task_id]))
    own = pool is None
    pool = pool or BlockingPool(spec, workers)
    started = time.perf_counter()
    try:
        pool.start()
        backend = _ReplayBackend(RealBackend(spec, pool))
        records = run_episodes(jobs, ReplayAgent(actions), backend, mode="w2r", is_success=spec.is_success,
                               rules=TurnRules(parse=lambda action: action, hint="", unparseable_limit=1),
                               progress=progress)
    finally:
        if own:
            pool.close()
    for r in records:
        r.replies = []
        if r.reason == "max_turns":
            r.reason = REPLAY_END
    summary = summarize(records)
    summary["seconds"] = round(time.perf_counter() - started, 2)
    return EvalResult(records, summary)


def step_agreement(wm_records: Sequence[EpisodeRecord], w2r_records: Sequence[EpisodeRecord]) -> dict[str, Any]:
    """Per-step agreement of the simulated env with the real one: each WM episode's observation after each parsed
    action against the real env's after the same action in the episode's W2R replay (exact, whitespace-trimmed),
    over the steps both took; in all and by who answered in the simulator (``local``, ``wm``, ``fallback``).

    Returns ``{source: {"steps", "agree", "rate"}}`` (``all`` included) and ``episodes``: those compared."""
    replays = {r.episode_id: r for r in w2r_records}
    steps, agree, episodes = Counter(), Counter(), 0
    for wm in wm_records:
        real = replays.get(wm.episode_id)
        if real is None:
            continue
        episodes += 1
        sources = wm.sources or [None] * len(wm.actions)
        simulated = [(o, s) for a, o, s in zip(wm.actions, wm.observations, sources) if a is not None]
        actual = [o for a, o in zip(real.actions, real.observations) if a is not None]
        for (observed, source), truth in zip(simulated, actual):
            if observed is None or truth is None:
                continue
            same = observed.strip() == truth.strip()
            for key in ("all", source or "unknown"):
                steps[key] += 1
                agree[key] += same
    out: dict[str, Any] = {k: {"steps": steps[k], "agree": agree[k], "rate": round(agree[k] / steps[k], 4)}
                           for k in steps}
    out["episodes"] = episodes
    return out


class _ReplayBackend:
    """The real backend, but the conversation stays the replay key (the real start text is not needed)."""

    def __init__(self, real: RealBackend):
        self.real, self.slots = real, real.slots

    def start(self, jobs: dict[int, EpisodeJob]) -> dict[int, Started]:
        out = self.real.start(jobs)
        return {s: Started(messages=list(jobs[s].messages), error=st.error) for s, st in out.items()}

    def step(self, actions: dict[int, str]) -> dict[int, Step]:
        return self.real.step(actions)

    def unparseable(self, slot: int) -> Outcome | None:
        return None

    def release(self, slot: int) -> dict[str, Any]:
        return self.real.release(slot)
