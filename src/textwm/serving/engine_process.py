"""The scheduler and the model in a child process: decode steps that do not wait on the event loop's GIL.

With a worker thread (:class:`~textwm.serving.workers.ThreadWorker`) the decode steps and the event loop
share one GIL: a step's host work (sampling, bookkeeping, launching a graph replay) waits while the loop
parses HTTP, templates and detokenises, and small models, whose steps are mostly host work, lose most of
their speed to it. :class:`ProcessWorker` spawns a child that loads the checkpoint and runs the same
scheduler (warm-up included) on its main thread; the server keeps HTTP, templating, tokenising and
detokenising. vLLM splits its API server from its engine core for the same reason.

The two talk over one pipe:

* server -> child: ``("work", wid, prompts, settings, layouts)``, ``("cancel", wid, rows)``, ``("stop", why)``;
  a reader thread in the child puts them on the scheduler's intake, so a big prompt never waits for a step;
* child -> server: ``("ready", info, snapshot)`` once warm, its counters after the warm-up (or
  ``("failed", traceback)``), then after every turn of
  the scheduler that produced events, ``("events", [(wid, event), ...], snapshot)``: the events of all its
  requests in one message, the worker's counters (:meth:`ServerMetrics.worker_snapshot`) and the last wid
  it has taken (the queue bound counts what it has not); last, ``("bye", ...)`` once it has stopped. A reader
  thread in the server hands each event to its request's ``post``, as the worker thread would.

If the child dies, or stops unasked, every request it held fails
(:class:`~textwm.serving.scheduler.DecodeFailed`, naming why), new ones are refused, and ``/health`` answers
503.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import multiprocessing
import queue
import signal
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any

from textwm.serving.engine_config import EngineConfig
from textwm.serving.metrics import ServerMetrics
from textwm.serving.scheduler import DecodeFailed, Intake, Work
from textwm.serving.streaming import RowsFailed

log = logging.getLogger(__name__)

#: Seconds the server waits for the child to load the checkpoint and warm up.
START_TIMEOUT_S = 1800.0
#: Seconds between the child's counter snapshots while no events flow (with events: one per message).
SNAPSHOT_EVERY_S = 0.5


@dataclass(frozen=True)
class ModelSource:
    """Where the child loads the checkpoint from (:func:`~textwm.models.checkpoint.load_model`'s arguments)."""

    path: str
    device: str = "auto"
    dtype: str = "auto"
    mask_token_id: int | None = None


class EngineProcessFailed(RuntimeError):
    """The engine process could not start, or exited."""


@dataclass
class _Sent:
    """A request the child holds: the server's Work and the rows not finished, failed or cancelled yet."""

    work: Work
    open_rows: set[int]


class ProcessWorker:
    """The scheduler in a child process (see the module docstring); the same surface as a thread worker.

    Args:
        source: the checkpoint the child loads.
        config: the engine's settings (the child builds its scheduler from them).
        metrics: the server's counters; the child's worker counters are copied in as they come.
    """

    continuous = True   # set from the child's answer at start()

    def __init__(self, source: ModelSource, config: EngineConfig, metrics: ServerMetrics):
        self.source, self.config, self.metrics = source, config, metrics
        self.info: dict[str, Any] = {}
        self._process: Any = None
        self._conn: Any = None
        self._reader: threading.Thread | None = None
        self._lock = threading.Lock()          # the tables below, the flags and the pipe's sending end
        self._sent: dict[int, _Sent] = {}
        self._wid_of: dict[int, int] = {}      # id(work) -> wid, while the child holds it
        self._ids = itertools.count()
        self._last_taken = -1                  # the last wid the child had taken at its latest snapshot
        self._base: dict[str, float] = {}      # the worker counters when this child started
        self._failure: str | None = None
        self._stopping = False

    # --- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        """Spawn the child and wait until it is warm (EngineProcessFailed with its traceback if it fails; the child
        is then gone, and a next start() spawns another)."""
        if self._process is not None:
            return
        context = multiprocessing.get_context("spawn")   # CUDA cannot be used in a forked child
        ours, theirs = context.Pipe(duplex=True)
        process = context.Process(target=child_main, name="textwm-engine",
                                  args=(theirs, self.source, self.config, logging.getLogger().level), daemon=True)
        process.start()
        theirs.close()
        try:
            self.info, snapshot = self._wait_ready(process, ours)
        except BaseException:
            process.kill()
            process.join(timeout=10)
            ours.close()
            raise
        with self._lock:
            self._process, self._conn = process, ours
            self._stopping, self._failure, self._last_taken = False, None, -1
            self._base = self.metrics.worker_totals()
        # The warm-up's graphs, compiles and seconds are on /metrics before the server says it is healthy, so that
        # a client's "before" reading does not count them as its own.
        self._deliver([], snapshot)
        self.continuous = bool(self.info["continuous"])
        log.info("engine process %d ready: %s scheduler", process.pid, self.info["scheduler"])
        self._reader = threading.Thread(target=self._read, name="textwm-engine-reader", daemon=True)
        self._reader.start()

    @staticmethod
    def _wait_ready(process: Any, conn: Any) -> tuple[dict[str, Any], dict[str, float]]:
        """The child's ``ready`` info and its counters after the warm-up."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while not conn.poll(1.0):
            if not process.is_alive():
                break   # its end of the pipe may stay open a moment after it exits
            if time.monotonic() > deadline:
                raise EngineProcessFailed(f"the engine process was not ready within {START_TIMEOUT_S:.0f} s")
        try:
            kind, *payload = conn.recv()   # ("ready", info, snapshot) or ("failed", traceback)
        except (EOFError, OSError):
            process.join(timeout=10)
            raise EngineProcessFailed(f"the engine process exited while starting (exit code {process.exitcode}); "
                                      f"the server log has its output") from None
        if kind != "ready":
            raise EngineProcessFailed(f"the engine process failed to start:\n{payload[0]}")
        info, snapshot = payload
        return info, snapshot

    def stop(self, error: BaseException) -> None:
        """Ask the child to stop (it fails its requests with ``error``) and wait for it; kill it after 30 s."""
        with self._lock:
            process, self._stopping = self._process, True
            if process is None:
                return
            with contextlib.suppress(OSError):   # already gone
                self._conn.send(("stop", str(error)))
        process.join(timeout=30)
        if process.is_alive():
            log.error("the engine process did not stop within 30 s; killing it")
            process.kill()
            process.join(timeout=10)
        if self._reader is not None:
            self._reader.join(timeout=10)
        self._fail_all(error)
        with self._lock:
            self._conn.close()
            self._process = None

    @property
    def failure(self) -> str | None:
        """Why the worker cannot serve (None: it can)."""
        return self._failure

    @property
    def depth(self) -> int:
        """Requests waiting: the child's queue at its latest snapshot plus those sent since."""
        with self._lock:
            return self._waiting()

    def _waiting(self) -> int:
        return int(self.metrics.worker_queue_depth) + sum(1 for wid in self._sent if wid > self._last_taken)

    # --- requests ----------------------------------------------------------------------------------

    def put(self, work: Work) -> None:
        """Send a request to the child: ``queue.Full`` when ``max_queue`` requests wait, DecodeFailed when the
        child is gone or stopping."""
        with self._lock:
            if self._failure is not None or self._stopping or self._process is None:
                raise DecodeFailed(self._failure or "the engine process is not running")
            if self._waiting() >= self.config.max_queue:
                raise queue.Full
            wid = next(self._ids)
            try:
                self._conn.send(("work", wid, work.prompts, work.settings, work.layouts))
            except OSError as exc:   # it died a moment ago: the reader is about to say so
                raise DecodeFailed(f"the engine process is gone ({exc})") from None
            self._sent[wid] = _Sent(work, set(range(len(work.prompts))))
            self._wid_of[id(work)] = wid

    def cancel(self, work: Work, rows: list[int]) -> None:
        with self._lock:
            wid = self._wid_of.get(id(work))
            if wid is None:
                return   # done already
            self._close_rows(wid, rows)
            if self._failure is None and not self._stopping:
                with contextlib.suppress(OSError):   # it died: its rows are gone anyway
                    self._conn.send(("cancel", wid, tuple(rows)))

    def _close_rows(self, wid: int, rows: Any) -> None:
        """Rows of ``wid`` the server expects nothing more of; the request leaves the table once none is left.
        Holds the lock."""
        sent = self._sent.get(wid)
        if sent is None:
            return
        sent.open_rows.difference_update(rows)
        if not sent.open_rows:
            del self._sent[wid]
            self._wid_of.pop(id(sent.work), None)

    def _read(self) -> None:
        """The reader thread: the child's events to their requests, its counters to the server's. However it ends
        (the child exits, a message it cannot take), the requests left fail and the worker reports why."""
        kind, why = None, None
        try:
            while kind != "bye":
                try:
                    kind, events, snapshot = self._conn.recv()
                except (EOFError, OSError):
                    break
                self._deliver(events, snapshot)
        except Exception as exc:   # reported below: no request may wait on a dead reader
            log.exception("the engine process's messages could not be read")
            why = f"the server could not read the engine process's messages ({type(exc).__name__}: {exc})"
        if self._stopping and why is None:
            return   # the server stopped it
        if why is None and kind == "bye":
            why = "the engine process stopped by itself (it was sent SIGTERM); restart the server"
        elif why is None:
            process = self._process
            process.join(timeout=10)
            why = f"the engine process exited (exit code {process.exitcode}); the server log has its error"
        self._failure = why
        log.error("%s", why)
        with self._lock:
            self.metrics.failed_requests += len({id(s.work) for s in self._sent.values()})
        self._fail_all(DecodeFailed(why))

    def _deliver(self, events: list[tuple[int, Any]], snapshot: dict[str, float]) -> None:
        with self._lock:
            self._last_taken = int(snapshot.pop("last_taken"))
        self.metrics.apply_worker_snapshot(snapshot, self._base)
        for wid, event in events:
            with self._lock:
                sent = self._sent.get(wid)
                if sent is None:
                    continue   # cancelled by the server meanwhile
                if isinstance(event, RowsFailed):
                    self._close_rows(wid, list(sent.open_rows))
                elif event.finished is not None:
                    self._close_rows(wid, [event.row])
            try:
                sent.work.post(event)
            except Exception:   # one request's delivery must not strand the others
                log.exception("could not hand the engine process's event to its request")

    def _fail_all(self, error: BaseException) -> None:
        with self._lock:
            sent, self._sent = list(self._sent.values()), {}
            self._wid_of.clear()
        for s in sent:
            try:
                s.work.post(RowsFailed(error))
            except Exception:   # its event loop is closed: logged, and the others still get theirs
                log.warning("could not fail a request of the engine process (%s)", error, exc_info=True)


