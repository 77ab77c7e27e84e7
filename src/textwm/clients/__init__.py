"""Torch-free HTTP clients, the bottom layer every other package may use.

* :mod:`textwm.clients.retry` — the retry policy (bounded exponential backoff) all clients share;
* :mod:`textwm.clients.openai` — OpenAI-compatible ``/v1/chat/completions`` and ``/v1/models``;
* :mod:`textwm.clients.wm` — the paper's world-model payload to the WM proxy, an observation back.

They import only httpx, tqdm and :mod:`textwm.data` (text normalisation, the WM user message).
"""
