"""The agent under evaluation: conversations in, reply texts out.

Two implementations cover every agent the paper evaluates:

* :class:`OpenAIAgent` — any OpenAI-compatible ``/v1/chat/completions`` endpoint (vLLM, lmdeploy,
  our native server, a hosted API), through :class:`~textwm.clients.openai.ChatClient`
  (connection pool, retries of transient failures); a batch of conversations is sent concurrently.
* :class:`LocalAgent` — a local checkpoint (AR or SDAR) decoded in batches with the project's
  decoders and the checkpoint's own chat template.

An agent never turns a failure into text: a conversation whose request failed yields an
:class:`AgentError` in its place, which the episode driver records (reason ``agent_error``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from textwm.clients.openai import ChatClient, ChatRequestError, resolve_model_id
from textwm.clients.retry import RetryPolicy
from textwm.data.chat_encoder import ChatEncoder
from textwm.generation.settings import DecodeSettings
from textwm.models.checkpoint import load_model
from textwm.models.families import get_family

log = logging.getLogger(__name__)

Conversation = Sequence[dict[str, str]]

#: Longest prompt a local agent decodes; longer histories keep their end (the latest turns).
DEFAULT_MAX_PROMPT_TOKENS = 16384


class AgentError(RuntimeError):
    """The agent could not produce a reply (request failed for good, decoding failed)."""


@runtime_checkable
class Agent(Protocol):
    """What the episode driver needs from an agent."""

    def reply_batch(self, conversations: Sequence[Conversation]) -> list[str | AgentError]:
        """One reply per conversation, in order; an :class:`AgentError` where that one failed."""
        ...

    def describe(self) -> dict[str, Any]:
        """What this agent is (kind, model, sampling), for the run's records."""
        ...


class SimpleAgent:
    """Base for agents that answer one conversation at a time: implement :meth:`reply`."""

    def reply(self, messages: Conversation) -> str:
        raise NotImplementedError

    def reply_batch(self, conversations: Sequence[Conversation]) -> list[str | AgentError]:
        out: list[str | AgentError] = []
        for messages in conversations:
            try:
                out.append(self.reply(messages))
            except AgentError as exc:
                out.append(exc)
        return out

    def describe(self) -> dict[str, Any]:
        return {"kind": type(self).__name__}

    def close(self) -> None:
        pass


class ExpertAgent:
    """The env's own expert as an agent. Each reply is the expert's next action: read from the conversation where
    the env's expert needs nothing else (:meth:`~textwm.envs.contract.EnvSpec.expert_reply_to`, AppWorld's: it plays
    in the world model too), else from the env's latest reset / step info (:meth:`~textwm.envs.contract.EnvSpec.
    expert_reply`, ALFWorld's handcoded expert: real env only)."""

    #: The episode driver hands this agent each episode's env info (``reply_batch(..., infos=...)``).
    reads_env_info = True

    def __init__(self, spec: Any):
        self.spec = spec

    def reply_batch(self, conversations: Sequence[Conversation], infos: Sequence[Any] = ()) -> list[str | AgentError]:
        out: list[str | AgentError] = []
        for i, conversation in enumerate(conversations):
            reply = self.spec.expert_reply_to(conversation)
            if reply is None and i < len(infos):
                reply = self.spec.expert_reply(infos[i] or {})
            if reply is None:
                where = f"env info: {sorted(infos[i] or {})}" if i < len(infos) else "no env info (simulated episode)"
                reply = AgentError(f"the {self.spec.name} expert has no action here ({where})")
            out.append(reply)
        return out

    def describe(self) -> dict[str, Any]:
        return {"kind": "expert", "env": self.spec.name}

    def close(self) -> None:
        pass


def reply(agent: Agent, messages: Conversation) -> str:
    """One reply from any agent; raises :class:`AgentError` on failure."""
    result = agent.reply_batch([messages])[0]
    if isinstance(result, AgentError):
        raise result
    return result


class OpenAIAgent:
    """An agent behind an OpenAI-compatible chat-completions endpoint.

    Each :meth:`reply_batch` sends its conversations concurrently (at most ``concurrency`` in flight)
    on one persistent event loop and connection pool. Call :meth:`check` first to fail fast on an
    unreachable endpoint (it also resolves the model id when none is given).
    """

    def __init__(self, api_url: str, *, model: str | None = None, api_key: str | None = None,
                 temperature: float = 0.0, top_p: float = 1.0, max_tokens: int = 256, concurrency: int = 32,
                 timeout_s: float = 120.0, max_retries: int = 3, extra_body: dict[str, Any] | None = None,
                 token_limit_field: str = "max_tokens"):

        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        self.api_url, self.model, self.api_key = api_url, model, api_key
        # OpenAI's reasoning models take ``max_completion_tokens`` and refuse ``max_tokens``; servers of open
        # models (vLLM, lmdeploy, ours) take ``max_tokens``.
        # top_p 1 is every server's default and is left out: some hosted reasoning models refuse the field.
        self.params: dict[str, Any] = {"temperature": temperature, **({"top_p": top_p} if top_p != 1.0 else {}),
                                       token_limit_field: max_tokens, **(extra_body or {})}
        self.concurrency = concurrency
        self.timeout_s = timeout_s
        self.retry = RetryPolicy(max_retries=max_retries)
        self._loop = asyncio.new_event_loop()
        self._client: Any = None

    def check(self) -> str:
        """Resolve (or confirm) the model id; raises :class:`AgentError` if the endpoint is unreachable."""

        try:
            listed = self._loop.run_until_complete(resolve_model_id(self.api_url, api_key=self.api_key))
        except ChatRequestError as exc:
            raise AgentError(f"agent endpoint {self.api_url} is not reachable: {exc}") from None
        self.model = self.model or listed
        return self.model

    async def _complete_all(self, conversations: Sequence[Conversation]) -> list[str | AgentError]:
        if self._client is None:
            self._client = ChatClient(self.api_url, model=self.model, api_key=self.api_key, timeout_s=self.timeout_s,
                                      retry=self.retry, max_connections=self.concurrency)
        gate = asyncio.Semaphore(self.concurrency)

        async def one(messages: Conversation) -> str | AgentError:
            async with gate:
                try:
                    return (await self._client.complete(list(messages), **self.params)).text
                except ChatRequestError as exc:
                    log.warning("agent request failed: %s", exc)
                    return AgentError(f"agent request failed: {exc}")

        return list(await asyncio.gather(*(one(m) for m in conversations)))

    def reply_batch(self, conversations: Sequence[Conversation]) -> list[str | AgentError]:
        if not conversations:
            return []
        if self.model is None:
            self.check()
        return self._loop.run_until_complete(self._complete_all(conversations))

    def describe(self) -> dict[str, Any]:
        return {"kind": "openai", "api_url": self.api_url, "model": self.model, **self.params}

    def close(self) -> None:
        if self._loop.is_closed():
            return
        if self._client is not None:
            self._loop.run_until_complete(self._client.aclose())
            self._client = None
        self._loop.close()


