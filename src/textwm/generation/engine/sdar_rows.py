"""SDAR block diffusion in the engine, under both rule sets of the reference decoder.

The rules are :mod:`textwm.generation.sdar` (``sdar_rules="generate"``) and
:mod:`textwm.generation.sdar_lmdeploy` (``"lmdeploy"``); their functions (schedule, remasking, sampling,
stopping) are called here, so the two paths cannot drift. What differs is the layout and the forwards:

* a row's sequence starts at cache column 0 (no left padding); the prompt's whole blocks are prefilled
  block-causally when the row joins, and its first block holds the prompt's tail;
* **the commit is fused**: the forward that would commit a finished block is the next block's first
  denoising forward. It carries ``2 * block`` queries, the finished block (written at its columns, limit
  = its own end: what the reference's commit forward computes) and the new block (limit = its end, so it
  sees the just-written block). At one denoising step a block costs one forward, not two. A row with
  nothing to commit (it just joined) fills the first half with padding written past its block, where no
  query looks;
* one :meth:`SDARRows.step` decodes one block for every row: up to ``denoising_steps`` forwards (generate
  rules) or until every row's block is unmasked (lmdeploy rules); the rows are in step within the block,
  which the ``generate`` schedule needs (a step's transfer count is the same for all rows). New rows join
  between blocks.

An anchored row (a response template, :mod:`textwm.generation.engine.anchor_table`; generate rules only) has
its anchors written into each block before the block's first forward, as the reference decoder does: they are
not masks, so they are never remasked, and each slot is denoised with the anchors on both of its sides in view.

Each row samples by its own request's temperature, top-k, top-p and repetition penalty
(:func:`~textwm.generation.sampling.sample_rows`, :func:`~textwm.generation.sdar_lmdeploy.lmdeploy_sample_rows`);
the rest of the settings is the rows' common step structure.
"""

from __future__ import annotations

import torch

from textwm.generation.anchors import Layout
from textwm.generation.base import Generation
from textwm.generation.engine.anchor_table import NO_ANCHOR, AnchorTable, collect_canvas
from textwm.generation.engine.rows import MAX_BLOCK_OR_WINDOW, Rows, RowsContext, Update, to_host
from textwm.generation.remasking import select_transfer, transfer_schedule
from textwm.generation.sampling import apply_repetition_penalty, entropy, sample_rows
from textwm.generation.sdar_lmdeploy import (
    block_stops,
    check_lmdeploy_settings,
    denoise_num,
    finish_lmdeploy,
    lmdeploy_sample_rows,
    lmdeploy_unmask,
)
from textwm.generation.settings import DecodeSettings


