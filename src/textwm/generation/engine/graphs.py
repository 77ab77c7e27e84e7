"""Decode forwards replayed as CUDA graphs, one graph per static shape.

A decode forward of a small batch is mostly kernel-launch time (measured on an H200: 68.6 ms eager vs 10.6 ms
replayed for one Qwen3-8B forward at batch 1). :class:`GraphedForward` captures
:meth:`StaticModel.forward <textwm.generation.engine.static_model.StaticModel.forward>` once per shape key
``(rows bucket, query length, kv_len bucket, logits_from)`` on first use and replays it afterwards; the
caller's tensors are copied into the graph's static inputs first. Shapes are bucketed so that few graphs
cover all batches: rows up to the next power of two, kv_len up to the next multiple of :data:`KV_BUCKET`.
A prefill's forward (:meth:`GraphedForward.prefill`: rows it names, logits of each row's last token) is a graph
per ``(rows, width)`` too, the shapes bucketed by :mod:`textwm.generation.engine.prefill`.

Capture runs the forward for real first (warm-up on a side stream, as CUDA graphs require) with the
caller's inputs already in place; the forward writes only its own columns and is a pure function of its
inputs, so the warm-up changes nothing a replay would not. All graphs share one memory pool, and each copies
its logits into one output buffer per logits width (``[max_rows, width, V]``, allocated outside the graphs),
so memory does not grow with the number of graphs: a graph's output is valid until the next replay of any
graph, and callers consume logits before the next forward.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from textwm.generation.engine.static_model import StaticModel

#: kv_len is rounded up to a multiple of this many columns (one graph per bucket).
KV_BUCKET = 256


def row_bucket(rows: int, max_rows: int) -> int:
    """The smallest power of two >= ``rows`` (capped at ``max_rows``): the batch a graph runs."""
    bucket = 1
    while bucket < rows:
        bucket *= 2
    return min(bucket, max_rows)


def kv_bucket(kv_len: int, capacity: int) -> int:
    return min(-(-kv_len // KV_BUCKET) * KV_BUCKET, capacity)


def row_buckets(max_rows: int) -> list[int]:
    """Every row bucket a forward of ``max_rows`` rows can run (:func:`row_bucket`), ascending."""
    return sorted({row_bucket(rows, max_rows) for rows in range(1, max_rows + 1)})


def kv_buckets(capacity: int) -> list[int]:
    """Every kv_len bucket of a cache of ``capacity`` columns (:func:`kv_bucket`), ascending."""
    return sorted({kv_bucket(kv_len, capacity) for kv_len in range(KV_BUCKET, capacity + KV_BUCKET, KV_BUCKET)})


class GraphedForward:
    """Calls ``net.forward`` eagerly, or through CUDA graphs when ``enabled`` (CUDA only)."""

    def __init__(self, net: StaticModel, *, enabled: bool):
        if enabled and net.device.type != "cuda":
            raise ValueError("CUDA graphs need the model on a CUDA device")
        self.net, self.enabled = net, enabled
        #: Shape key -> (graph, its static inputs by forward argument, its output).
        self._graphs: dict[tuple, tuple[torch.cuda.CUDAGraph, dict[str, torch.Tensor], torch.Tensor]] = {}
        self._pool = torch.cuda.graph_pool_handle() if enabled else None
        # logits width (or ("prefill", 1)) -> [max_rows, width, V]
        self._outputs: dict[int | tuple[str, int], torch.Tensor] = {}
        self._step_graphs: list[torch.cuda.CUDAGraph] = []
        #: True while :meth:`capture_step` runs or captures a step: the step calls ``net.forward`` itself.
        self.capturing = False

    def capture_step(self, step: Callable[[], None]) -> torch.cuda.CUDAGraph:
        """Run a whole decode step once for real, then capture it as a CUDA graph that replays it.

        ``step`` must read and write only tensors that outlive the graph (the family's row state, the cache),
        have fixed shapes, call ``net.forward`` directly (:attr:`capturing` tells it) and never read a device
        value on the host. The real run (on a side stream, as capture requires; it is the step this call
        stands for and warms up the compiled kernels) comes first; the capture itself runs nothing. The
        caller keeps the graph with the tensors it reads (a family's rows), keyed by shape.
        """
        self.capturing = True
        try:
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream), torch.no_grad():
                step()
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self._pool), torch.no_grad():
                step()
        finally:
            self.capturing = False
        # Kept for the engine's life: a graph's destruction releases its share of the shared pool, and a
        # capture into a pool no live graph holds fails (CUDACachingAllocator's use_count assert).
        self._step_graphs.append(graph)
        return graph

    @property
    def num_graphs(self) -> int:
        return len(self._graphs) + len(self._step_graphs)

    def warm(self, rows: int, q: int, kv_len: int, logits_from: int = 0) -> None:
        """Capture the graph of shape key ``(rows, q, kv_len, logits_from)`` now, with placeholder inputs, so that no
        request waits for it (``kv_len`` a bucket). Rows ``0..rows-1`` must be free: the forward writes K/V at
        their columns ``0..q-1``, which a row's prefill overwrites before any query reads them. Eager
        (``enabled`` false): the forward runs once, so the path is the same on the CPU."""
        ids, cols = self._placeholders(rows, q)
        inputs = {"ids": ids, "positions": cols, "cols": cols, "limits": (cols + 1).clamp(max=kv_len)}
        self._run((rows, q, kv_len, logits_from), inputs, {"kv_len": kv_len, "logits_from": logits_from},
                  replay=False)

    def __call__(self, ids: torch.Tensor, positions: torch.Tensor, cols: torch.Tensor, limits: torch.Tensor, *,
                 kv_len: int, logits_from: int = 0) -> torch.Tensor:
        """As :meth:`StaticModel.forward`; with graphs, ``kv_len`` is bucketed (the result is the same)."""
        kv_len = kv_bucket(kv_len, self.net.capacity)
        inputs = {"ids": ids, "positions": positions, "cols": cols, "limits": limits}
        return self._run((ids.shape[0], ids.shape[1], kv_len, logits_from), inputs,
                         {"kv_len": kv_len, "logits_from": logits_from})

    def prefill(self, ids: torch.Tensor, positions: torch.Tensor, cols: torch.Tensor, limits: torch.Tensor,
                rows: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
        """A prefill forward of engine rows ``rows [B]`` (:meth:`StaticModel.forward` with ``rows`` and ``last``,
        over the whole cache: the attention reads each row up to its limits only), replayed as the graph of
        its shape ``[B, Q]`` when ``enabled``: the logits ``[B, 1, V]``, valid until the next prefill."""
        inputs = {"ids": ids, "positions": positions, "cols": cols, "limits": limits, "rows": rows, "last": last}
        return self._run(("prefill", *ids.shape), inputs, {"kv_len": self.net.capacity})

    def warm_prefill(self, rows: int, q: int) -> None:
        """Capture the prefill graph of shape ``[rows, q]`` now, with placeholder inputs; engine rows
        ``0..rows-1`` must be free (their columns ``0..q-1`` are written). Eager: the forward runs once."""
        ids, cols = self._placeholders(rows, q)
        inputs = {"ids": ids, "positions": cols, "cols": cols, "limits": cols + 1,
                  "rows": torch.arange(rows, device=ids.device) % self.net.rows,
                  "last": torch.zeros(rows, dtype=torch.long, device=ids.device)}
        self._run(("prefill", rows, q), inputs, {"kv_len": self.net.capacity}, replay=False)

    def _placeholders(self, rows: int, q: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Placeholder ids and columns ``[rows, q]`` (column ``j`` for query ``j``) of a warm-up capture."""
        dev = self.net.device
        cols = torch.arange(q, device=dev).clamp(max=self.net.capacity - 1).expand(rows, q).contiguous()
        return torch.zeros((rows, q), dtype=torch.long, device=dev), cols

    def _run(self, key: tuple, inputs: dict[str, torch.Tensor], fixed: dict[str, int], *,
             replay: bool = True) -> torch.Tensor | None:
        """``net.forward(**inputs, **fixed)``: eagerly, or as the graph of shape ``key`` (captured on first use,
        ``inputs`` copied into its static inputs before a replay; ``replay=False``: only captured)."""
        if not self.enabled:
            return self.net.forward(**inputs, **fixed)
        entry = self._graphs.get(key)
        if entry is None:
            entry = self._graphs[key] = self._capture(key, inputs, fixed)
        elif replay:
            for static, given in zip(entry[1].values(), inputs.values()):
                static.copy_(given)
        if not replay:
            return None
        graph, _, out = entry
        graph.replay()
        return out

    def _capture(self, key: tuple, inputs: dict[str, torch.Tensor], fixed: dict[str, int]):
        """Capture ``net.forward`` with clones of ``inputs`` as its static inputs: (graph, static inputs, output).
        The output is a view of the buffer of its logits width, shared by the graphs of that width (a prefill's
        last-token logits have their own)."""
        static = {name: t.clone() for name, t in inputs.items()}
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream), torch.no_grad():
            self.net.forward(**static, **fixed)   # warm-up (idempotent)
        torch.cuda.current_stream().wait_stream(stream)
        rows, q = static["ids"].shape
        prefill = "last" in static
        width = 1 if prefill else q - fixed["logits_from"]
        buffer = ("prefill", 1) if prefill else width
        if buffer not in self._outputs:
            self._outputs[buffer] = torch.empty((self.net.rows, width, self.net.vocab_size), dtype=self.net.dtype,
                                                device=self.net.device)
        out = self._outputs[buffer][:rows]
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool), torch.no_grad():
            out.copy_(self.net.forward(**static, **fixed))
        return graph, static, out