class LocalAgent:
    """An agent decoded from a local checkpoint (AR or SDAR), ``batch_size`` conversations per forward batch.

    Prompts are rendered with the checkpoint's chat template (:class:`~textwm.training.data.ChatEncoder`);
    a prompt longer than ``max_prompt_tokens`` keeps its last tokens (counted in :attr:`truncated`,
    warned about once). Replies are decoded with special tokens kept, so think blocks and tags reach
    :func:`~textwm.envs.sciworld.agent.parse_action`, which removes them.
    """

    def __init__(self, model_path: str, *, device: str = "auto", dtype: str = "auto", temperature: float = 0.0,
                 top_p: float = 1.0, top_k: int = 0, max_tokens: int = 256, batch_size: int = 8,
                 max_prompt_tokens: int = DEFAULT_MAX_PROMPT_TOKENS, block_length: int = 4, denoising_steps: int = 4,
                 seed: int | None = None):
        # heavy: the decoders load torch; agents over an endpoint need none
        from textwm.generation.decoders import make_decoder

        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        # Seeded once here, not per batch: a per-call seed would draw the same numbers every turn.
        self.settings = DecodeSettings(gen_length=max_tokens, temperature=temperature, top_p=top_p, top_k=top_k,
                                       block_length=block_length, denoising_steps=denoising_steps, seed=None)
        self.seed = seed
        if seed is not None:
            # heavy: loads torch
            import torch

            torch.manual_seed(seed)
        self.model_path = str(model_path)
        self.loaded = load_model(model_path, device=device, dtype=dtype)
        if get_family(self.loaded.spec.family).block_causal:
            self.loaded.spec.require_diffusion(block_length)
        self.decoder = make_decoder(self.loaded.model, self.loaded.spec, pad_token_id=self.loaded.tokenizer.pad_token_id)
        self.encoder = ChatEncoder(self.loaded.tokenizer)
        self.batch_size = batch_size
        self.max_prompt_tokens = max_prompt_tokens
        self.truncated = 0

    def _prompt(self, messages: Conversation) -> list[int]:
        ids = self.encoder.prompt_ids([{"role": m["role"], "content": m["content"]} for m in messages])
        if len(ids) > self.max_prompt_tokens:
            if not self.truncated:
                log.warning("agent prompt of %d tokens cut to its last %d (max_prompt_tokens); counted in the "
                            "run's records", len(ids), self.max_prompt_tokens)
            self.truncated += 1
            ids = ids[-self.max_prompt_tokens:]
        return ids

    def reply_batch(self, conversations: Sequence[Conversation]) -> list[str | AgentError]:
        prompts = [self._prompt(m) for m in conversations]
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))  # similar lengths pad less
        out: list[str | AgentError] = [AgentError("not decoded")] * len(prompts)
        tokenizer = self.loaded.tokenizer
        for start in range(0, len(order), self.batch_size):
            chunk = order[start:start + self.batch_size]
            try:
                generations = self.decoder.generate([prompts[i] for i in chunk], self.settings)
            except (RuntimeError, ValueError) as exc:  # OOM, a bad prompt: those episodes end as agent errors
                log.error("local agent batch of %d failed: %s: %s", len(chunk), type(exc).__name__, exc)
                for i in chunk:
                    out[i] = AgentError(f"decoding failed: {type(exc).__name__}: {exc}")
                continue
            for i, gen in zip(chunk, generations):
                out[i] = tokenizer.decode(gen.token_ids, skip_special_tokens=False)
        return out

    def describe(self) -> dict[str, Any]:
        s = self.settings
        return {"kind": "local", "model_path": self.model_path, "family": self.loaded.spec.family,
                "temperature": s.temperature, "top_p": s.top_p, "top_k": s.top_k, "max_tokens": s.gen_length,
                "seed": self.seed, "batch_size": self.batch_size, "max_prompt_tokens": self.max_prompt_tokens,
                "prompts_truncated": self.truncated}

    def close(self) -> None:
        pass
