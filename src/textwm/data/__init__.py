"""Chat data layer: row schema, JSONL I/O with line-numbered errors, atomic writes, converters."""

from textwm.data.jsonl import (
    MAX_ROW_BYTES,
    DataError,
    ReadReport,
    atomic_write,
    iter_jsonl,
    read_json,
    read_jsonl,
    write_json,
    write_jsonl,
)
from textwm.data.schema import ROLES, parse_messages, split_prompt_target, validate_row, validate_target_row

__all__ = [
    "MAX_ROW_BYTES",
    "ROLES",
    "DataError",
    "ReadReport",
    "atomic_write",
    "iter_jsonl",
    "parse_messages",
    "read_json",
    "read_jsonl",
    "split_prompt_target",
    "validate_row",
    "validate_target_row",
    "write_json",
    "write_jsonl",
]
