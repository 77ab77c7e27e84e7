"""ScienceWorld evaluation: an agent in the real env, the same agent in the world model, and W2R replay.

* :func:`evaluate_agent_real` — episodes over a :class:`RealEnvFleet`: worker processes (the env
  server's own worker, :func:`textwm.envs.sciworld.pool.worker_main`), one ScienceWorld JVM each,
  stepped in parallel over pipes. Score, success and termination are the env's.
* :func:`evaluate_agent_wm` — the same loop with the :class:`~textwm.envs.simulator.Simulator` as the
  env (:class:`~textwm.envs.sciworld.sim.SciWorldEpisode`); score and termination from the trajectory
  alone (``SciWorldEpisode.outcome``, as in RL training); WM failures end the episode as ``wm_error``.
* :func:`replay_in_real` — W2R: each WM episode's actions, in order, replayed in the real env from
  the same task's start; the real score is recorded.

Both loops follow the RL scheduler's turn rules (:mod:`textwm.envs.sciworld.rl`): replies parsed by
``parse_action``; after an unparseable reply the env is not stepped and the agent gets the same format
hint as in training (``INVALID_REPLY_HINT``); 3 in a row end the episode.

Conversations start from the RL row's messages (what the RL trainer feeds the agent). In the real
env, when a row carries its baked start (``sim_task``) and the env's reset text differs from it
(Mendelian-genetics tasks are random across loads), the first user message is rebuilt from the real
reset and the record says ``start_rebuilt``.
"""

from __future__ import annotations

import logging
import multiprocessing
import time
from collections import Counter, deque
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from tqdm.auto import tqdm

from textwm.data.jsonl import DataError, read_jsonl
from textwm.envs.protocol import EnvError
from textwm.envs.sciworld.agent import (
    AGENT_SYSTEM_PROMPT,
    DEFAULT_MAX_TURNS,
    first_user_message,
    parse_action,
    row_messages,
    task_from_row,
)
from textwm.envs.sciworld.env import DEFAULT_SIMPLIFICATION, DEFAULT_STEP_LIMIT, parse_task_id
from textwm.envs.sciworld.reward import SUCCESS_SCORE, UNPARSEABLE_STREAK_LIMIT, WRONG_FOCUS_SCORE
from textwm.envs.sciworld.rl import INVALID_REPLY_HINT
from textwm.envs.sciworld.sim import SciWorldEpisode
from textwm.envs.sciworld.tracker import Task
from textwm.envs.simulator import Simulator
from textwm.eval.agents import Agent
from textwm.eval.episodes import EpisodeJob, EpisodeRecord, Started, Stepped, run_episodes, summarize

log = logging.getLogger(__name__)

#: Seconds between liveness checks while waiting for a worker's answer.
POLL_S = 0.2
#: The one session each fleet worker hosts (reset again for every episode: its JVM is reused).
SESSION = "eval"


class EvalInputError(ValueError):
    """Bad input to an evaluation (rows, task ids, endpoints); the message says what to fix."""


# --- rows and jobs --------------------------------------------------------------------------------


def _row_validator(need_sim_task: bool):
    def validate(obj: Any) -> dict[str, Any]:
        if not isinstance(obj, dict):
            raise DataError(f"an RL task row must be a JSON object, got {type(obj).__name__}")
        task_id = obj.get("task_id")
        if not isinstance(task_id, str):
            raise DataError("row has no string 'task_id' (e.g. 'boil_v11')", field="task_id")
        try:
            parse_task_id(task_id)
        except EnvError as exc:
            raise DataError(str(exc), field="task_id") from None
        row_messages(obj)
        if need_sim_task:
            try:
                task = task_from_row(obj)
            except (TypeError, ValueError) as exc:
                raise DataError(f"sim_task is malformed: {exc}", field="sim_task") from None
            if task is None:
                raise DataError("row has no 'sim_task': the WM mode needs the baked start state and goals; rows "
                                "from sciworld/build_wm_dataset.py carry them (the paper's released rows do not)",
                                field="sim_task")
            if not task.goals.get("milestones"):
                raise DataError("sim_task has no goal milestones, so no simulated episode could score; rebuild the "
                                "rows with sciworld/build_wm_dataset.py", field="sim_task.goals")
        return obj
    return validate


