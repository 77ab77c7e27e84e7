"""Converters between the chat row schema and the trainers' input formats.

=============  ===========================================================  ==========================
format         one JSONL line                                               consumed by
=============  ===========================================================  ==========================
``llamafactory`` ``{"messages": [{"role", "content"}, ...]}`` + an entry in  LlamaFactory (sharegpt,
               ``dataset_info.json`` beside the file                        OpenAI tags), SDAR's fork
``array``      ``[{"role", "content"}, ...]``                               WeDLM SFT, the paper's SDAR
                                                                            prepare_data output
``swift``      ``{"messages": [...], ...extra fields}``                      ms-swift (extra columns
                                                                            reach reward functions)
=============  ===========================================================  ==========================

Each converter is a pure function of one validated row; :func:`convert_file` streams a whole
file through one of them with line-numbered errors and an atomic write.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from textwm.data.jsonl import DataError, OnError, atomic_write, dumps_row, iter_checked, read_json, write_json
from textwm.data.schema import Row, parse_messages, plain_messages, validate_row

log = logging.getLogger(__name__)

Format = Literal["llamafactory", "array", "swift"]
FORMATS: tuple[str, ...] = ("llamafactory", "array", "swift")

#: LlamaFactory ``dataset_info.json`` tags for OpenAI-style role/content messages.
LLAMAFACTORY_TAGS = {
    "role_tag": "role",
    "content_tag": "content",
    "user_tag": "user",
    "assistant_tag": "assistant",
    "system_tag": "system",
    "observation_tag": "tool",
}


def to_llamafactory(row: Row) -> dict[str, Any]:
    """LlamaFactory sharegpt row: messages only, role/content only."""
    return {"messages": plain_messages(row["messages"])}


def to_message_array(row: Row) -> list[dict[str, str]]:
    """Bare message array (WeDLM SFT; only the last message is trained)."""
    return plain_messages(row["messages"])


def to_swift(row: Row) -> dict[str, Any]:
    """ms-swift row: messages as a list plus every extra field of the row."""
    return {**row, "messages": plain_messages(row["messages"])}


CONVERTERS: dict[str, Callable[[Row], Any]] = {
    "llamafactory": to_llamafactory,
    "array": to_message_array,
    "swift": to_swift,
}


def llamafactory_dataset_entry(file_name: str) -> dict[str, Any]:
    """The ``dataset_info.json`` entry that registers ``file_name`` (relative to ``dataset_dir``)."""
    return {
        "file_name": file_name,
        "formatting": "sharegpt",
        "columns": {"messages": "messages"},
        "tags": dict(LLAMAFACTORY_TAGS),
    }


def register_llamafactory_dataset(dataset_dir: str | os.PathLike, name: str, file_name: str) -> Path:
    """Add or replace ``name`` in ``<dataset_dir>/dataset_info.json`` (atomic; other entries kept).

    Raises:
        DataError: an existing ``dataset_info.json`` is not a JSON object.
    """
    info_path = Path(dataset_dir) / "dataset_info.json"
    info: dict[str, Any] = {}
    if info_path.exists():
        info = read_json(info_path)
        if not isinstance(info, dict):
            raise DataError("must be a JSON object mapping dataset names to entries", path=info_path)
    info[name] = llamafactory_dataset_entry(file_name)
    write_json(info_path, info)
    return info_path


def _passthrough_row(obj: Any) -> Row:
    if not isinstance(obj, list):
        raise DataError(f"--passthrough expects each row to be a JSON array of messages, got {type(obj).__name__}")
    return {"messages": parse_messages(obj)}


@dataclass
class ConversionReport:
    input: str
    output: str
    format: str
    rows_in: int = 0
    rows_out: int = 0
    skipped: list[DataError] = field(default_factory=list)
    dataset_info: str | None = None

    def summary(self) -> str:
        text = (f"{self.input}: {self.rows_in} row(s) read, {self.rows_out} written to {self.output} "
                f"({self.format}), {len(self.skipped)} skipped")
        if self.dataset_info:
            text += f"; registered in {self.dataset_info}"
        return text


def convert_file(input_path: str | os.PathLike, output_path: str | os.PathLike, *, fmt: Format = "llamafactory",
                 passthrough: bool = False, on_error: OnError = "fail", require_target: bool = True,
                 dataset_name: str | None = None) -> ConversionReport:
    """Convert a chat JSONL file to one trainer format.

    Args:
        input_path: rows as objects with ``messages`` (list or JSON string) or bare arrays.
        output_path: destination JSONL; written atomically (absent or complete, never partial).
        fmt: one of :data:`FORMATS`.
        passthrough: every input row must already be a bare message array; it is validated and
            copied in the target format.
        on_error: ``"fail"`` stops at the first bad row (nothing written); ``"skip"`` drops bad rows,
            counts them in the report and logs them with file and line.
        require_target: each row must end with an assistant message (true for SFT data).
        dataset_name: for ``llamafactory``: the name registered in ``dataset_info.json`` beside the
            output (default: the output file's stem).
    """
    if fmt not in CONVERTERS:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    convert = CONVERTERS[fmt]
    out = Path(output_path)
    if out.resolve() == Path(input_path).resolve():
        raise DataError("output path is the input path; write to a new file", path=out)
    report = ConversionReport(input=str(input_path), output=str(out), format=fmt)

    def check(obj: Any) -> Row:
        row = _passthrough_row(obj) if passthrough else validate_row(obj)
        if require_target:
            row = validate_row(row, require_target=True)
        return row

    with atomic_write(out) as f:
        for _, value in iter_checked(input_path, check, on_error=on_error, skipped=report.skipped):
            f.write(dumps_row(convert(value)))
            f.write("\n")
            report.rows_out += 1
        report.rows_in = report.rows_out + len(report.skipped)
        if report.rows_in == 0:
            raise DataError("file is empty: no JSON rows", path=input_path)
        if report.rows_out == 0:
            raise DataError(f"no valid rows: all {report.rows_in} row(s) were bad; first: {report.skipped[0]}",
                            path=input_path)
    if report.skipped:
        log.warning("%s: skipped %d bad row(s):", input_path, len(report.skipped))
        for err in report.skipped[:5]:
            log.warning("  %s", err)
    if fmt == "llamafactory":
        report.dataset_info = str(register_llamafactory_dataset(out.parent, dataset_name or out.stem, out.name))
    return report
