"""Chat rows as token ids, rendered with a tokenizer's own chat template: what training, generation, serving
benchmarks and the eval agents share."""

from __future__ import annotations

from typing import Any

from textwm.data.jsonl import DataError

#: Stands in for an assistant message's content to find what the template writes after it.
_SENTINEL = "\u2063TEXTWM_TARGET\u2063"


class ChatEncoder:
    """Renders chat rows into (prompt ids, answer ids) with a tokenizer's own chat template."""

    def __init__(self, tokenizer: Any):
        if not getattr(tokenizer, "chat_template", None):
            raise DataError("the tokenizer has no chat template; world-model prompts are rendered with it",
                            path=getattr(tokenizer, "name_or_path", None))
        self.tokenizer = tokenizer
        self.end_of_turn = self._end_of_turn_text()

    def _render(self, messages: list[dict], *, add_generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt,
                                                  enable_thinking=False)

    def _end_of_turn_text(self) -> str:
        """What the template writes after an assistant message's content (``<|im_end|>\\n`` for ChatML)."""
        text = self._render([{"role": "user", "content": "u"}, {"role": "assistant", "content": _SENTINEL}],
                            add_generation_prompt=False)
        if _SENTINEL not in text:
            raise DataError("the chat template drops assistant content; cannot find the end-of-turn text")
        return text.split(_SENTINEL, 1)[1]

    def encode_ids(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def prompt_ids(self, messages: list[dict]) -> list[int]:
        return self.encode_ids(self._render(messages, add_generation_prompt=True))

    def encode(self, messages: list[dict]) -> tuple[list[int], list[int]]:
        """``(prompt ids, answer ids)`` of a row whose last message is the assistant target."""
        return self.prompt_ids(messages[:-1]), self.encode_ids(messages[-1]["content"] + self.end_of_turn)
