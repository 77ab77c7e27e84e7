"""JSONL reading with line-numbered errors, and atomic writes.

Every error names the file and the 1-based line it comes from. A reader either fails on the
first bad row (``on_error="fail"``) or skips bad rows and reports how many it skipped and why
(``on_error="skip"``); it never drops a row silently. Writers go through a temporary file in the
destination folder and an ``os.replace``, so a crash never leaves a half-written output behind.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

log = logging.getLogger(__name__)

#: Longest accepted JSONL line. A world-model transition is a few kB to a few hundred kB; a
#: line beyond this is almost certainly a broken export (a whole file on one line, a binary
#: blob) and reading it would only exhaust memory further down the pipeline.
MAX_ROW_BYTES = 16 * 1024 * 1024

#: How many skipped-row messages a reader logs in full before summarising.
MAX_LOGGED_ERRORS = 5

OnError = Literal["fail", "skip"]


class DataError(ValueError):
    """A bad input row or file. ``str(err)`` reads ``path:line: field: what is wrong``."""

    def __init__(self, message: str, *, path: str | os.PathLike | None = None, line: int | None = None,
                 field: str | None = None):
        self.message = message
        self.path = None if path is None else str(path)
        self.line = line
        self.field = field
        super().__init__(self._render())

    def _render(self) -> str:
        where = self.path or "<input>"
        if self.line is not None:
            where += f":{self.line}"
        what = f"{self.field}: {self.message}" if self.field else self.message
        return f"{where}: {what}"

    def at(self, path: str | os.PathLike, line: int | None) -> DataError:
        """Return a copy located at ``path:line`` (used when a row validator raised it)."""
        return DataError(self.message, path=path, line=line, field=self.field)


@dataclass
class ReadReport:
    """What a read saw: rows kept and every row skipped, with its reason."""

    path: str
    rows: list[Any] = field(default_factory=list)
    skipped: list[DataError] = field(default_factory=list)
    #: 1-based line number of each kept row, parallel to ``rows``.
    line_numbers: list[int] = field(default_factory=list)

    def log_skips(self) -> None:
        if not self.skipped:
            return
        log.warning("%s: skipped %d bad row(s) of %d", self.path, len(self.skipped),
                    len(self.skipped) + len(self.rows))
        for err in self.skipped[:MAX_LOGGED_ERRORS]:
            log.warning("  %s", err)
        if len(self.skipped) > MAX_LOGGED_ERRORS:
            log.warning("  ... and %d more", len(self.skipped) - MAX_LOGGED_ERRORS)


def _read_line(f: IO[bytes], max_row_bytes: int) -> tuple[bytes | None, bool]:
    """Read one line without ever holding more than ``max_row_bytes`` of it.

    Returns ``(line, too_long)``; ``line`` is None at end of file. A too-long line is consumed
    to its end so that the next call starts on the next line.
    """
    chunk = f.readline(max_row_bytes + 1)
    if not chunk:
        return None, False
    if len(chunk) <= max_row_bytes or chunk.endswith(b"\n"):
        return chunk, False
    while chunk and not chunk.endswith(b"\n"):  # drain the rest of the oversized line
        chunk = f.readline(1 << 20)
    return b"", True


def iter_jsonl(path: str | os.PathLike, *, max_row_bytes: int = MAX_ROW_BYTES
               ) -> Iterator[tuple[int, Any | DataError]]:
    """Yield ``(line_number, value)`` for each non-blank line of a JSONL file.

    ``value`` is the parsed JSON, or a :class:`DataError` describing why that line is bad
    (not UTF-8, not JSON, too long). Blank lines are skipped silently: they carry no row.

    Raises:
        DataError: the file does not exist or is not a regular file.
    """
    p = Path(path)
    if not p.exists():
        raise DataError("file not found", path=p)
    if not p.is_file():
        raise DataError("not a regular file", path=p)
    with open(p, "rb") as f:
        line_no = 0
        while True:
            raw, too_long = _read_line(f, max_row_bytes)
            if raw is None:
                return
            line_no += 1
            if too_long:
                yield line_no, DataError(
                    f"line longer than {max_row_bytes:,} bytes (MAX_ROW_BYTES); refusing to load it",
                    path=p, line=line_no)
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                yield line_no, DataError(f"not valid UTF-8 (byte {exc.start} of the line: {exc.reason})",
                                         path=p, line=line_no)
                continue
            if not text.strip():
                continue
            try:
                yield line_no, json.loads(text)
            except json.JSONDecodeError as exc:
                hint = " (truncated line?)" if "Unterminated" in exc.msg or "Expecting" in exc.msg else ""
                yield line_no, DataError(f"invalid JSON at column {exc.colno}: {exc.msg}{hint}",
                                         path=p, line=line_no)


def iter_checked(path: str | os.PathLike, validate: Callable[[Any], Any] | None, *, on_error: OnError = "fail",
                 skipped: list[DataError], max_row_bytes: int = MAX_ROW_BYTES) -> Iterator[tuple[int, Any]]:
    """``(line_number, validated row)`` of a JSONL file; a bad row raises (``on_error="fail"``) or is appended to
    ``skipped`` with its location (``"skip"``)."""
    for line_no, value in iter_jsonl(path, max_row_bytes=max_row_bytes):
        if not isinstance(value, DataError) and validate is not None:
            try:
                value = validate(value)
            except DataError as exc:
                value = exc.at(path, line_no)
        if isinstance(value, DataError):
            if on_error == "fail":
                raise value
            skipped.append(value)
            continue
        yield line_no, value


def read_jsonl(path: str | os.PathLike, *, validate: Callable[[Any], Any] | None = None,
               on_error: OnError = "fail", max_row_bytes: int = MAX_ROW_BYTES,
               allow_empty: bool = False) -> ReadReport:
    """Read a whole JSONL file, validating each row.

    Args:
        path: the file.
        validate: maps a parsed row to the row to keep; raises :class:`DataError` (without a
            location: it is added here) for a bad row.
        on_error: ``"fail"`` raises on the first bad row; ``"skip"`` collects it in
            ``report.skipped`` and logs a summary.
        allow_empty: accept a file with no rows. Off by default: an empty training or
            prediction file is almost always a mistake upstream.

    Raises:
        DataError: a bad row (``on_error="fail"``), an empty file, or no valid row at all.
    """
    if on_error not in ("fail", "skip"):
        raise ValueError(f"on_error must be 'fail' or 'skip', got {on_error!r}")
    report = ReadReport(path=str(path))
    for line_no, value in iter_checked(path, validate, on_error=on_error, skipped=report.skipped,
                                       max_row_bytes=max_row_bytes):
        report.rows.append(value)
        report.line_numbers.append(line_no)
    report.log_skips()
    if not report.rows and not allow_empty:
        if report.skipped:
            raise DataError(f"no valid rows: all {len(report.skipped)} row(s) were bad; first: "
                            f"{report.skipped[0]}", path=path)
        raise DataError("file is empty: no JSON rows", path=path)
    return report


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open ``path`` for writing so that it appears complete or not at all.

    Writes go to a temporary file beside ``path``; on success it is flushed, fsynced and renamed
    over ``path``; on any exception (or KeyboardInterrupt) it is removed and ``path`` is left as
    it was.
    """
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode, encoding=None if "b" in mode else encoding) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def dumps_row(row: Any) -> str:
    """One JSONL line (no newline); non-ASCII kept as is, as the paper's files do."""
    return json.dumps(row, ensure_ascii=False)


