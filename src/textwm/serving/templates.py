"""Rendering a chat template a client sent: off by default, and then in a separate process with limits.

A request may carry ``chat_template_kwargs`` (e.g. ``enable_thinking``), which the checkpoint's own
template reads. A client-supplied ``chat_template`` is Jinja code: one with nested loops of 30,000
steps each blocked a server for 18 s. The server refuses it unless started with
``--allow-client-chat-template``; then :class:`TemplateSandbox` renders it in one worker process in
Jinja's immutable sandbox, with a template-size limit, an output-size limit and a time limit after
which the process is killed and replaced.
"""

from __future__ import annotations

import logging
import multiprocessing
import threading
from typing import Any

log = logging.getLogger(__name__)

#: ``chat_template_kwargs`` keys that are arguments of the rendering itself, never the template's variables.
RESERVED_TEMPLATE_KWARGS = frozenset({
    "conversation", "messages", "tokenize", "add_generation_prompt", "continue_final_message", "return_dict",
    "return_tensors", "return_assistant_tokens_mask", "padding", "truncation", "max_length", "tokenizer_kwargs",
    "tools", "documents", "chat_template"})
MAX_TEMPLATE_CHARS = 20_000


class TemplateError(ValueError):
    """The client's template or its arguments cannot be rendered (400)."""


def check_template_kwargs(kwargs: dict[str, Any], *, allow_template: bool) -> dict[str, Any]:
    """The template variables of a request: scalars only, no reserved key; ``chat_template`` only when allowed."""
    out = {}
    for key, value in kwargs.items():
        if key == "chat_template":
            if not allow_template:
                raise TemplateError("chat_template_kwargs.chat_template: client chat templates are refused; start "
                                    "the server with --allow-client-chat-template to accept them")
            if not isinstance(value, str) or len(value) > MAX_TEMPLATE_CHARS:
                raise TemplateError(f"chat_template_kwargs.chat_template must be text of at most "
                                    f"{MAX_TEMPLATE_CHARS} characters")
            continue
        if key in RESERVED_TEMPLATE_KWARGS:
            raise TemplateError(f"chat_template_kwargs.{key} is an argument of the rendering, not a template "
                                "variable; leave it out")
        if not isinstance(value, (str, int, float, bool)) or value is None:
            raise TemplateError(f"chat_template_kwargs.{key} must be a string, number or boolean")
        out[key] = value
    return out


def _render(template: str, messages: list[dict[str, str]], variables: dict[str, Any], max_chars: int) -> str:
    # not a textwm dependency (torch brings it); only the sandbox's worker process renders
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise ValueError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    text = env.from_string(template).render(messages=messages, add_generation_prompt=True, **variables)
    if len(text) > max_chars:
        raise ValueError(f"the rendered prompt has {len(text)} characters, more than {max_chars}")
    return text


def _serve(conn: Any) -> None:
    while True:
        try:
            args = conn.recv()
        except EOFError:
            return
        try:
            conn.send(("ok", _render(*args)))
        except Exception as exc:  # noqa: BLE001 -- every template failure goes back to the request as a 400
            conn.send(("error", f"{type(exc).__name__}: {exc}"))


class TemplateSandbox:
    """One worker process rendering client templates, one at a time; killed and replaced after ``timeout_s``."""

    def __init__(self, timeout_s: float = 2.0, max_output_chars: int = 400_000):
        self.timeout_s, self.max_output_chars = timeout_s, max_output_chars
        self._ctx = multiprocessing.get_context("spawn")
        self._lock = threading.Lock()
        self._proc: Any = None
        self._conn: Any = None

    def _start(self) -> None:
        parent, child = self._ctx.Pipe()
        self._proc = self._ctx.Process(target=_serve, args=(child,), name="textwm-template-sandbox", daemon=True)
        self._proc.start()
        child.close()
        self._conn = parent

    def render(self, template: str, messages: list[dict[str, str]], variables: dict[str, Any]) -> str:
        with self._lock:
            if self._proc is None or not self._proc.is_alive():
                self._start()
            self._conn.send((template, messages, variables, self.max_output_chars))
            if not self._conn.poll(self.timeout_s):
                self._proc.kill()
                self._proc.join(5.0)
                self._proc = None
                raise TemplateError(f"the client's chat template took longer than {self.timeout_s:g} s to render")
            status, value = self._conn.recv()
        if status != "ok":
            raise TemplateError(f"the client's chat template failed: {value}")
        return value

    def close(self) -> None:
        if self._proc is not None and self._proc.is_alive():
            self._proc.kill()
            self._proc.join(5.0)
