"""Wire formats: the OpenAI chat-completions and legacy completions subsets the native server speaks (requests,
responses, stream chunks), and the WM proxy payload.

Pydantic models validate every request. A field the server does not know is a 422 naming it, and
fields whose *meaning* it cannot honour (``logprobs``, ``tools``, ``suffix``, ``best_of``) are refused
with a message: nothing a client sends is silently dropped. ``denoising_steps`` (the server's own flag
name) is honoured as ``num_diffusion_steps``.

Streams (``stream: true``) are server-sent events in OpenAI's format, as vLLM and lmdeploy send them
(lmdeploy ``serve/openai/chat_completions/serving.py``, ``endpoints/completions.py``): ``data: <chunk JSON>``
events, a usage chunk with ``choices: []`` last when ``stream_options.include_usage``, then ``data: [DONE]``.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from textwm.data.schema import ROLES
from textwm.data.wm_message import wm_user_message

#: Most prompts one legacy completions request may carry (each is decoded ``n`` times).
MAX_PROMPTS = 64
FinishReason = Literal["stop", "length"]


class ChatMessage(BaseModel):
    """A message: ``content`` as text, or OpenAI's content parts (text parts only, joined)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    role: str
    content: str

    @field_validator("content", mode="before")
    @classmethod
    def _text_parts(cls, content: Any) -> Any:
        if isinstance(content, list):
            texts = []
            for i, part in enumerate(content):
                if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
                        and set(part) == {"type", "text"}):
                    kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                    raise ValueError(f"content part {i} ({kind!r}): only text parts ({{'type': 'text', 'text': "
                                     f"...}}) are served here")
                texts.append(part["text"])
            return "".join(texts)
        return content

    @field_validator("role")
    @classmethod
    def _known_role(cls, role: str) -> str:
        if role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
        return role


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    #: Send a last chunk with ``choices: []`` and the request's usage (every other chunk has ``usage: null``).
    include_usage: bool = False


class SamplingRequest(BaseModel):
    """The fields chat and legacy completions share: OpenAI's sampling fields plus the diffusion ones
    (per request; the server's flags are the defaults; lmdeploy has none). Strict types: ``"8"`` is not a number
    nor ``"yes"`` a boolean (an integer is a float)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    model: str | None = Field(default=None, max_length=512)
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=5.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=-1)
    stop: str | list[str] | None = None
    seed: int | None = Field(default=None, ge=0, le=2**63 - 1)
    n: int = Field(default=1, ge=1, le=16)
    repetition_penalty: float | None = Field(default=None, gt=0.0)
    stream: bool = False
    stream_options: StreamOptions | None = None
    # Block-diffusion settings per request (default: the server's flags).
    num_diffusion_steps: int | None = Field(default=None, ge=1)
    denoising_steps: int | None = Field(default=None, ge=1, description="the same as num_diffusion_steps")
    block_length: int | None = Field(default=None, ge=1)
    confidence_threshold: float | None = Field(default=None, ge=0.0, le=1.0)
    remasking_strategy: str | None = None
    # WeDLM streaming-decoding settings per request (default: the server's flags).
    window_size: int | None = Field(default=None, ge=1, le=256)
    entropy_threshold: float | None = Field(default=None, ge=0.0)
    position_penalty: float | None = Field(default=None, ge=0.0)
    # An anchored answer: fixed strings kept verbatim and {"fill": N} slots (textwm.generation.anchors).
    response_template: list[Any] | None = Field(default=None, max_length=256)

    @model_validator(mode="after")
    def _consistent(self) -> SamplingRequest:
        if self.stream_options is not None and not self.stream:
            raise ValueError("stream_options is only valid with stream=true")  # as vLLM's protocol.py
        if self.denoising_steps is not None:
            if self.num_diffusion_steps not in (None, self.denoising_steps):
                raise ValueError("denoising_steps and num_diffusion_steps disagree; send one")
            self.num_diffusion_steps = self.denoising_steps
        return self

    def stop_strings(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else [s for s in self.stop if s]

    def requested_max_tokens(self) -> int | None:
        """The request's cap on new tokens per choice (None: the server's default)."""
        return self.max_tokens

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage


class ChatCompletionRequest(SamplingRequest):
    """``POST /v1/chat/completions``."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    chat_template_kwargs: dict[str, Any] | None = None
    logprobs: bool | None = None
    tools: list[Any] | None = None

    @model_validator(mode="after")
    def _supported(self) -> ChatCompletionRequest:
        if self.logprobs:
            raise ValueError("logprobs are not supported by this server")
        if self.tools:
            raise ValueError("tools are not supported by this server")
        return self

    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(SamplingRequest):
    """``POST /v1/completions`` (OpenAI's legacy completions): the prompt is decoded as given, no chat template.

    ``prompt``: a string, a list of strings, a list of token ids, or a list of such lists; choice ``i`` of
    prompt ``p`` has index ``p * n + i`` (OpenAI's and vLLM's order; lmdeploy also takes a list of prompts).
    ``echo``: each choice's text starts with its prompt.
    """

    prompt: str | list[str] | list[int] | list[list[int]]
    echo: bool = False
    logprobs: int | None = None
    suffix: str | None = None
    best_of: int | None = None

    @field_validator("prompt")
    @classmethod
    def _prompts_in_bounds(cls, prompt: Any) -> Any:
        if isinstance(prompt, list):
            if not prompt:
                raise ValueError("prompt is an empty list; send a string, token ids, or a list of them")
            if isinstance(prompt[0], (str, list)) and len(prompt) > MAX_PROMPTS:
                raise ValueError(f"at most {MAX_PROMPTS} prompts a request, got {len(prompt)}")
            ids = [prompt] if isinstance(prompt[0], int) else [p for p in prompt if isinstance(p, list)]
            if any(t < 0 for p in ids for t in p):
                raise ValueError("token ids must be >= 0")
        return prompt

    @model_validator(mode="after")
    def _supported(self) -> CompletionRequest:
        if self.logprobs:
            raise ValueError("logprobs are not supported by this server")
        if self.suffix:
            raise ValueError("suffix (insertion) is not supported by this server")
        if self.best_of is not None and self.best_of != self.n:
            raise ValueError("best_of is not supported by this server; send n alone")
        return self

    def prompts(self) -> list[str | list[int]]:
        """The prompts, each a string or a list of token ids."""
        if isinstance(self.prompt, str):
            return [self.prompt]
        if isinstance(self.prompt[0], int):
            return [list(self.prompt)]
        return list(self.prompt)