def load_rows(path: str, *, need_sim_task: bool = False, tasks: Sequence[str] = (), limit: int = 0
              ) -> list[dict[str, Any]]:
    """RL task rows (``rl_{split}.jsonl``), validated; only ``tasks`` (names) if given, the first ``limit`` if > 0.

    Raises:
        DataError: missing file or a bad row (file and line named); no row left after the task filter.
    """
    rows = read_jsonl(path, validate=_row_validator(need_sim_task)).rows
    if tasks:
        wanted = set(tasks)
        rows = [r for r in rows if parse_task_id(r["task_id"]).task in wanted]
        if not rows:
            raise DataError(f"no row of the tasks {', '.join(sorted(wanted))}", path=path)
    return rows[:limit] if limit > 0 else rows


def make_jobs(rows: Sequence[dict[str, Any]], *, repeats: int = 1, max_turns: int = 0) -> list[EpisodeJob]:
    """``repeats`` episodes per row; ``max_turns`` > 0 overrides the rows' own ``max_turns``."""
    counts = Counter(r["task_id"] for r in rows)
    jobs = []
    for i, row in enumerate(rows):
        base = row["task_id"] if counts[row["task_id"]] == 1 else f"{row['task_id']}@{i}"
        turns = max_turns if max_turns > 0 else int(row.get("max_turns") or DEFAULT_MAX_TURNS)
        for k in range(repeats):
            jobs.append(EpisodeJob(episode_id=f"{base}#{k}", task_id=row["task_id"],
                                   task=parse_task_id(row["task_id"]).task, messages=tuple(_start_messages(row)),
                                   max_turns=turns, payload=row))
    return jobs


def _start_messages(row: dict[str, Any]) -> list[dict[str, str]]:
    messages = [{"role": m["role"], "content": m["content"]} for m in row_messages(row)]
    if messages[0]["role"] != "system":
        messages.insert(0, {"role": "system", "content": AGENT_SYSTEM_PROMPT})
    return messages


def _simplification(row: dict[str, Any]) -> str | None:
    task = task_from_row(row)
    return task.simplification if task is not None else None


# --- the real env: a fleet of worker processes ----------------------------------------------------


@dataclass
class FleetReply:
    payload: dict[str, Any] | None = None
    #: Worker error kind (``bad_request``, ``env_failed``, ``worker_died``, ...) and message.
    kind: str | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class _WorkerDied(Exception):
    pass


def _exit_reason(process: Any) -> str:
    code = process.exitcode
    return "still running" if code is None else f"exit code {code}"


