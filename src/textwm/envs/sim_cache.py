"""Simulator start states for RL rows that lack one, baked from the real env once and cached.

The paper's released ScienceWorld rows (``sciworld_rl_split.jsonl``) carry the agent's prompt and a WM
prompt, but no ``sim_task``: the start state and scoring goals a simulated episode needs. An env that
can bake one from its real env (:attr:`~textwm.envs.contract.EnvSpec.builds_sim_tasks`) does it here,
once per (task id, reset options), for every loader that needs it (GRPO's scheduler and launcher,
in-WM evaluation, the CLI below):

* **cache**: one JSON file per start state, ``<cache dir>/<env>/<task_id>__<options>.json``; the cache
  dir is ``$TEXTWM_SIM_CACHE``, else ``$TEXTWM_CACHE/sim_tasks``, else ``~/.cache/textwm/sim_tasks``.
  Files are written atomically; one built under another
  :meth:`~textwm.envs.contract.EnvSpec.sim_task_version` (env package, bake code) is rebuilt.
* **completion**: a row without ``sim_task`` gets one (a JSON string, as the dataset builder writes it);
  every other column stays as it is, the row's ``messages`` (the paper's agent prompt) included.
* **builds**: real env sessions (:meth:`~textwm.envs.contract.EnvSpec.open_session`), one per worker
  thread, reused across tasks; a tqdm bar on stderr.
* **failures**: an unknown task id, or an env that fails while baking, is a :class:`DataError` naming
  the file, the line and the task id; no start state is ever made up. Start states built before the
  failure stay cached, so a rerun goes on from there.

Complete a file explicitly (or just fill the cache, without ``--out``)::

    python -m textwm.envs.sim_cache --env sciworld --rows sciworld_rl_split.jsonl [--out completed.jsonl]

Tiny CPU run: ``--rows`` of one ``lifespan-longest-lived_v2`` row (about 10 s, one JVM).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from textwm.config import ConfigCLI, option
from textwm.data.jsonl import DataError, atomic_write, read_jsonl, write_jsonl
from textwm.envs.contract import EnvSpec
from textwm.envs.protocol import EnvError, EnvSession
from textwm.envs.registry import spec_from_cli

log = logging.getLogger(__name__)

#: Env var: the cache dir itself (wins over the two below).
CACHE_DIR_ENV = "TEXTWM_SIM_CACHE"
#: Env var: textwm's cache root (the start states go under ``sim_tasks/``).
CACHE_ROOT_ENV = "TEXTWM_CACHE"
DEFAULT_CACHE_ROOT = Path("~/.cache/textwm")
_UNSAFE = re.compile(r"[^A-Za-z0-9._=,-]")
#: Longest cache file name stem before the options part is replaced by its hash.
_MAX_STEM = 200


def cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$TEXTWM_SIM_CACHE``, else ``$TEXTWM_CACHE/sim_tasks``, else ``~/.cache/textwm/sim_tasks``."""
    environ = os.environ if environ is None else environ
    if environ.get(CACHE_DIR_ENV, "").strip():
        return Path(environ[CACHE_DIR_ENV].strip()).expanduser()
    root = environ.get(CACHE_ROOT_ENV, "").strip() or str(DEFAULT_CACHE_ROOT)
    return Path(root).expanduser() / "sim_tasks"


def options_key(options: Mapping[str, Any]) -> str:
    """The reset options as a file-name part: ``simplification=easy`` (``default`` for none)."""
    if not options:
        return "default"
    return _UNSAFE.sub("_", ",".join(f"{k}={options[k]}" for k in sorted(options)))


@dataclass
class CacheStats:
    """Start states this cache built, and those it found (per unique task id and options)."""

    built: int = 0
    cached: int = 0


@dataclass(frozen=True)
class _Need:
    """One start state to find or build, and the first row (line) that asked for it."""

    task_id: str
    options: dict[str, Any]
    line: int | None


