"""Text normalisation applied to both prediction and reference before any metric.

The rules (the same as the paper's scorers):

1. drop every ``<think>...</think>`` block (reasoning models emit one before the answer);
2. if a ``<tool_response>...</tool_response>`` wrapper is present, keep only its inside,
   otherwise drop stray ``<think>``/``<tool_response>`` tags;
3. strip surrounding whitespace;
4. if the result parses as JSON, re-serialise it with sorted keys and compact separators, so
   ``{"b": 2, "a": 1}`` and ``{"a":1,"b":2}`` normalise to the same string.
"""

from __future__ import annotations

import json
import re

THINK_BLOCK_RE = re.compile(r"<think>.*?</think>", re.DOTALL)
TOOL_RESPONSE_RE = re.compile(r"<tool_response>\s*(.*?)\s*</tool_response>", re.DOTALL)
STRAY_TAG_RE = re.compile(r"</?(?:tool_response|think)\s*>")


def strip_tags(text: str) -> str:
    """Rules 1-3: remove think blocks, unwrap a tool_response, drop stray tags, strip."""
    text = THINK_BLOCK_RE.sub("", text)
    wrapped = TOOL_RESPONSE_RE.search(text)
    if wrapped:
        return wrapped.group(1).strip()
    return STRAY_TAG_RE.sub("", text).strip()


def canonical_json(text: str) -> str:
    """Rule 4: the canonical compact JSON of ``text`` if it parses, else ``text`` stripped."""
    try:
        return json.dumps(json.loads(text), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    except (json.JSONDecodeError, TypeError, ValueError):
        return text.strip()


def normalize(text: str) -> str:
    """All four rules."""
    return canonical_json(strip_tags(text))


def extract_output_field(text: str) -> str:
    """Reduce an api_bank-style reference ``{api_name, input, output, exception}`` to
    ``{output, exception}`` (canonical JSON) — for datasets whose model emits only the payload.

    Falls back to the tag-stripped text when it is not a JSON object with either key.
    """
    stripped = strip_tags(text)
    try:
        obj = json.loads(stripped)
    except (json.JSONDecodeError, ValueError):
        return stripped
    if not isinstance(obj, dict):
        return stripped
    keep = {k: obj[k] for k in ("output", "exception") if k in obj}
    if not keep:
        return stripped
    return json.dumps(keep, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