class RealEnvFleet:
    """``workers`` ScienceWorld worker processes, one JVM session each, driven synchronously over pipes.

    The workers are the env server's (:func:`~textwm.envs.sciworld.pool.worker_main`: JVM errors caught
    per session, the task catalog warmed at start). :meth:`call` sends one request to each addressed
    worker, then collects the answers, so the workers step in parallel. A worker that dies or does
    not answer within ``request_timeout_s`` is killed and replaced; its request gets an error reply.
    Use as a context manager, or :meth:`start` / :meth:`close`; :meth:`launch` starts the processes
    without waiting (they warm up while the caller does other work).
    """

    def __init__(self, workers: int = 2, *, step_limit: int = DEFAULT_STEP_LIMIT,
                 simplification: str = DEFAULT_SIMPLIFICATION, start_timeout_s: float = 300.0,
                 request_timeout_s: float = 120.0):
        from textwm.envs.sciworld.pool import PoolConfig

        self.config = PoolConfig(workers=workers, max_sessions_per_worker=1, step_limit=step_limit,
                                 simplification=simplification, start_timeout_s=start_timeout_s,
                                 request_timeout_s=request_timeout_s, log_level=logging.WARNING)
        self._ctx = multiprocessing.get_context("spawn")
        self._procs: list[Any] = [None] * workers
        self._conns: list[Any] = [None] * workers
        self._ready = [False] * workers
        self._launched: float | None = None
        self.restarts = 0

    @property
    def slots(self) -> int:
        return self.config.workers

    def __enter__(self) -> RealEnvFleet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def launch(self) -> RealEnvFleet:
        if self._launched is None:
            self._launched = time.perf_counter()
        for i in range(self.slots):
            if self._procs[i] is None:
                self._spawn(i)
        return self

    def start(self) -> RealEnvFleet:
        """Launch the workers (if not yet) and wait until every one is ready (~10 s: two JVM starts each)."""
        if all(self._ready):
            return self
        self.launch()
        waited = time.perf_counter()
        try:
            for i in range(self.slots):
                if not self._ready[i]:
                    self._await_ready(i)
        except BaseException:
            self.close()
            raise
        now = time.perf_counter()
        log.info("%d ScienceWorld worker(s) ready %.1f s after launch (waited %.1f s)", self.slots,
                 now - (self._launched or waited), now - waited)
        return self

    def _spawn(self, i: int) -> None:
        from textwm.envs.sciworld.pool import worker_main

        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(target=worker_main, args=(child, i, self.config), name=f"sciworld-eval-{i}",
                                 daemon=True)
        proc.start()
        child.close()
        self._procs[i], self._conns[i], self._ready[i] = proc, parent, False

    def _await_ready(self, i: int) -> None:
        proc, conn = self._procs[i], self._conns[i]
        if not conn.poll(self.config.start_timeout_s):
            proc.kill()
            raise EnvError(f"ScienceWorld worker {i} not ready after {self.config.start_timeout_s:g} s")
        try:
            conn.recv()
        except EOFError:
            proc.join(5.0)
            raise EnvError(f"ScienceWorld worker {i} exited during start-up ({_exit_reason(proc)}); see its log "
                           "lines above (is Java installed? `java -version`)") from None
        self._ready[i] = True

    def _replace(self, i: int, why: str) -> None:
        log.warning("ScienceWorld worker %d: %s; starting a replacement", i, why)
        proc, conn = self._procs[i], self._conns[i]
        if proc.is_alive():
            proc.kill()
        proc.join(5.0)
        conn.close()
        self._spawn(i)
        self._await_ready(i)
        self.restarts += 1

    def call(self, requests: dict[int, tuple[str, dict[str, Any]]]) -> dict[int, FleetReply]:
        """Send ``{worker: (op, args)}`` (ops ``reset`` / ``step`` of the worker) and collect every answer.

        Dead or hung workers are replaced after all answers are in (a replacement takes seconds and must
        not eat into the other workers' time limit)."""
        self.start()
        results: dict[int, FleetReply] = {}
        dead: dict[int, str] = {}
        sent = []
        for i, (op, args) in requests.items():
            try:
                self._conns[i].send((op, {"session_id": SESSION, **args}))
                sent.append(i)
            except OSError as exc:  # BrokenPipeError: the worker is gone
                dead[i] = f"worker {i} died before {op} ({type(exc).__name__})"
        deadline = time.monotonic() + self.config.request_timeout_s
        for i in sent:
            proc, conn = self._procs[i], self._conns[i]
            try:
                while not conn.poll(POLL_S):
                    if not proc.is_alive():
                        raise _WorkerDied(f"worker {i} died ({_exit_reason(proc)})")
                    if time.monotonic() > deadline:
                        raise _WorkerDied(f"worker {i} did not answer within {self.config.request_timeout_s:g} s")
                message = conn.recv()
            except (_WorkerDied, EOFError, OSError) as exc:
                dead[i] = str(exc) if isinstance(exc, _WorkerDied) else f"worker {i} died ({type(exc).__name__})"
                continue
            if message[0] == "ok":
                results[i] = FleetReply(payload=message[1])
            else:
                results[i] = FleetReply(kind=message[1], error=message[2])
        for i, why in dead.items():
            results[i] = FleetReply(kind="worker_died", error=why)
            self._replace(i, why)
        return results

    def reset(self, slot: int, task_id: str, simplification: str | None = None) -> FleetReply:
        return self.call({slot: ("reset", _reset_args(task_id, simplification))})[slot]

    def step(self, slot: int, action: str) -> FleetReply:
        return self.call({slot: ("step", {"action": action, "with_valid_actions": False})})[slot]

    def close(self) -> None:
        for i, (proc, conn) in enumerate(zip(self._procs, self._conns)):
            if proc is None:
                continue
            try:
                if self._ready[i] and proc.is_alive():
                    conn.send(("shutdown", {}))
                    if conn.poll(30.0):
                        conn.recv()
                    proc.join(10.0)
            except (OSError, EOFError) as exc:
                log.debug("worker %d did not shut down cleanly: %s", i, exc)
            if proc.is_alive():
                if self._ready[i]:
                    log.warning("ScienceWorld worker %d still running after shutdown; killing it", i)
                proc.kill()  # a worker still starting has no session to close
                proc.join(5.0)
            conn.close()
            self._procs[i], self._conns[i], self._ready[i] = None, None, False
        self._launched = None