def write_jsonl(path: str | os.PathLike, rows: Iterable[Any]) -> int:
    """Atomically write ``rows`` as JSONL; returns the number of rows written."""
    n = 0
    with atomic_write(path) as f:
        for row in rows:
            f.write(dumps_row(row))
            f.write("\n")
            n += 1
    return n


def write_json(path: str | os.PathLike, obj: Any, *, indent: int | None = 2) -> None:
    """Atomically write one JSON document."""
    with atomic_write(path) as f:
        json.dump(obj, f, ensure_ascii=False, indent=indent)
        f.write("\n")


def read_json(path: str | os.PathLike) -> Any:
    """Read one JSON document; errors name the file, line and column."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError("file not found", path=p) from None
    except UnicodeDecodeError as exc:
        raise DataError(f"not valid UTF-8 (byte {exc.start}: {exc.reason})", path=p) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"invalid JSON at column {exc.colno}: {exc.msg}", path=p, line=exc.lineno) from None


#: The folder a result set is written into before it replaces the earlier set (:func:`write_file_set`).
PARTIAL_DIR = ".partial"


def write_file_set(folder: str | os.PathLike, writers: dict[str, Callable[[Path], Any]], *,
                   replaces: Sequence[str]) -> None:
    """Write one run's files into ``folder`` as a set: each ``writers[name](path)`` into ``folder/.partial/`` first,
    then every file of the earlier set (the ``replaces`` glob patterns: a split this run did not build included)
    removed and the new files moved in. An interrupted run leaves the earlier set whole beside a ``.partial``
    folder, which the next run clears; never new files beside old ones."""
    folder = Path(folder)
    partial = folder / PARTIAL_DIR
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    for name, write in writers.items():
        write(partial / name)
    for pattern in replaces:
        for old in folder.glob(pattern):
            if old.is_file():
                old.unlink()
    for name in writers:
        os.replace(partial / name, folder / name)
    partial.rmdir()