class SimTaskCache:
    """The start-state cache of one env; thread-safe (one completion at a time per instance).

    Args:
        spec: the env.
        root: the cache dir (default: :func:`cache_dir`); this env's files are under ``root/<env>/``.
        workers: real envs baking at once (one session each).
        progress: a tqdm bar on stderr while building.
    """

    def __init__(self, spec: EnvSpec, root: str | os.PathLike | None = None, *, workers: int = 1,
                 progress: bool = True):
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.spec = spec
        self.root = Path(root).expanduser() if root else cache_dir()
        self.workers = workers
        self.progress = progress
        self.stats = CacheStats()
        self._lock = threading.Lock()
        #: Start states read by this instance: file -> (its mtime, the data). The GRPO scheduler asks for the same
        #: task for every generation of every step; a file is parsed again only when it changed.
        self._memo: dict[Path, tuple[int, Any]] = {}

    # --- files ---------------------------------------------------------------------------------------

    @property
    def env_dir(self) -> Path:
        return self.root / self.spec.name

    def path_of(self, task_id: str, options: Mapping[str, Any]) -> Path:
        stem = f"{_UNSAFE.sub('_', task_id)}__{options_key(options)}"
        if len(stem) > _MAX_STEM:
            stem = f"{_UNSAFE.sub('_', task_id)[:100]}__{hashlib.sha1(stem.encode()).hexdigest()}"
        return self.env_dir / f"{stem}.json"

    def read(self, task_id: str, options: Mapping[str, Any]) -> Any | None:
        """The cached start state (plain JSON data), None when absent, unreadable or of another version."""
        path = self.path_of(task_id, options)
        try:
            mtime = path.stat().st_mtime_ns
        except OSError:
            return None
        memo = self._memo.get(path)
        if memo is not None and memo[0] == mtime:
            return memo[1]
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            data, built_with = record["sim_task"], record.get("version", "")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("unreadable start-state cache file %s (%s): building it again", path, exc)
            return None
        if built_with != self.spec.sim_task_version():
            log.info("%s was built with %r, now %r: building it again", path, built_with, self.spec.sim_task_version())
            return None
        self._memo[path] = (mtime, data)
        return data

    def write(self, task_id: str, options: Mapping[str, Any], data: Any) -> Path:
        """Cache ``data`` atomically (a crash leaves the old file or none, never half a file)."""
        path = self.path_of(task_id, options)
        record = {"env": self.spec.name, "task_id": task_id, "reset_options": dict(options),
                  "version": self.spec.sim_task_version(), "built": time.strftime("%Y-%m-%dT%H:%M:%S"),
                  "sim_task": data}
        with atomic_write(path) as f:
            json.dump(record, f, ensure_ascii=False)
        return path

    # --- completion ------------------------------------------------------------------------------------

    def complete(self, rows: Sequence[Mapping[str, Any]], *, path: str | os.PathLike | None = None,
                 lines: Sequence[int] | None = None) -> list[dict[str, Any]]:
        """``rows`` (N) with every missing ``sim_task`` filled from the cache, built where absent; N rows out, in order.

        ``path`` / ``lines``: where the rows come from, for errors. Raises :class:`DataError` naming the row (its
        file and line when known) and the task id when a start state cannot be had.
        """
        with self._lock:
            keys, needs = [], {}
            for i, row in enumerate(rows):
                line = lines[i] if lines is not None else None
                need = self._need_of(row, path, line)
                key = None if need is None else (need.task_id, options_key(need.options))
                keys.append(key)
                if need is not None:
                    needs.setdefault(key, need)
            found = {key: self.read(need.task_id, need.options) for key, need in needs.items()}
            todo = {key: needs[key] for key, data in found.items() if data is None}
            self.stats.cached += len(needs) - len(todo)
            found.update(self._build(todo, path))
        return [dict(row) if key is None else {**row, "sim_task": json.dumps(found[key], ensure_ascii=False)}
                for row, key in zip(rows, keys)]

    def complete_row(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """One row (a scheduler's data_dict) completed, from the cache or built."""
        return self.complete([row])[0]

    def _need_of(self, row: Mapping[str, Any], path: Any, line: int | None) -> _Need | None:
        """What the row lacks (None: it has its start state); DataError at the row if it cannot be built."""
        try:
            if not isinstance(row, Mapping):
                raise DataError(f"an RL task row must be a JSON object, got {type(row).__name__}")
            if self.spec.sim_task_of(row) is not None:
                return None
            task_id = self.spec.task_id_of(row)
            if not self.spec.builds_sim_tasks:
                raise DataError(self.spec.missing_sim_task(task_id), field="sim_task")
            try:
                self.spec.validate_task(task_id)
            except EnvError as exc:
                raise DataError(f"task {task_id!r} has no start state to build: {exc}", field="task_id") from None
            return _Need(task_id, dict(self.spec.build_options_of(row)), line)
        except DataError as exc:
            raise exc.at(path, line) if path is not None or line is not None else exc from None

    def _build(self, todo: Mapping[Any, _Need], path: Any) -> dict[Any, Any]:
        """Bake every start state of ``todo`` in real env sessions (``workers`` at once), caching each."""
        if not todo:
            return {}
        log.info("%s: building %d simulator start state(s) from the real env (once; cached in %s)",
                 self.spec.name, len(todo), self.env_dir)
        local, sessions, opened = threading.local(), [], threading.Lock()

        def session() -> EnvSession:
            if getattr(local, "session", None) is None:
                local.session = self.spec.open_session()
                with opened:
                    sessions.append(local.session)
            return local.session

        def one(need: _Need) -> Any:
            data = self._bake(session, need, path)
            self.write(need.task_id, need.options, data)
            return data

        built: dict[Any, Any] = {}
        bar = tqdm(total=len(todo), desc=f"{self.spec.name} start states", unit="task", file=sys.stderr,
                   disable=not self.progress, mininterval=1.0)
        pool = ThreadPoolExecutor(max_workers=min(self.workers, len(todo)), thread_name_prefix="sim-cache")
        try:
            futures = {pool.submit(one, need): key for key, need in todo.items()}
            for future in as_completed(futures):
                built[futures[future]] = future.result()  # the first failure stops the completion
                self.stats.built += 1
                bar.update(1)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            bar.close()
            for s in sessions:
                s.close()
        return built

    def _bake(self, session: Any, need: _Need, path: Any) -> Any:
        """One start state, checked by reading it back as a row would; DataError at the row on any failure."""
        try:
            data = self.spec.build_sim_task(session(), need.task_id, need.options)
            sim_task = self.spec.sim_task_of({"task_id": need.task_id, "sim_task": json.dumps(data)})
            if sim_task is None:
                raise DataError("the env's bake returned no start state")
            self.spec.check_sim_task(sim_task)
            return data
        except Exception as exc:  # re-raised below, naming the row and the task
            what = exc.message if isinstance(exc, DataError) else f"{type(exc).__name__}: {exc}"
            raise DataError(f"cannot build the simulator start state of task {need.task_id!r} (reset options "
                            f"{need.options}) from the real {self.spec.title or self.spec.name} env: {what}",
                            path=path, line=need.line, field="task_id") from exc


def complete_file(cache: SimTaskCache, path: str | os.PathLike) -> list[dict[str, Any]]:
    """The rows of JSONL file ``path``, every missing start state filled (errors name the file and line)."""
    report = read_jsonl(path)
    return cache.complete(report.rows, path=path, lines=report.line_numbers)


# --- command line -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SimCacheConfig:
    """Complete RL task rows that lack a simulator start state (the paper's released rows) from the real env,
    once: each start state is cached, and GRPO and in-WM evaluation read the cache."""

    rows: str = option(help="RL task rows (JSONL), e.g. sciworld_rl_split.jsonl")
    out: str = option("", "write the completed rows here (default: only fill the cache)")
    cache_dir: str = option("", "the start-state cache (default: $TEXTWM_CACHE/sim_tasks, else "
                                "~/.cache/textwm/sim_tasks)", env=CACHE_DIR_ENV)
    workers: int = option(2, "real envs baking at once (ScienceWorld: one JVM, ~400 MB, each)")
    progress: bool = option(True, "a progress bar on stderr")

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError(f"--workers must be >= 1, got {self.workers}")
        if self.out and Path(self.out).resolve() == Path(self.rows).resolve():
            raise ValueError("--out must differ from --rows (the released file is read as it is)")


def main(argv: list[str] | None = None, *, env: str | None = None, prog: str | None = None) -> int:
    """``python -m textwm.envs.sim_cache --env NAME --rows FILE [--out FILE] [--cache-dir DIR] [--workers N]``."""

    argv = list(sys.argv[1:] if argv is None else argv)
    prog = prog or "python -m textwm.envs.sim_cache"
    spec = spec_from_cli(argv, env, prog, "--rows FILE [--out FILE]")
    if spec is None:
        return 2
    parsed = ConfigCLI(SimCacheConfig, prog=prog, key_values=False,
                       description=SimCacheConfig.__doc__).parse_or_report(argv)
    if parsed is None:
        return 2
    config = parsed[0]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)  # its JVM shutdown chatter, at INFO with tracebacks
    cache = SimTaskCache(spec, config.cache_dir or None, workers=config.workers, progress=config.progress)
    started = time.perf_counter()
    try:
        rows = complete_file(cache, config.rows)
        if config.out:
            write_jsonl(config.out, rows)
    except (DataError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    s = cache.stats
    print(f"{len(rows)} rows of {config.rows}: {s.built + s.cached} start states ({s.built} built, {s.cached} from "
          f"the cache) in {time.perf_counter() - started:.0f} s; cache {cache.env_dir}"
          + (f" -> {config.out}" if config.out else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
