"""Wire formats: the OpenAI chat-completions subset the native server speaks, and the WM proxy payload.

Pydantic models validate every request. A field the server does not know is a 422 naming it, and
fields whose *meaning* it cannot honour (``stream``, ``logprobs``, ``tools``) are refused with a
message: nothing a client sends is silently dropped. ``denoising_steps`` (the server's own flag
name) is honoured as ``num_diffusion_steps``.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from textwm.data.schema import ROLES
from textwm.data.wm_message import wm_user_message


class ChatMessage(BaseModel):
    role: str
    content: str

    @field_validator("role")
    @classmethod
    def _known_role(cls, role: str) -> str:
        if role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
        return role


class ChatCompletionRequest(BaseModel):
    """``POST /v1/chat/completions``. Diffusion fields extend the OpenAI request (lmdeploy has none)."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = Field(default=None, max_length=512)
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=5.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=-1)
    stop: str | list[str] | None = None
    seed: int | None = Field(default=None, ge=0, le=2**63 - 1)
    n: int = Field(default=1, ge=1, le=16)
    repetition_penalty: float | None = Field(default=None, gt=0.0)
    chat_template_kwargs: dict[str, Any] | None = None
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
    stream: bool = False
    logprobs: bool | None = None
    tools: list[Any] | None = None

    @model_validator(mode="after")
    def _supported(self) -> ChatCompletionRequest:
        if self.stream:
            raise ValueError("stream=true is not supported by this server; send stream=false")
        if self.logprobs:
            raise ValueError("logprobs are not supported by this server")
        if self.tools:
            raise ValueError("tools are not supported by this server")
        if self.denoising_steps is not None:
            if self.num_diffusion_steps not in (None, self.denoising_steps):
                raise ValueError("denoising_steps and num_diffusion_steps disagree; send one")
            self.num_diffusion_steps = self.denoising_steps
        return self

    def stop_strings(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else [s for s in self.stop if s]


class ChatChoiceMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class ChatChoice(BaseModel):
    index: int
    message: ChatChoiceMessage
    finish_reason: Literal["stop", "length"]


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    #: Model forward passes spent on this request (block diffusion: prefill + denoising + commits).
    decoder_forwards: int = 0


class ChatCompletionResponse(BaseModel):
    id: str = Field(default_factory=lambda: f"chatcmpl-{uuid.uuid4().hex[:24]}")
    object: Literal["chat.completion"] = "chat.completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[ChatChoice]
    usage: Usage


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
