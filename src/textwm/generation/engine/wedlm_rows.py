"""WeDLM streaming parallel decoding in the engine: the reference decoder's rules, vectorised over rows.

The rules are :mod:`textwm.generation.wedlm` (Tencent/WeDLM's engine); the selection and commit functions
are the reference's (:func:`~textwm.generation.wedlm.commit_run`) or their tensor forms here. Per forward,
for every row at once:

* the window ``[rows, W]`` (tokens, and which slots are filled) is extended by as many masks as its
  leading filled run (*refill before the forward*): ``W + run`` slots, at most ``2W``;
* the slots are fed filled-first then masks, each in window order (a stable sort on ``(is_mask, index)``),
  at logical positions ``committed length + window index``, written at physical columns ``committed
  length + feed index`` under causal attention by physical order. Rows whose window is shorter than the
  forward's are padded at the end, where no real slot sees them. The forward's width is the longest
  window rounded up to :data:`WIDTH_STEP` (fewer CUDA graphs);
* the run is committed (cache length += run; output by :func:`commit_run`), the masks are scored on the
  raw logits (entropy + position penalty < threshold, else the single lowest) and filled, and the window
  shifts by the run.

When every active row is greedy, the whole step (layout, forward, scoring of every slot, fill rule, shift)
is one CUDA graph per (bucket, width, kv bucket), kept with the rows (:meth:`GraphedForward.capture_step
<textwm.generation.engine.graphs.GraphedForward.capture_step>`): its only host work is reading the run it
committed. Otherwise only the forward is a graph, and the mask slots are gathered and drawn eagerly.

An anchored row (a response template, :mod:`textwm.generation.engine.anchor_table`) enters every slot that
comes into its window at an anchor's position as filled with the anchor (the first window, and each refill):
fed before the masks and never redrawn, as in the reference decoder; its output is its canvas
(:func:`~textwm.generation.wedlm.commit_anchored`).

Each row draws by its own request's temperature, top-k and top-p
(:func:`~textwm.generation.sampling.sample_filter_first_rows`); no repetition penalty (upstream has none).
"""

from __future__ import annotations

import torch

from textwm.generation.anchors import Layout
from textwm.generation.base import Generation
from textwm.generation.engine.anchor_table import NO_ANCHOR, AnchorTable
from textwm.generation.engine.graphs import kv_bucket
from textwm.generation.engine.rows import MAX_BLOCK_OR_WINDOW, Rows, RowsContext, Update, to_host
from textwm.generation.sampling import logits_entropy, sample_filter_first, sample_filter_first_rows
from textwm.generation.settings import DecodeSettings
from textwm.generation.wedlm import anchored_slots, commit_anchored, commit_run, leading_run

#: A forward's width (window + refill) is rounded up to a multiple of this (capped at 2W).
WIDTH_STEP = 4
#: Greedy slots scored per chunk (bounds the float32 softmax temporaries: chunk x V).
SCORE_CHUNK = 256