# --- the child ------------------------------------------------------------------------------------------


def child_main(conn: Any, source: ModelSource, config: EngineConfig, log_level: int) -> None:
    """The engine process: load, build the scheduler (warm-up included), say ready, then serve until stopped.

    A Ctrl-C reaches it with the server's and is ignored: the server stops it after failing its requests. SIGTERM
    (a process-group kill, multiprocessing's clean-up at the server's exit) stops it after the turn under way,
    and a server that died closes the pipe, which stops it too."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=log_level or logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s [engine process]: %(message)s")
    child = _ChildLoop(conn, ServerMetrics())
    signal.signal(signal.SIGTERM, lambda *_: child.stop("the engine process was terminated"))
    try:
        # heavy: loads torch and transformers (only the child needs the weights)
        from textwm.generation.decoders import make_decoder
        from textwm.models.checkpoint import load_model
        from textwm.serving.workers import make_scheduler

        loaded = load_model(source.path, device=source.device, dtype=source.dtype,
                            mask_token_id=source.mask_token_id)
        child.scheduler = make_scheduler(loaded, config, child.intake, child.metrics, lambda: make_decoder(
            loaded.model, loaded.spec, pad_token_id=loaded.tokenizer.pad_token_id))
    except Exception:  # noqa: BLE001  (sent to the server, which raises it with this traceback)
        conn.send(("failed", traceback.format_exc()))
        conn.close()
        return
    if child.stopping is not None:
        conn.send(("failed", child.stopping))
        conn.close()
        return
    from textwm.serving.scheduler import ContinuousScheduler

    conn.send(("ready", {"continuous": isinstance(child.scheduler, ContinuousScheduler),
                         "scheduler": type(child.scheduler).__name__,
                         "vocab_size": int(loaded.model.get_input_embeddings().weight.shape[0])}, child.snapshot()))
    child.run()


class _ChildLoop:
    """The child's two threads: a reader that puts the server's messages on the intake, and the main thread,
    which runs the scheduler's turns and sends each turn's events in one message."""

    def __init__(self, conn: Any, metrics: ServerMetrics):
        self.conn, self.metrics = conn, metrics
        self.intake = Intake(0)   # unbounded: the server bounds what it sends
        self.scheduler: Any = None
        self.works: dict[int, Work] = {}   # wid -> Work, for cancels (left once its rows are all done)
        self.open: dict[int, set[int]] = {}
        self.last_taken = -1               # the last wid put on the intake
        self.outbox: list[tuple[int, Any]] = []
        self.stopping: str | None = None
        self.lock = threading.Lock()   # works, open and last_taken, shared by the reader and the main thread

    def stop(self, why: str) -> None:
        self.stopping = self.stopping or why

    def run(self) -> None:
        from textwm.serving.workers import run_turn

        reader = threading.Thread(target=self._read, name="textwm-engine-intake", daemon=True)
        reader.start()
        last_snapshot = 0.0
        while self.stopping is None:
            run_turn(self.scheduler, self.metrics)   # idle: waits on the intake, at most IDLE_POLL_S
            now = time.monotonic()
            if self.outbox or now - last_snapshot > SNAPSHOT_EVERY_S:
                self._flush("events")
                last_snapshot = now
        self.scheduler.shutdown(DecodeFailed(self.stopping))
        self._flush("bye")
        self.conn.close()

    def snapshot(self) -> dict[str, float]:
        """The worker's counters now (:meth:`ServerMetrics.worker_snapshot`) and the last wid taken."""
        self.metrics.worker_cpu_seconds = time.thread_time()   # called from the main thread, the worker
        with self.lock:   # the queue and the last wid taken, as of one moment
            depth, last = self.intake.depth, self.last_taken
        return {**self.metrics.worker_snapshot(queue_depth=depth), "last_taken": last}

    def _flush(self, kind: str) -> None:
        events, self.outbox = self.outbox, []
        snapshot = self.snapshot()
        try:
            self.conn.send((kind, events, snapshot))
        except OSError:   # the server is gone: nothing to serve
            self.stop("the server went away")

    def _post(self, wid: int, event: Any) -> None:
        """A Work's ``post`` in the child: the event goes out with the turn's message."""
        self.outbox.append((wid, event))
        with self.lock:
            rows = self.open.get(wid)
            if rows is None:
                return
            if isinstance(event, RowsFailed):
                rows.clear()
            elif event.finished is not None:
                rows.discard(event.row)
            if not rows:
                del self.open[wid], self.works[wid]

    def _read(self) -> None:
        while True:
            try:
                message = self.conn.recv()
            except (EOFError, OSError):
                self.stop("the server went away")
                return
            kind = message[0]
            if kind == "work":
                _, wid, prompts, settings, layouts = message
                work = Work(prompts=prompts, settings=settings, layouts=layouts,
                            post=lambda event, wid=wid: self._post(wid, event))
                with self.lock:
                    self.works[wid], self.open[wid] = work, set(range(len(prompts)))
                    self.intake.queue.put_nowait(work)
                    self.last_taken = wid
            elif kind == "cancel":
                _, wid, rows = message
                with self.lock:
                    work = self.works.get(wid)
                    if work is not None:
                        work.cancelled = work.cancelled | frozenset(rows)
                        self.open[wid].difference_update(rows)
                        if not self.open[wid]:
                            del self.open[wid], self.works[wid]
            elif kind == "stop":
                self.stop(message[1])
                return