# --- responses --------------------------------------------------------------------------------------


class ChatChoiceMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class ChatChoice(BaseModel):
    index: int
    message: ChatChoiceMessage
    finish_reason: FinishReason


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    #: Model forward passes spent on this request (block diffusion: prefill + denoising + commits); rows cut
    #: short by a stop string under continuous batching leave before they report theirs.
    decoder_forwards: int = 0


def _chat_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"


def _completion_id() -> str:
    return f"cmpl-{uuid.uuid4().hex[:24]}"


def _now() -> int:
    return int(time.time())


class ChatCompletionResponse(BaseModel):
    id: str = Field(default_factory=_chat_id)
    object: Literal["chat.completion"] = "chat.completion"
    created: int = Field(default_factory=_now)
    model: str
    choices: list[ChatChoice]
    usage: Usage


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: None = None
    finish_reason: FinishReason


class CompletionResponse(BaseModel):
    id: str = Field(default_factory=_completion_id)
    object: Literal["text_completion"] = "text_completion"
    created: int = Field(default_factory=_now)
    model: str
    choices: list[CompletionChoice]
    usage: Usage


# --- stream chunks ------------------------------------------------------------------------------------


class ChatChunkChoice(BaseModel):
    index: int
    #: ``{"role": "assistant", "content": ""}`` first, then ``{"content": text}``, ``{}`` with the finish reason.
    delta: dict[str, str]
    logprobs: None = None
    finish_reason: FinishReason | None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Usage | None = None


class CompletionChunkChoice(BaseModel):
    index: int
    text: str
    logprobs: None = None
    finish_reason: FinishReason | None = None


class CompletionChunk(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChunkChoice]
    usage: Usage | None = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = Field(default_factory=lambda: int(time.time()))
    #: ``textwm`` identifies this server to the WM proxy (it accepts per-request diffusion fields).
    owned_by: str = "textwm"
    family: str | None = None
    max_model_len: int | None = None


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


# --- the WM proxy payload (the paper's format) -------------------------------------------------


class WMInput(BaseModel):
    """``{"input": {system_prompt, state, action, max_tokens, ...}}`` (or the object without ``input``)."""

    model_config = ConfigDict(extra="forbid")

    system_prompt: Any = None
    state: Any
    action: Any
    max_tokens: int = Field(default=256, ge=1)
    num_diffusion_steps: int | None = Field(default=None, ge=1)
    diffusion_steps: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=0.0, ge=0.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    repetition_penalty: float | None = Field(default=None, gt=0.0)
    #: Forwarded as the chat request's ``response_template`` (the native server's anchored answers).
    response_template: list[Any] | None = Field(default=None, max_length=256)

    @model_validator(mode="before")
    @classmethod
    def _required(cls, data: Any) -> Any:
        if isinstance(data, dict):
            missing = [k for k in ("state", "action") if data.get(k) is None]
            if missing:
                raise ValueError(f"missing field(s): {', '.join(missing)}")
        return data

    @staticmethod
    def as_text(value: Any) -> str:
        """A string as given, anything else ``json.dumps`` with default separators (as the paper's proxy)."""
        return value if isinstance(value, str) else json.dumps(value)

    def messages(self) -> list[dict[str, str]]:
        msgs = []
        if self.system_prompt:
            msgs.append({"role": "system", "content": self.as_text(self.system_prompt)})
        msgs.append({"role": "user", "content": wm_user_message(self.as_text(self.state), self.as_text(self.action))})
        return msgs

    def steps(self) -> int | None:
        return self.num_diffusion_steps if self.num_diffusion_steps is not None else self.diffusion_steps