class WeDLMRows(Rows):
    """Row state: window tokens and filled flags ``[rows, W]``, the window's leading filled run and the committed
    cache length ``[rows]``, budget. The host keeps the run and the length too (read with the step's results),
    so the next forward's width and ``kv_len`` need no device read."""

    applies_penalty = False
    span_setting = "window_size"
    #: A forward writes up to 2 windows past the committed prefix.
    capacity_slack = 3 * MAX_BLOCK_OR_WINDOW

    def __init__(self, ctx: RowsContext):
        super().__init__(ctx)
        n, w, dev = self.max_rows, ctx.settings.window_size, self.device
        self.w, self.mask_id = w, int(ctx.spec.mask_token_id)
        self.win = torch.full((n, w), self.mask_id, dtype=torch.long, device=dev)
        self.filled = torch.zeros((n, w), dtype=torch.bool, device=dev)
        self.length = torch.zeros(n, dtype=torch.long, device=dev)     # prompt + committed tokens
        self.run = torch.zeros(n, dtype=torch.long, device=dev)        # leading filled run of the window
        self.before = torch.zeros((n, w), dtype=torch.long, device=dev)  # the window a step's forward saw
        self.active_now = torch.zeros(n, dtype=torch.bool, device=dev)   # the step's active rows (graph input)
        self.host_length: dict[int, int] = {}
        self.host_run: dict[int, int] = {}
        self.budgets: dict[int, int] = {}
        self.graphs: dict[tuple[int, int, int], torch.cuda.CUDAGraph] = {}   # (bucket, width, kv_len) -> step
        self.anchors = AnchorTable(n, ctx.net.capacity, dev)

    def join(self, slots: list[int], prompts: list[list[int]], budgets: list[int],
             settings: list[DecodeSettings], layouts: list[Layout | None] | None = None) -> list[Update]:
        self.start_rows(slots, settings)
        idx = torch.tensor(slots, device=self.device)
        self.ctx.prefill(slots, prompts, pad_id=self.ctx.pad_id)
        self.count_forward(slots)
        self.length[idx] = torch.tensor([len(p) for p in prompts], device=self.device)
        self.host_length.update((slot, len(p)) for slot, p in zip(slots, prompts))
        self.budgets.update(zip(slots, budgets))
        layouts = layouts or [None] * len(slots)
        self.anchors.set_rows(slots, [len(p) for p in prompts], layouts)
        # The first window: a mask in each slot, or the anchor at its answer position.
        windows = [anchored_slots(layout, 0, self.w) for layout in layouts]
        runs = [leading_run(window) for window in windows]
        self.win[idx] = torch.tensor([[self.mask_id if t is None else t for t in w] for w in windows], device=self.device)
        self.filled[idx] = torch.tensor([[t is not None for t in w] for w in windows], device=self.device)
        self.run[idx] = torch.tensor(runs, device=self.device)
        self.host_run.update(zip(slots, runs))
        return []

    def reset(self, slot: int) -> None:
        self.length[slot], self.filled[slot], self.run[slot] = 0, False, 0
        self.anchors.clear(slot)
        for table in (self.host_length, self.host_run, self.budgets):
            table.pop(slot, None)

    def _width(self, longest_run: int) -> int:
        longest = self.w + longest_run
        return min(-(-longest // WIDTH_STEP) * WIDTH_STEP, 2 * self.w)

    def forward_shapes(self) -> list[tuple[int, int]]:
        return [(q, 0) for q in sorted({self._width(run) for run in range(self.w + 1)})]

    def _step_graphs(self, greedy: bool) -> bool:
        """Whether a step of rows this greedy runs as one whole-step CUDA graph."""
        return greedy and self.ctx.forward.enabled and self.ctx.generator is None

    def warm_graphs(self, buckets: list[int], kv_lens: list[int]) -> None:
        """Greedy step structures: capture the whole-step graph of every (bucket, width, kv bucket); the free rows
        it runs on stay at rest (inactive rows fill nothing, so their run and length stay 0). Else the forwards."""
        if not self._step_graphs(self.settings.temperature == 0):
            super().warm_graphs(buckets, kv_lens)
            return
        self.check_idle()
        self.active_now.fill_(False)
        for b in buckets:
            for kv_len in kv_lens:
                for q, _ in self.forward_shapes():
                    if (b, q, kv_len) not in self.graphs:
                        self.graphs[(b, q, kv_len)] = self.ctx.forward.capture_step(
                            lambda: self._window_step(b, q, kv_len, dense=True))  # noqa: B023 (runs at once)

    def step(self) -> list[Update]:
        v = self.view()
        b = v.b
        longest_run = max(self.host_run[s] for s in v.rows)
        q = self._width(longest_run)
        kv_len = kv_bucket(max(self.host_length[s] for s in v.rows) + q, self.ctx.net.capacity)
        self.active_now[:b].copy_(v.mask)
        greedy = self.sampling(b).all_greedy
        if self._step_graphs(greedy):
            # Greedy rows need no host decision inside the step: the whole of it (window layout, forward,
            # fill rule, shift) is one CUDA graph per (bucket, width, kv bucket).
            # The graphs live with these rows: they read these tensors and bake in this step structure.
            graph = self.graphs.get((b, q, kv_len))
            if graph is None:
                self.graphs[(b, q, kv_len)] = self.ctx.forward.capture_step(
                    lambda: self._window_step(b, q, kv_len, dense=True))
            else:
                graph.replay()
        else:
            self._window_step(b, q, kv_len, dense=greedy)
        self.count_forward()
        run_tokens, next_run = to_host(self.before[:b, :max(1, longest_run)], self.run[:b, None])
        return self._commit(v.rows, run_tokens, next_run)

    def _window_step(self, b: int, q: int, kv_len: int, *, dense: bool) -> None:
        """One window forward of rows ``0..b-1`` and its fill rule, on the row tensors in place.

        Reads ``win, filled, run, length, active_now``; writes ``before`` (the window as the forward saw it,
        whose leading run the host commits), then ``win, filled, length, run``. ``dense``: greedy rows, every
        slot scored (no data-dependent shapes, no host read: capturable); else only the mask slots, drawn
        by each row's own settings.
        """
        w, dev = self.w, self.device
        active = self.active_now[:b]
        self.before[:b].copy_(self.win[:b])
        filled = self.filled[:b] & active[:, None]
        run = self.run[:b]                                                          # [b] leading filled run
        idx = torch.arange(q, device=dev)
        # The refill: masks, or an anchored row's anchors at their answer positions (committed + W + i).
        committed = self.length[:b] - self.anchors.prompt_len[:b]
        refill = self.anchors.at(committed[:, None] + w + torch.arange(w, device=dev))          # [b, w]
        refill_fill = (refill != NO_ANCHOR) & active[:, None]
        ext_tok = torch.cat([self.win[:b], torch.where(refill_fill, refill, self.mask_id)], 1)[:, :q]
        ext_fill = torch.cat([filled, refill_fill], 1)[:, :q]
        valid = idx[None, :] < (w + run)[:, None]                                   # [b, q] real window slots
        order = torch.argsort(torch.where(valid, torch.where(ext_fill, idx, q + idx), 2 * q + idx), dim=1)
        fed_fill, fed_valid = ext_fill.gather(1, order), valid.gather(1, order)
        ids = torch.where(fed_valid, torch.where(fed_fill, ext_tok.gather(1, order), self.mask_id), self.ctx.pad_id)
        length = self.length[:b]
        positions = torch.where(fed_valid, length[:, None] + order, 0)
        cols = length[:, None] + idx
        forward = self.ctx.net.forward if self.ctx.forward.capturing else self.ctx.forward
        logits = forward(ids, positions, cols, cols + 1, kv_len=kv_len)             # [b, q, V], feed order
        is_mask_fed = fed_valid & ~fed_fill & active[:, None]
        if dense:
            tokens, ent = self._score_dense(logits, is_mask_fed, order)
        else:
            tokens, ent = self._score_masks(logits, is_mask_fed, order)
        chosen = self._choose(ent, valid & ~ext_fill & active[:, None], idx)
        new_tok = torch.where(chosen, tokens, ext_tok)
        new_fill = ext_fill | chosen
        shift = run[:, None] + torch.arange(w, device=dev)
        self.win[:b], self.filled[:b] = new_tok.gather(1, shift), new_fill.gather(1, shift)
        self.length[:b] += run
        self.run[:b] = self.filled[:b].long().cumprod(dim=1).sum(dim=1)            # the next step's run

    def _score_dense(self, logits: torch.Tensor, is_mask_fed: torch.Tensor,
                     order: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Greedy tokens and entropies ``[b, q]`` in window order, every slot scored (filled ones get ``inf``).

        Row by row the same functions as :meth:`_score_masks` on the same logits (the argmax of the float32
        softmax, :func:`logits_entropy`), taken over chunks of :data:`SCORE_CHUNK` slots so the float32
        temporaries stay small at large batches.
        """
        b, q, v = logits.shape
        flat = logits.reshape(b * q, v)
        tok_parts, ent_parts = [], []
        for start in range(0, b * q, SCORE_CHUNK):
            chunk = flat[start:start + SCORE_CHUNK]
            tok_parts.append(sample_filter_first(chunk, temperature=0).tokens)
            ent_parts.append(logits_entropy(chunk))
        tok_fed = torch.cat(tok_parts).view(b, q)
        ent_fed = torch.where(is_mask_fed, torch.cat(ent_parts).view(b, q), float("inf"))
        return torch.empty_like(tok_fed).scatter_(1, order, tok_fed), torch.empty_like(ent_fed).scatter_(1, order, ent_fed)

    def _score_masks(self, logits: torch.Tensor, is_mask_fed: torch.Tensor,
                     order: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Tokens drawn by each row's settings and entropies ``[b, q]`` in window order, mask slots only."""
        b, q = is_mask_fed.shape
        r, f = is_mask_fed.nonzero(as_tuple=True)
        raw = logits[r, f]
        slot_of = order[r, f]                                                       # window index of each
        tokens = torch.full((b, q), self.ctx.pad_id, dtype=torch.long, device=self.device)
        tokens[r, slot_of] = sample_filter_first_rows(raw, self.sampling(b).take(r),
                                                      generator=self.ctx.generator).tokens
        ent = torch.full((b, q), float("inf"), device=self.device)
        ent[r, slot_of] = logits_entropy(raw)
        return tokens, ent

    def _choose(self, ent: torch.Tensor, is_mask: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """:func:`~textwm.generation.wedlm.positions_to_fill` for every row: ``[b, q]`` bool."""
        s = self.settings
        first = is_mask.int().argmax(dim=1)                                         # first mask's index
        score = (ent + s.position_penalty * (idx[None, :] - first[:, None])).masked_fill(~is_mask, float("inf"))
        chosen = (score < s.entropy_threshold) & is_mask
        lowest = torch.zeros_like(chosen).scatter_(1, score.argmin(dim=1, keepdim=True), True)
        none = ~chosen.any(dim=1, keepdim=True) & is_mask.any(dim=1, keepdim=True)
        return chosen | (lowest & none & is_mask)

    def _commit(self, rows: list[int], run_tokens: list[list[int]], next_run: list[list[int]]) -> list[Update]:
        """Commit each row's run (``run_tokens [b][>= run]``); ``next_run [b][1]``: its window's new run."""
        updates = []
        for slot in rows:
            out = self.outputs[slot]
            before = len(out)
            result = Generation(token_ids=out, finish_reason="length")
            run = self.host_run[slot]
            self.host_length[slot] += run
            self.host_run[slot] = next_run[slot][0]
            layout = self.anchors.layouts.get(slot)
            done = (commit_run(result, run_tokens[slot][:run], self.budgets[slot], self.stop_set) if layout is None
                    else commit_anchored(result, run_tokens[slot][:run], layout, self.stop_set))
            new = out[before:]
            updates.append((slot, new, self.finish(slot, result) if done else None))
        return updates
