"""Load chat rows from a Hugging Face dataset repo id, a local file or a local folder.

Local ``.jsonl`` files go through :func:`textwm.data.jsonl.read_jsonl` (line-numbered errors);
everything else (hub ids, parquet/json/csv files, folders) through ``datasets.load_dataset``.
A hub id that cannot be reached fails with a message that says so and what to do offline.
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from textwm._optional import require
from textwm.data.jsonl import DataError, OnError, read_jsonl
from textwm.data.schema import Row, validate_row

log = logging.getLogger(__name__)

#: File suffixes ``datasets`` can read, mapped to its builder name.
_BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv", ".arrow": "arrow"}


class HubUnreachableError(RuntimeError):
    """A hub dataset id was given but the Hugging Face Hub could not be reached."""


@dataclass
class LoadedSplit:
    name: str
    rows: list[Row]
    skipped: int


def is_local(source: str) -> bool:
    return Path(source).exists()


def _validate_all(records: Iterable[Any], *, origin: str, on_error: OnError, require_target: bool
                  ) -> tuple[list[Row], int]:
    rows, skipped = [], 0
    for i, rec in enumerate(records):
        try:
            rows.append(validate_row(dict(rec) if not isinstance(rec, list) else rec, require_target=require_target))
        except DataError as exc:
            err = DataError(exc.message, path=origin, line=None, field=f"row {i}: {exc.field or 'row'}")
            if on_error == "fail":
                raise err from None
            skipped += 1
            log.warning("%s", err)
    return rows, skipped


def _load_with_datasets(source: str, *, config: str | None, split: str, token: str | bool | None) -> Any:
    datasets = require("datasets", extra="training")
    local = Path(source)
    try:
        if local.is_file():
            builder = _BUILDERS.get(local.suffix.lower())
            if builder is None:
                raise DataError(f"unsupported file type {local.suffix!r}; use one of {', '.join(_BUILDERS)}",
                                path=local)
            return datasets.load_dataset(builder, data_files=str(local), split=split)
        if local.is_dir():
            return datasets.load_dataset(str(local), config, split=split)
        return datasets.load_dataset(source, config, split=split, token=token)
    except DataError:
        raise
    except (ConnectionError, TimeoutError) as exc:
        if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False"):
            hint = "HF_HUB_OFFLINE is set and the dataset is not in the local cache"
        else:
            hint = "offline? Or set HF_HUB_OFFLINE=1 to read a copy already in the local cache"
        raise HubUnreachableError(
            f"could not reach the Hugging Face Hub for dataset {source!r} ({type(exc).__name__}: {exc}); "
            f"{hint}. Pass a local .jsonl/.parquet file or a folder as --source instead.") from exc
    except ValueError as exc:  # datasets raises ValueError for an unknown split / config
        raise DataError(f"{exc}", path=source) from exc
    except Exception as exc:
        name = type(exc).__name__
        if "NotFound" in name or "Gated" in name or "Repository" in name:
            raise DataError(f"dataset not found or not accessible ({name}: {exc}); check the id, "
                            "or set HF_TOKEN for a private/gated dataset", path=source) from exc
        if "Offline" in name or "LocalEntryNotFound" in name:
            raise HubUnreachableError(
                f"dataset {source!r} is not in the local cache and the Hub is not reachable ({name}). "
                "Pass a local file or folder instead.") from exc
        raise


def load_split(source: str, *, split: str = "train", config: str | None = None, token: str | bool | None = None,
               on_error: OnError = "fail", require_target: bool = True) -> LoadedSplit:
    """Load one split of chat rows from a hub id, a local file or a local folder.

    Args:
        source: ``org/name`` on the Hub, a local file (``.jsonl``, ``.json``, ``.parquet``, ...) or a
            folder ``datasets`` understands (e.g. holding ``train.jsonl`` and ``test.jsonl``).
        split: split name (ignored for a single local ``.jsonl`` file, which is one split).
        config: dataset config name (hub/folder sources).
        token: hub token (default: ``$HF_TOKEN`` if set; ``False`` sends none).
    """
    token = token if token is not None else os.environ.get("HF_TOKEN")
    path = Path(source)
    if path.is_file() and path.suffix.lower() == ".jsonl":
        validator = (lambda obj: validate_row(obj, require_target=True)) if require_target else validate_row
        report = read_jsonl(path, validate=validator, on_error=on_error)
        return LoadedSplit(name=split, rows=report.rows, skipped=len(report.skipped))
    ds = _load_with_datasets(source, config=config, split=split, token=token)
    if "messages" not in ds.column_names:
        raise DataError(f"split {split!r} has no 'messages' column (columns: {', '.join(ds.column_names)})",
                        path=source)
    rows, skipped = _validate_all(ds, origin=f"{source}[{split}]", on_error=on_error, require_target=require_target)
    if not rows:
        raise DataError(f"split {split!r} has no valid rows", path=source)
    return LoadedSplit(name=split, rows=rows, skipped=skipped)


def holdout_split(rows: list[Row], test_fraction: float, seed: int) -> tuple[list[Row], list[Row]]:
    """Deterministic random train/test split of ``rows`` (used when a source has no test split)."""
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test fraction must be in (0, 1), got {test_fraction}")
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    n_test = max(1, round(len(rows) * test_fraction))
    test_idx = set(order[:n_test])
    train = [r for i, r in enumerate(rows) if i not in test_idx]
    test = [r for i, r in enumerate(rows) if i in test_idx]
    return train, test