def _reset_args(task_id: str, simplification: str | None) -> dict[str, Any]:
    return {"task_id": task_id, "simplification": simplification, "with_valid_actions": False}


def _end_reason(score: float) -> str:
    if score >= SUCCESS_SCORE:
        return "success"
    if score <= WRONG_FOCUS_SCORE:
        return "wrong_focus"
    return "env_done"  # the step limit, or a task the env completed below 100


def _check_start(reply: FleetReply, task_id: str) -> None:
    if reply.kind == "bad_request":  # an unknown task or variation: bad input, not a flaky env
        raise EvalInputError(f"the real env rejects task {task_id!r}: {reply.error}")


class RealBackend:
    """The real env behind the episode driver: one fleet worker per slot."""

    def __init__(self, fleet: RealEnvFleet):
        self.fleet = fleet
        self.slots = fleet.slots
        self._score: dict[int, float] = {}
        self._extra: dict[int, dict[str, Any]] = {}

    def start(self, jobs: dict[int, EpisodeJob]) -> dict[int, Started]:
        replies = self.fleet.call({s: ("reset", _reset_args(j.task_id, _simplification(j.payload)))
                                   for s, j in jobs.items()})
        out = {}
        for slot, reply in replies.items():
            job = jobs[slot]
            _check_start(reply, job.task_id)
            self._score[slot], self._extra[slot] = 0.0, {}
            if not reply.ok:
                out[slot] = Started(error=reply.error)
                continue
            messages = list(job.messages)
            baked = task_from_row(job.payload)
            observation, description = reply.payload["observation"], reply.payload["task_description"]
            if baked is not None and baked.initial_observation != observation:
                real = Task(task_id=job.task_id, task_description=description, initial_observation=observation,
                            initial_inventory="", room_map={})
                messages[-1] = {"role": "user", "content": first_user_message(real)}
                self._extra[slot]["start_rebuilt"] = True
            out[slot] = Started(messages=messages)
        return out

    def step(self, actions: dict[int, str]) -> dict[int, Stepped]:
        replies = self.fleet.call({s: ("step", {"action": a, "with_valid_actions": False}) for s, a in actions.items()})
        out = {}
        for slot, reply in replies.items():
            if not reply.ok:
                out[slot] = Stepped(None, self._score[slot], reason="env_error", error=reply.error)
                continue
            p = reply.payload
            self._score[slot] = float(p["score"])
            out[slot] = Stepped(p["observation"], float(p["score"]), done=bool(p["done"]),
                                reason=_end_reason(float(p["score"])) if p["done"] else None)
        return out

    def unparseable(self, slot: int) -> None:
        pass

    def release(self, slot: int) -> dict[str, Any]:
        self._score.pop(slot, None)
        return self._extra.pop(slot, {})


# --- the world model: the Simulator -----------------------------------------------------------------