class SDARRows(Rows):
    """Row state: the block being decoded ``[rows, blk]``, its masked slots, its start column, the previous
    (finished, not yet committed) block, and the per-rule stopping state."""

    span_setting = "block_length"
    #: The end is rounded up to a block, and a fused forward writes a padding block past it.
    capacity_slack = 3 * MAX_BLOCK_OR_WINDOW

    def __init__(self, ctx: RowsContext):
        super().__init__(ctx)
        s, spec = ctx.settings, ctx.spec
        self.lmdeploy = s.sdar_rules == "lmdeploy"
        if self.lmdeploy:
            check_lmdeploy_settings(spec, s)
            self.num = denoise_num(s.block_length, s.denoising_steps)
        else:
            spec.require_diffusion(s.block_length)
            self.schedule = transfer_schedule(s.block_length, s.denoising_steps)
        self.blk, self.mask_id = s.block_length, int(spec.mask_token_id)
        n, blk, dev = self.max_rows, self.blk, self.device
        self.block = torch.full((n, blk), self.mask_id, dtype=torch.long, device=dev)
        self.masked = torch.zeros((n, blk), dtype=torch.bool, device=dev)
        self.prev = torch.full((n, blk), ctx.pad_id, dtype=torch.long, device=dev)
        self.pending = torch.zeros(n, dtype=torch.bool, device=dev)       # prev must be committed
        self.col0 = torch.zeros(n, dtype=torch.long, device=dev)          # first column of the block
        self.appendable = torch.zeros(n, dtype=torch.long, device=dev)    # lmdeploy rules
        self.gen_from = torch.zeros(n, dtype=torch.long, device=dev)
        self.ignore_stops = torch.zeros(n, dtype=torch.bool, device=dev)
        self.arange = torch.arange(blk, device=dev)
        # Host copies of what the control flow reads (no device round trip for them): per active row its
        # block's first column, prompt length and generate-rules end, and the rows with a block to commit.
        self.host_col0: dict[int, int] = {}
        self.host_plen: dict[int, int] = {}
        self.host_end: dict[int, int] = {}
        self.host_pending: set[int] = set()
        self.anchors = AnchorTable(n, ctx.net.capacity, dev)

    # --- rows joining and leaving -----------------------------------------------------------------------

    def join(self, slots: list[int], prompts: list[list[int]], budgets: list[int],
             settings: list[DecodeSettings], layouts: list[Layout | None] | None = None) -> list[Update]:
        blk, dev = self.blk, self.device
        if layouts is not None and any(layouts) and self.lmdeploy:
            raise ValueError("anchored decoding runs under the generate rules, not sdar_rules='lmdeploy'")
        self.start_rows(slots, settings)
        full = [len(p) // blk * blk for p in prompts]
        pre = [i for i, f in enumerate(full) if f > 0]
        if pre:
            self.ctx.prefill([slots[i] for i in pre], [prompts[i][:full[i]] for i in pre], block=blk,
                             pad_id=self.ctx.pad_id)
            self.count_forward([slots[i] for i in pre])
        # Each joining row's block (its prompt's tail, then masks) and counters, in one host-to-device copy:
        # [n, blk + 3] = block | column 0 | appendable (lmdeploy) | generated-from (the tail's length).
        table = torch.full((len(slots), blk + 3), self.mask_id, dtype=torch.long)
        for i, (slot, p, f, budget) in enumerate(zip(slots, prompts, full, budgets)):
            tail = p[f:]
            table[i, :len(tail)] = torch.tensor(tail, dtype=torch.long)
            table[i, blk:] = torch.tensor([f, budget + len(tail), len(tail)])
            self.host_col0[slot], self.host_plen[slot] = f, len(p)
            self.host_end[slot] = (len(p) + budget + blk - 1) // blk * blk
            self.host_pending.discard(slot)
            if not self.lmdeploy:
                self.mark_seen(slot, p)       # generate rules penalise the prompt; lmdeploy only the output
        table = table.to(dev)
        idx = torch.tensor(slots, device=dev)
        tail_len = table[:, blk + 2]
        self.block[idx] = table[:, :blk]
        self.masked[idx] = self.arange[None, :] >= tail_len[:, None]
        self.col0[idx], self.appendable[idx], self.gen_from[idx] = table[:, blk], table[:, blk + 1], tail_len
        self.ignore_stops[idx] = tail_len > 0
        self.pending[idx] = False
        if layouts is not None and any(layouts):
            self.anchors.set_rows(slots, [len(p) for p in prompts], layouts)
            self._place_anchors([s for s, layout in zip(slots, layouts) if layout is not None])
        return []

    def _place_anchors(self, slots: list[int]) -> None:
        """Write the anchors of anchored rows ``slots`` into their current blocks (masks until now)."""
        if not slots:
            return
        idx = torch.tensor(slots, device=self.device)
        offsets = self.col0[idx, None] + self.arange - self.anchors.prompt_len[idx, None]     # answer positions
        anchor = self.anchors.at(offsets, rows=idx)
        is_anchor = anchor != NO_ANCHOR
        self.block[idx] = torch.where(is_anchor, anchor, self.block[idx])
        self.masked[idx] &= ~is_anchor

    def reset(self, slot: int) -> None:
        self.masked[slot], self.pending[slot], self.col0[slot] = False, False, 0
        self.anchors.clear(slot)
        for table in (self.host_col0, self.host_plen, self.host_end):
            table.pop(slot, None)
        self.host_pending.discard(slot)

    def forward_shapes(self) -> list[tuple[int, int]]:
        # a denoising forward of the block, and the fused commit's (the finished block, then the new one)
        return [(self.blk, 0), (2 * self.blk, self.blk)]

    # --- one block ----------------------------------------------------------------------------------------

    def step(self) -> list[Update]:
        """Decode one block for every active row.

        Every active row starts the block with masks (a joined row's prompt tail is shorter than a block), so the
        first forward needs no check. Under the generate rules the block ends after the schedule's last forward:
        the masks are not read back before it (at one denoising step, never); that none are left is checked with
        the block's tokens, in the same transfer.
        """
        b, active = self.bucket()
        forwards, last = 0, None if self.lmdeploy else len(self.schedule)
        while True:
            if forwards == last:
                break
            masked = self.masked[:b] & active[:, None]
            if forwards > 0 and not bool(masked.any()):   # a dynamic strategy may finish a block early
                break
            fused = forwards == 0 and bool(self.host_pending & self.active)
            logits = self._forward(b, fused)
            if fused:
                self.pending[:b] = False
                self.host_pending.clear()
            if self.lmdeploy:   # lmdeploy runs a forward for the rows whose block still has masks only
                self.count_forward(masked.any(dim=1).nonzero(as_tuple=True)[0].tolist())
            else:
                self.count_forward()
            if self.lmdeploy:
                self._unmask_lmdeploy(logits, masked, b)
            else:
                self._transfer_generate(logits, masked, b, self.schedule[forwards])
            forwards += 1
        return self._finish_lmdeploy(b) if self.lmdeploy else self._finish_generate(b)

    def _forward(self, b: int, fused: bool) -> torch.Tensor:
        """Logits ``[b, blk, V]`` of the current blocks (module docstring: the fused commit)."""
        blk, col0 = self.blk, self.col0[:b]
        pos = col0[:, None] + self.arange
        limit = (col0 + blk)[:, None].expand(b, blk)
        kv_len = max(self.host_col0[s] for s in self.active) + blk
        if not fused:
            return self.ctx.forward(self.block[:b], pos, pos, limit, kv_len=kv_len)
        pend = self.pending[:b, None]
        prev_pos = torch.where(pend, pos - blk, pos + blk)            # rows with nothing to commit: past the block
        prev_limit = torch.where(pend, col0[:, None], col0[:, None] + blk).expand(b, blk)
        prev_ids = torch.where(pend, self.prev[:b], self.ctx.pad_id)
        both = torch.cat([prev_pos, pos], dim=1)
        return self.ctx.forward(torch.cat([prev_ids, self.block[:b]], dim=1), both, both,
                                torch.cat([prev_limit, limit], dim=1), kv_len=kv_len, logits_from=blk)

    def _transfer_generate(self, logits: torch.Tensor, is_mask: torch.Tensor, b: int, step_k: int) -> None:
        """One denoising step under generate.py rules (:meth:`SDARDecoder._generate_rules`)."""
        s, block = self.settings, self.block[:b]
        if self.penalize:
            filled = torch.zeros_like(self.seen[:b]).scatter_(1, block, ~is_mask)
            logits = apply_repetition_penalty(logits, self.seen[:b] | filled, self.penalty[:b])
        logits[..., self.mask_id] = float("-inf")
        flat = sample_rows(logits.reshape(-1, logits.shape[-1]), self.sampling(b).repeat(self.blk),
                           generator=self.ctx.generator)
        tokens, confidence = flat.tokens.view(block.shape), flat.confidence.view(block.shape)
        ent = entropy(flat.probs).view(block.shape) if s.remasking_strategy == "entropy_bounded" else None
        k = torch.clamp(is_mask.sum(dim=-1), max=step_k)
        transfer = select_transfer(s.remasking_strategy, is_mask, confidence, k,
                                   confidence_threshold=s.confidence_threshold, entropy=ent,
                                   entropy_budget=s.entropy_budget)
        self.block[:b] = torch.where(transfer, tokens, block)
        self.masked[:b] &= ~transfer

    def _unmask_lmdeploy(self, logits: torch.Tensor, masked: torch.Tensor, b: int) -> None:
        """One unmasking forward under lmdeploy's rules (:func:`generate_lmdeploy`)."""
        s, penalize = self.settings, self.penalize
        tokens, confidence = lmdeploy_sample_rows(logits, self.sampling(b), penalty=self.penalty[:b] if penalize
                                                  else None, penalized=self.seen[:b] if penalize else None,
                                                  generator=self.ctx.generator)
        new = lmdeploy_unmask(s.remasking_strategy, masked, confidence, num=self.num,
                              threshold=s.confidence_threshold)
        self.block[:b] = torch.where(new, tokens, self.block[:b])
        self.masked[:b] &= ~new

    # --- after the block --------------------------------------------------------------------------------

    def _next_block(self, slots: list[int]) -> None:
        """Rows that go on (all the active ones: the rest have just finished): the finished block is committed by
        the next forward; a block of masks follows."""
        if not slots:
            return
        idx = self.view().idx
        self.prev[idx] = self.block[idx]
        self.pending[idx] = True
        self.col0[idx] += self.blk
        self.block[idx] = self.mask_id
        self.masked[idx] = True
        self.gen_from[idx], self.ignore_stops[idx] = 0, False
        for slot in slots:
            self.host_col0[slot] += self.blk
        self.host_pending.update(slots)
        self._place_anchors([s for s in slots if s in self.anchors.layouts])

    def _finish_generate(self, b: int) -> list[Update]:
        """generate.py rules: a row ends at a block holding a generated stop id or reaching ``end_pos``."""
        v = self.view()
        blocks, left = to_host(self.block[v.idx], self.masked[v.idx].any(dim=1, keepdim=True))
        if any(m[0] for m in left):
            raise RuntimeError("a block still has masks after its denoising steps (schedule bug)")
        updates, going_on = [], []
        for slot, toks in zip(v.rows, blocks):
            col0, plen = self.host_col0[slot], self.host_plen[slot]
            new, stopped = [], False
            layout = self.anchors.layouts.get(slot)
            if layout is not None:    # the canvas: anchors and slots, stop ids included
                stopped = collect_canvas(new, layout, toks, col0 - plen, self.stop_set)
            for j, tok in enumerate(toks if layout is None else ()):
                if col0 + j >= plen:       # a generated position (the prompt's tail is not)
                    if tok in self.stop_set:
                        stopped = True
                        break
                    new.append(tok)
            out = self.outputs[slot]
            out += new
            self.mark_seen(slot, toks)
            if stopped or col0 + self.blk >= self.host_end[slot]:
                result = Generation(token_ids=out, finish_reason="stop" if stopped else "length")
                updates.append((slot, new, self.finish(slot, result)))
            else:
                updates.append((slot, new, None))
                going_on.append(slot)
        self._next_block(going_on)
        return updates

    def _finish_lmdeploy(self, b: int) -> list[Update]:
        """lmdeploy rules: exact ``max_tokens`` cap, stop ids ignored in the prompt-tail block."""
        v = self.view()
        idx = v.idx
        self.appendable[idx] -= self.blk
        stopped, end = block_stops(self.block[idx], self.appendable[idx], self.ignore_stops[idx], self.stop_ids)
        blocks, firsts, lasts, dones = to_host(self.block[idx], self.gen_from[idx, None], end[:, None],
                                               stopped[:, None])
        updates, going_on = [], []
        for slot, toks, first, last, done in zip(v.rows, blocks, firsts, lasts, dones):
            new = toks[first[0]:last[0]]
            out = self.outputs[slot]
            if done[0]:
                result = finish_lmdeploy(out + new, self.ctx.spec.stop_ids)
                updates.append((slot, result.token_ids[len(out):], self.finish(slot, result)))
            else:
                out += new
                self.mark_seen(slot, new)
                updates.append((slot, new, None))
                going_on.append(slot)
        self._next_block(going_on)
        return updates
