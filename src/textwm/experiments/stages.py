"""One stage runner for the resumable pipelines (the demo, :mod:`textwm.demo`; the world-model comparison,
:mod:`textwm.experiments.wm_comparison`): named stages, one state file per run folder, resume, refusal of a folder
made with other settings.

A pipeline is a list of :class:`Stage` s, each a function of the pipeline's run that returns a JSON-able mapping.
The runner keeps ``<out>/state.json``, written atomically (a temporary file renamed over it) after every stage::

    {"format": "textwm-stages/1", "pipeline": "demo",
     "config": {... every setting of the run that wrote it last ...},
     "stages": {"data": {"status": "done", "seconds": 12.5, "result": {...}},
                "train": {"status": "failed", "seconds": 3.0, "error": "ValueError: ..."}}}

A re-run skips the stages done (unless a stage is ``always`` run, as a report is), runs a failed one again, and
refuses a folder whose saved settings differ from the run's in one that changes results, naming each change. A
pipeline may accept some changes by naming, with :class:`Redo`, the stages they invalidate: those are run again, the
rest kept. A failed stage is recorded with its error and seconds, and its exception goes on up: the run stops there.
A pipeline's state file from before this format is converted once (:class:`Legacy`).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from textwm.data.jsonl import read_json, write_json

#: The one state file of a run folder.
STATE_FILE = "state.json"
#: What ``state.json``'s ``format`` says; a file without it is from before (:class:`Legacy`) or not ours.
FORMAT = "textwm-stages/1"
DONE, FAILED = "done", "failed"


class StateError(ValueError):
    """A run folder that cannot be resumed as asked; the message names the file or the settings and what to do."""


@dataclass(frozen=True)
class Stage:
    """One named step of a pipeline.

    ``work`` returns the stage's result, a JSON-able mapping (``None`` counts as ``{}``); ``after`` names the stages
    that must be done before it; an ``always`` stage runs on every run, done or not (a report of what is done)."""

    name: str
    work: Callable[[], Mapping[str, Any] | None]
    after: tuple[str, ...] = ()
    always: bool = False


@dataclass
class StageRecord:
    """What ``state.json`` holds of one stage: ``done`` with its result, or ``failed`` with its error."""

    status: str
    seconds: float
    result: dict[str, Any] | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if v is not None}

    @classmethod
    def from_json(cls, name: str, data: Any, path: Path) -> StageRecord:
        if not isinstance(data, dict) or data.get("status") not in (DONE, FAILED):
            raise StateError(f"{path}: stage {name!r} has no status done or failed ({data!r:.200}); use a fresh "
                             "--out or --fresh")
        return cls(status=data["status"], seconds=float(data.get("seconds") or 0.0), result=data.get("result"),
                   error=data.get("error"))


@dataclass(frozen=True)
class Redo:
    """A change of any of ``settings`` that a resume accepts: the stages ``stages`` matches are run again, the others
    kept. ``says`` is the line said when it applies, with ``{changes}`` (``name: old -> new``) and ``{stages}``."""

    settings: tuple[str, ...]
    stages: Callable[[str], bool]
    says: str


@dataclass(frozen=True)
class Legacy:
    """A pipeline's state file from before :data:`FORMAT` (``file`` in the run folder; ``state.json`` itself when
    the old file had that name) and ``convert``, which maps its JSON to ``{"config": ..., "stages": {name: record}}``
    (records as :meth:`StageRecord.to_json` writes them). The converted state replaces the old file."""

    file: str
    convert: Callable[[dict[str, Any]], dict[str, Any]]


def json_copy(value: Any, what: str) -> Any:
    """``value`` as it reads back from JSON (tuples become lists); ``TypeError`` naming ``what`` if it is not JSON."""
    try:
        return json.loads(json.dumps(value, allow_nan=True))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{what} is not JSON: {exc}") from None


class StageRunner:
    """Runs :class:`Stage` s under one run folder and keeps its ``state.json``.

    Args:
        out: the run folder (made if missing).
        pipeline: the pipeline's name, written in the state and in messages ("demo", "comparison").
        config: every setting of the run, as plain data (:func:`textwm.config.config_dict`).
        ignore: settings that do not change results (ports, the folder): a resume accepts other values.
        redo: settings a resume accepts by running the stages they invalidate again (:class:`Redo`).
        legacy: the pipeline's state file from before this format, converted once.
        fresh: delete the run folder first; refused for a folder that holds no state of this pipeline and is not
            empty (``--fresh --out .`` must not delete a checkout).
        echo: where progress lines go.
    """

    def __init__(self, out: str | Path, *, pipeline: str, config: Mapping[str, Any], ignore: Sequence[str] = (),
                 redo: Sequence[Redo] = (), legacy: Legacy | None = None, fresh: bool = False,
                 echo: Callable[[str], None] = print):
        self.out = Path(out)
        self.pipeline, self.ignore, self.redo, self.legacy, self.echo = pipeline, tuple(ignore), tuple(redo), legacy, echo
        self.config = json_copy(dict(config), "the run's config")
        self.state_file = self.out / STATE_FILE
        if fresh and self.out.exists():
            self._delete_for_fresh()
        self.out.mkdir(parents=True, exist_ok=True)
        self.records: dict[str, StageRecord] = {}
        saved = self._load()
        if saved is not None:
            self.records = {name: StageRecord.from_json(name, data, self.state_file)
                            for name, data in saved["stages"].items()}
            self._reconcile(saved.get("config") or {})

    # --- the state file --------------------------------------------------------------------------------------------

    def _delete_for_fresh(self) -> None:
        if self.state_file.is_file():
            raw = read_json(self.state_file)
            owner = raw.get("pipeline") if isinstance(raw, dict) and raw.get("format") == FORMAT else None
            if owner != self.pipeline and not (owner is None and self.legacy and self.legacy.file == STATE_FILE):
                raise StateError(f"--fresh: {self.state_file} is not the state of a {self.pipeline} run; not deleting "
                                 f"{self.out}")
        elif not (self.legacy and (self.out / self.legacy.file).is_file()) and any(self.out.iterdir()):
            raise StateError(f"--fresh: {self.out} is not a {self.pipeline} run folder (no {STATE_FILE}) and not "
                             "empty; not deleting it")
        shutil.rmtree(self.out)

    def _load(self) -> dict[str, Any] | None:
        """The saved state (converted from the legacy file, which it then replaces), or None in a new folder."""
        legacy = self.legacy
        if self.state_file.is_file():
            raw = read_json(self.state_file)
            if isinstance(raw, dict) and raw.get("format") == FORMAT:
                if raw.get("pipeline") != self.pipeline:
                    raise StateError(f"{self.state_file} is the state of a {raw.get('pipeline')} run, not of a "
                                     f"{self.pipeline}; use another --out")
                if not isinstance(raw.get("stages"), dict):
                    raise StateError(f"{self.state_file}: no stages mapping; use a fresh --out or --fresh")
                return raw
            if legacy is None or legacy.file != STATE_FILE:
                raise StateError(f"{self.state_file} is not a {self.pipeline} state file of format {FORMAT} (format "
                                 f"{raw.get('format') if isinstance(raw, dict) else None!r}); use a fresh --out")
        elif legacy is None or not (self.out / legacy.file).is_file():
            return None
        return self._convert(legacy)

    def _convert(self, legacy: Legacy) -> dict[str, Any]:
        """The state of the legacy file in the current format, written as ``state.json`` (the old file removed)."""
        path = self.out / legacy.file
        try:
            converted = legacy.convert(read_json(path))
            converted = {"format": FORMAT, "pipeline": self.pipeline, "config": dict(converted["config"]),
                         "stages": dict(converted["stages"])}
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise StateError(f"{path}: a {self.pipeline} state of an older format that could not be read "
                             f"({type(exc).__name__}: {exc}); use a fresh --out") from None
        write_json(self.state_file, converted)
        if path != self.state_file:
            path.unlink()
        self.echo(f"{path}: converted to the current state format ({self.state_file})")
        return converted

    def _reconcile(self, saved: Mapping[str, Any]) -> None:
        """Refuse a saved config that differs in a setting that changes results; apply the :class:`Redo` rules."""
        keys = [*self.config, *(k for k in saved if k not in self.config)]
        changed = {k: f"{k}: {saved.get(k)!r} -> {self.config.get(k)!r}" for k in keys
                   if k not in self.ignore and saved.get(k) != self.config.get(k)}
        accepted = {name for rule in self.redo for name in rule.settings}
        if set(changed) - accepted:
            raise StateError(f"{self.out} holds a {self.pipeline} with other settings ({', '.join(changed.values())}); "
                             "use --fresh or another --out")
        for rule in self.redo:
            changes = [changed[k] for k in rule.settings if k in changed]
            if changes:
                redone = [name for name in self.records if rule.stages(name)]
                for name in redone:
                    del self.records[name]
                self.echo(rule.says.format(changes=", ".join(changes), stages=", ".join(redone) or "nothing"))

    def save(self) -> None:
        """Write ``state.json`` atomically: a reader sees the previous state or this one, never a part."""
        write_json(self.state_file, {"format": FORMAT, "pipeline": self.pipeline, "config": self.config,
                                     "stages": {name: r.to_json() for name, r in self.records.items()}})

    # --- what is done --------------------------------------------------------------------------------------------

    def is_done(self, name: str) -> bool:
        record = self.records.get(name)
        return record is not None and record.status == DONE

    @property
    def results(self) -> dict[str, dict[str, Any]]:
        """Every stage done, by name: its result."""
        return {name: r.result or {} for name, r in self.records.items() if r.status == DONE}

    def record(self, name: str, result: Mapping[str, Any] | None, seconds: float) -> dict[str, Any]:
        """Record ``name`` done with ``result`` (as it reads back from JSON, which is returned) and save the state."""
        kept = json_copy(dict(result or {}), f"the result of stage {name}")
        self.records[name] = StageRecord(DONE, round(seconds, 1), result=kept)
        self.save()
        return kept

    def record_failure(self, name: str, error: str, seconds: float) -> None:
        """Record ``name`` failed with ``error`` and save the state (its result of an earlier run is dropped)."""
        self.records[name] = StageRecord(FAILED, round(seconds, 1), error=error)
        self.save()

    # --- running -----------------------------------------------------------------------------------------------------

    def run_stage(self, stage: Stage, *, label: str = "") -> dict[str, Any]:
        """Run ``stage`` unless it is done (then its recorded result is returned); ``label`` prefixes its lines.

        Raises:
            StateError: a stage of ``after`` is not done.
            Exception: the stage's own, after it is recorded as failed.
        """
        earlier = self.records.get(stage.name)
        if earlier is not None and earlier.status == DONE and not stage.always:
            self.echo(f"{label}{stage.name}: done earlier, skipped ({earlier.seconds:.0f} s)")
            return earlier.result or {}
        missing = [name for name in stage.after if not self.is_done(name)]
        if missing:
            raise StateError(f"stage {stage.name} needs {', '.join(missing)} done first (state: {self.state_file})")
        if earlier is not None and earlier.status == FAILED:
            self.echo(f"{label}{stage.name}: failed in an earlier run ({earlier.error}); running it again")
        self.echo(f"{label}{stage.name} ...")
        started = time.perf_counter()
        try:
            result = stage.work()
            if result is not None and not isinstance(result, Mapping):
                raise TypeError(f"stage {stage.name} returned a {type(result).__name__}, not a mapping")
            kept = self.record(stage.name, result, time.perf_counter() - started)
        except BaseException as exc:     # KeyboardInterrupt and SystemExit (SIGTERM) too: recorded, then raised
            seconds = time.perf_counter() - started
            error = f"{type(exc).__name__}: {exc}"
            self.record_failure(stage.name, error, seconds)
            self.echo(f"{label}{stage.name}: FAILED after {seconds:.0f} s: {error} (recorded in {self.state_file}; "
                      "a re-run runs it again)")
            raise
        self.echo(f"{label}{stage.name}: {self.records[stage.name].seconds:.0f} s")
        return kept

    def run(self, stages: Iterable[Stage], *, numbered: bool = False) -> None:
        """Each of ``stages`` in order (:meth:`run_stage`); ``numbered`` prefixes each line with ``[i/n]``."""
        stages = list(stages)
        for i, stage in enumerate(stages, 1):
            self.run_stage(stage, label=f"[{i}/{len(stages)}] " if numbered else "")