class SimBackend:
    """The Simulator behind the episode driver; WM steps of one round run concurrently in threads.

    Each slot gets its own :class:`Simulator` sharing the given one's WM client and responder switch,
    so the counters never race; :meth:`stats` adds them up.
    """

    def __init__(self, simulator: Simulator, slots: int):
        self.slots = slots
        self._sims = [Simulator(simulator.wm, use_local=simulator.use_local) for _ in range(slots)]
        self._episodes: dict[int, SciWorldEpisode] = {}
        self._errors: dict[int, int] = {}
        self._pool = ThreadPoolExecutor(max_workers=slots, thread_name_prefix="sim")

    def start(self, jobs: dict[int, EpisodeJob]) -> dict[int, Started]:
        out = {}
        for slot, job in jobs.items():
            task = task_from_row(job.payload)
            if task is None:
                raise EvalInputError(f"row of {job.task_id} has no sim_task; the WM mode cannot start it")
            self._episodes[slot], self._errors[slot] = SciWorldEpisode.start(task), 0
            out[slot] = Started(messages=list(job.messages))
        return out

    def _step(self, slot: int, action: str) -> Stepped:
        episode = self._episodes[slot]
        result = self._sims[slot].step(episode, action)
        if result.error is not None:
            self._errors[slot] += 1
            return Stepped(None, episode.outcome().score, reason="wm_error", error=result.error)
        outcome = episode.outcome()
        return Stepped(result.observation, outcome.score, done=outcome.done, reason=outcome.reason,
                       source=result.source)

    def step(self, actions: dict[int, str]) -> dict[int, Stepped]:
        futures = {slot: self._pool.submit(self._step, slot, action) for slot, action in actions.items()}
        return {slot: fut.result() for slot, fut in futures.items()}

    def unparseable(self, slot: int) -> None:
        self._episodes[slot].unparseable()

    def release(self, slot: int) -> dict[str, Any]:
        episode = self._episodes.pop(slot, None)
        errors = self._errors.pop(slot, 0)
        if episode is None:
            return {}
        return {"local_steps": episode.sources.count("local"), "wm_steps": episode.sources.count("wm"),
                "wm_errors": errors}

    def stats(self) -> dict[str, int]:
        return {k: sum(s.stats.as_dict()[k] for s in self._sims) for k in ("local", "wm", "wm_errors")}

    def close(self) -> None:
        self._pool.shutdown(wait=True)


# --- evaluations ----------------------------------------------------------------------------------


@dataclass
class EvalResult:
    records: list[EpisodeRecord]
    summary: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)


def evaluate_agent_real(rows: Sequence[dict[str, Any]], agent: Agent, *, workers: int = 2, max_turns: int = 0,
                        repeats: int = 1, fleet: RealEnvFleet | None = None, progress: bool = True) -> EvalResult:
    """Play every row ``repeats`` times in the real env; ``fleet`` (started or not) is reused and left open,
    else one of ``workers`` processes is started and closed here."""
    jobs = make_jobs(rows, repeats=repeats, max_turns=max_turns)
    own = fleet is None
    fleet = fleet or RealEnvFleet(workers)
    try:
        fleet.start()
        started = time.perf_counter()
        records = run_episodes(jobs, agent, RealBackend(fleet), parse=parse_action, mode="real",
                               success_score=SUCCESS_SCORE, unparseable_limit=UNPARSEABLE_STREAK_LIMIT,
                               unparseable_note=INVALID_REPLY_HINT, progress=progress)
        seconds = time.perf_counter() - started
    finally:
        if own:
            fleet.close()
    summary = summarize(records)
    summary["start_rebuilt"] = sum(bool(r.extra.get("start_rebuilt")) for r in records)
    summary["seconds"] = round(seconds, 2)
    summary["worker_restarts"] = fleet.restarts
    return EvalResult(records, summary)


