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
        self._graphs: dict[tuple, tuple[torch.cuda.CUDAGraph, tuple[torch.Tensor, ...],
                                                            torch.Tensor]] = {}
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
        dev, cap = self.net.device, self.net.capacity
        cols = torch.arange(q, device=dev).clamp(max=cap - 1).expand(rows, q).contiguous()
        ids = torch.zeros((rows, q), dtype=torch.long, device=dev)
        limits = (cols + 1).clamp(max=kv_len)
        if not self.enabled:
            self.net.forward(ids, cols, cols, limits, kv_len=kv_len, logits_from=logits_from)
            return
        key = (rows, q, kv_len, logits_from)
        if key not in self._graphs:
            self._graphs[key] = self._capture(key, (ids, cols, cols, limits))

    def __call__(self, ids: torch.Tensor, positions: torch.Tensor, cols: torch.Tensor, limits: torch.Tensor, *,
                 kv_len: int, logits_from: int = 0) -> torch.Tensor:
        """As :meth:`StaticModel.forward`; with graphs, ``kv_len`` is bucketed (the result is the same)."""
        kv_len = kv_bucket(kv_len, self.net.capacity)
        if not self.enabled:
            return self.net.forward(ids, positions, cols, limits, kv_len=kv_len, logits_from=logits_from)
        key = (ids.shape[0], ids.shape[1], kv_len, logits_from)
        entry = self._graphs.get(key)
        if entry is None:
            entry = self._capture(key, (ids, positions, cols, limits))
            self._graphs[key] = entry
        else:
            for static, given in zip(entry[1], (ids, positions, cols, limits)):
                static.copy_(given)
        graph, _, out = entry
        graph.replay()
        return out

    def prefill(self, ids: torch.Tensor, positions: torch.Tensor, cols: torch.Tensor, limits: torch.Tensor,
                rows: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
        """A prefill forward of engine rows ``rows [B]`` (:meth:`StaticModel.forward` with ``rows`` and ``last``,
        over the whole cache: the attention reads each row up to its limits only), replayed as the graph of
        its shape ``[B, Q]`` when ``enabled``: the logits ``[B, 1, V]``, valid until the next prefill."""
        if not self.enabled:
            return self.net.forward(ids, positions, cols, limits, kv_len=self.net.capacity, rows=rows, last=last)
        key = ("prefill", *ids.shape)
        inputs = (ids, positions, cols, limits, rows, last)
        entry = self._graphs.get(key)
        if entry is None:
            entry = self._graphs[key] = self._capture(key, inputs)
        else:
            for static, given in zip(entry[1], inputs):
                static.copy_(given)
        graph, _, out = entry
        graph.replay()
        return out

    def warm_prefill(self, rows: int, q: int) -> None:
        """Capture the prefill graph of shape ``[rows, q]`` now, with placeholder inputs; engine rows
        ``0..rows-1`` must be free (their columns ``0..q-1`` are written). Eager: the forward runs once."""
        dev, cap = self.net.device, self.net.capacity
        cols = torch.arange(q, device=dev).clamp(max=cap - 1).expand(rows, q).contiguous()
        engine_rows = torch.arange(rows, device=dev) % self.net.rows
        inputs = (torch.zeros((rows, q), dtype=torch.long, device=dev), cols, cols, cols + 1, engine_rows,
                  torch.zeros(rows, dtype=torch.long, device=dev))
        key = ("prefill", rows, q)
        if not self.enabled:
            self.prefill(*inputs)
        elif key not in self._graphs:
            self._graphs[key] = self._capture(key, inputs)

    def _capture(self, key: tuple, inputs: tuple[torch.Tensor, ...]):
        """Capture the forward of shape ``key`` (``(rows, q, kv_len, logits_from)``, or ``("prefill", rows, q)``)
        with clones of ``inputs`` as its static inputs: (graph, static inputs, output)."""
        static = tuple(t.clone() for t in inputs)
        if key[0] == "prefill":
            rows, width = key[1], 1
            kwargs = {"kv_len": self.net.capacity, "rows": static[4], "last": static[5]}
            static_args, buffer = static[:4], ("prefill", 1)
        else:
            rows, width = key[0], key[1] - key[3]
            kwargs = {"kv_len": key[2], "logits_from": key[3]}
            static_args, buffer = static, width
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream), torch.no_grad():
            self.net.forward(*static_args, **kwargs)   # warm-up (idempotent)
        torch.cuda.current_stream().wait_stream(stream)
        if buffer not in self._outputs:
            self._outputs[buffer] = torch.empty((self.net.rows, width, self.net.vocab_size), dtype=self.net.dtype,
                                                device=self.net.device)
        out = self._outputs[buffer][:rows]
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool), torch.no_grad():
            out.copy_(self.net.forward(*static_args, **kwargs))
        return graph, static, out