def evaluate_agent_wm(rows: Sequence[dict[str, Any]], agent: Agent, simulator: Simulator, *, concurrency: int = 8,
                      max_turns: int = 0, repeats: int = 1, progress: bool = True) -> EvalResult:
    """Play every row ``repeats`` times in the simulator (``concurrency`` episodes at once). Rows need ``sim_task``.

    Each slot steps its own copy of ``simulator`` (same WM client and responder switch); their counters are
    added to ``simulator.stats`` at the end."""
    for row in rows:
        _row_validator(True)(row)
    jobs = make_jobs(rows, repeats=repeats, max_turns=max_turns)
    backend = SimBackend(simulator, concurrency)
    started = time.perf_counter()
    try:
        records = run_episodes(jobs, agent, backend, parse=parse_action, mode="wm", success_score=SUCCESS_SCORE,
                               unparseable_limit=UNPARSEABLE_STREAK_LIMIT, unparseable_note=INVALID_REPLY_HINT,
                               progress=progress)
    finally:
        backend.close()
    summary = summarize(records)
    stats = backend.stats()
    simulator.stats.local += stats["local"]
    simulator.stats.wm += stats["wm"]
    simulator.stats.wm_errors += stats["wm_errors"]
    summary.update({"seconds": round(time.perf_counter() - started, 2), "local_steps": stats["local"],
                    "wm_steps": stats["wm"], "wm_step_errors": stats["wm_errors"],
                    "responder": simulator.use_local,
                    "wm_endpoint": getattr(simulator.wm, "endpoint", None) if simulator.wm is not None else None})
    return EvalResult(records, summary)


@dataclass
class _Replay:
    record: EpisodeRecord
    actions: list[str]
    simplification: str | None
    started: float = 0.0


def replay_in_real(wm_records: Sequence[EpisodeRecord], rows_by_task_id: dict[str, dict[str, Any]], *,
                   workers: int = 2, fleet: RealEnvFleet | None = None, progress: bool = True) -> EvalResult:
    """W2R: replay each WM episode's parsed actions in order in the real env (stopping when the env ends the
    episode); the record's score is the real score after the replay."""
    items = deque(
        _Replay(EpisodeRecord(mode="w2r", episode_id=r.episode_id, task_id=r.task_id, task=r.task, score=0.0,
                              success=False, done=False, turns=0, reason=""),
                [a for a in r.actions if a is not None], _simplification(rows_by_task_id.get(r.task_id, {})))
        for r in wm_records)
    records = {it.record.episode_id: it.record for it in items}
    own = fleet is None
    fleet = fleet or RealEnvFleet(workers)
    bar = tqdm(total=len(items), desc="w2r replays", unit="ep", disable=not progress, mininterval=2.0)
    live: dict[int, _Replay] = {}
    started = time.perf_counter()

    def finish(slot: int, reason: str, *, done: bool = False, error: str | None = None) -> None:
        it = live.pop(slot)
        rec = it.record
        rec.reason, rec.done, rec.error = reason, done, error
        rec.success = rec.score >= SUCCESS_SCORE
        rec.seconds = round(time.perf_counter() - it.started, 3)
        bar.update(1)

    try:
        fleet.start()
        while items or live:
            starting = {}
            for slot in range(fleet.slots):
                if slot not in live and items:
                    starting[slot] = items.popleft()
            replies = fleet.call({s: ("reset", _reset_args(it.record.task_id, it.simplification))
                                  for s, it in starting.items()}) if starting else {}
            for slot, reply in replies.items():
                it = live[slot] = starting[slot]
                it.started = time.perf_counter()
                _check_start(reply, it.record.task_id)
                if not reply.ok:
                    finish(slot, "env_error", error=f"start failed: {reply.error}")
                elif not it.actions:
                    finish(slot, "replay_end")
            steps = {s: ("step", {"action": it.actions[it.record.turns], "with_valid_actions": False})
                     for s, it in live.items()}
            for slot, reply in (fleet.call(steps) if steps else {}).items():
                rec = live[slot].record
                action = live[slot].actions[rec.turns]
                rec.turns += 1
                if not reply.ok:
                    finish(slot, "env_error", error=reply.error)
                    continue
                rec.score = float(reply.payload["score"])
                rec.actions.append(action)
                rec.observations.append(reply.payload["observation"])
                rec.scores.append(rec.score)
                if reply.payload["done"]:
                    finish(slot, _end_reason(rec.score), done=True)
                elif rec.turns == len(live[slot].actions):
                    finish(slot, "replay_end")
    finally:
        bar.close()
        if own:
            fleet.close()
    out = [records[r.episode_id] for r in wm_records]
    summary = summarize(out)
    summary["seconds"] = round(time.perf_counter() - started, 2)
    return EvalResult(out, summary)
