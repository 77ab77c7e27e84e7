"""Load benchmark of the WM stack: N world-model requests of mixed lengths at concurrency C through proxy ->
server, and the same requests sent directly to the server; for each backend named (the native server and,
side by side on the same checkpoint, prompts and settings, lmdeploy).

Reports per backend and path (``--paths``: direct chat requests, the same streamed, WM payloads through the
proxy): requests/s, generated tokens/s (from the answers' usage), latency percentiles, the mean prompt length,
the latency the proxy adds (proxy path minus direct path) and failures (must be 0); for the native server also
its decode steps/s, rows per step and the share of the wall spent in the decoder (from its ``/metrics``); with
two backends, the share of requests whose greedy texts are equal. Requests mix state lengths
(``--state-words``) and ``max_tokens`` (``--max-tokens MIN MAX``), drawn with a fixed seed. The load client
keeps one HTTP/1.1 connection per concurrent client (:class:`Connection`): httpx's pool was the bottleneck
at 64 connections.

Starts its own servers and proxy on free loopback ports (a tiny random SDAR model unless --model-path is
given) and stops them at the end.

    python scripts/bench_wm_stack.py --requests 1000 --concurrency 64                                  # CPU
    python scripts/bench_wm_stack.py --model-path runs/tiny_ar --requests 512 --concurrency 64 --max-tokens 64 64 \
        --state-words 150 210 --max-model-len 1024 --paths direct stream          # host overhead, ~300-token prompts
    python scripts/bench_wm_stack.py --model-path runs/sdar --device cuda --requests 512 --concurrency 64 \\
        --max-tokens 64 64 --max-batch-size 64 --backends native lmdeploy --dllm-block-length 4 \\
        --dllm-denoising-steps 1
"""

import asyncio
import json
import random
import socket
import statistics
import sys
import tempfile
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import httpx

from textwm.config import ConfigCLI, ConfigError, option
from textwm.data.wm_message import wm_user_message
from textwm.serving.launch import (
    BackendSpec,
    DllmFlags,
    ManagedProcess,
    health_url,
    proxy_command,
    server_command,
)

SYSTEM = "You are the world model of a text game."
WORDS = ["kitchen", "door", "open", "closed", "you", "see", "a", "table", "lamp", "move", "to", "the", "north",
         "fridge", "apple", "counter", "inventory", "is", "empty", "on"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Connection:
    """One keep-alive HTTP/1.1 connection of the load client, written out here: httpx's connection pool spends
    O(connections) per request on bookkeeping (``_assign_requests_to_connections``), and at 64 connections the
    client, not the server, became the bottleneck (py-spy on the client, 2 CPU cores: 86% of its time there)."""

    def __init__(self, url: str):
        parts = urllib.parse.urlsplit(url)
        self.host, self.port, self.path = parts.hostname, parts.port, parts.path or "/"
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, body: dict) -> tuple[int, bytes]:
        """POST ``body`` as JSON; the status and the whole response body (chunked or not)."""
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        data = json.dumps(body).encode()
        self.writer.write(f"POST {self.path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                          f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n".encode() + data)
        status = int((await self.reader.readline()).split()[1])
        headers = {}
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            key, _, value = line.decode("latin-1").partition(":")
            headers[key.strip().lower()] = value.strip()
        if headers.get("transfer-encoding") == "chunked":
            parts = []
            while size := int((await self.reader.readline()).split(b";")[0], 16):
                parts.append(await self.reader.readexactly(size))
                await self.reader.readexactly(2)
            await self.reader.readline()
            payload = b"".join(parts)
        else:
            payload = await self.reader.readexactly(int(headers.get("content-length", 0)))
        if headers.get("connection") == "close":
            self.close()
        return status, payload

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


def joined_stream(payload: bytes) -> dict:
    """A streamed chat answer joined into the plain answer's shape (text, finish reason, usage)."""
    text, reason, usage = [], None, None
    for line in payload.decode().splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if "error" in chunk:
            raise ValueError(f"error event: {chunk['error']}")
        usage = chunk.get("usage") or usage
        for c in chunk["choices"]:
            text.append(c["delta"].get("content") or "")
            reason = c.get("finish_reason") or reason
    return {"choices": [{"message": {"content": "".join(text)}, "finish_reason": reason}], "usage": usage}


async def fire(url: str, bodies: list[dict], concurrency: int):
    """POST every body at ``concurrency`` (one connection per client); returns latencies, failures, wall
    seconds, answers (by index). A body with ``stream: true`` is read as server-sent events (its answer: the
    joined text and the usage)."""
    latencies, failures, answers = [], [], [None] * len(bodies)
    todo = iter(enumerate(bodies))

    async def client() -> None:
        conn = Connection(url)
        for i, body in todo:
            start = time.perf_counter()
            try:
                status, payload = await asyncio.wait_for(conn.post(body), 600)
                if status != 200:
                    failures.append(f"HTTP {status}: {payload[:100]!r}")
                    continue
                answers[i] = joined_stream(payload) if body.get("stream") else json.loads(payload)
                latencies.append(time.perf_counter() - start)
            except (OSError, ValueError, asyncio.IncompleteReadError, asyncio.TimeoutError) as exc:
                failures.append(f"{type(exc).__name__}: {exc}")
                conn.close()
        conn.close()

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    return latencies, failures, time.perf_counter() - started, answers


def pct(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] * 1000 if len(values) > 1 else float("nan")


def make_inputs(args) -> list[dict]:
    rng = random.Random(0)
    lo, hi = args.max_tokens
    return [{"system_prompt": SYSTEM, "action": f"open door {i % 7}", "temperature": 0,
             "state": " ".join(rng.choice(WORDS) for _ in range(rng.randint(*args.state_words))) + f" room {i}.",
             "max_tokens": rng.randint(lo, hi)} for i in range(args.requests)]


def start_backend(backend: str, model: str, args, tmp: Path) -> tuple[ManagedProcess, BackendSpec]:
    dllm = DllmFlags(dllm_block_length=args.dllm_block_length, dllm_denoising_steps=args.dllm_denoising_steps,
                     dllm_unmasking_strategy=getattr(args, "dllm_unmasking_strategy", None))
    spec = BackendSpec(backend=backend, model_path=model, port=free_port(), served_model_name="bench-wm",
                       device=args.device, max_batch_size=args.max_batch_size, max_model_len=args.max_model_len,
                       dllm=dllm)
    argv = server_command(spec)
    if backend == "native":
        argv += ["--temperature", "0", "--max-queue", str(4 * args.requests), *args.server_args.split()]
    else:   # lmdeploy: as a module of this interpreter (its wheel's script may not be on PATH); bf16, shared GPU
        argv = [sys.executable, "-m", *argv, "--dtype", "bfloat16", "--cache-max-entry-count",
                str(args.lmdeploy_cache_share), *getattr(args, "lmdeploy_args", "").split()]
    process = ManagedProcess(backend, tmp)
    process.start(argv)
    process.wait_healthy(health_url(backend, "127.0.0.1", spec.port), args.start_timeout)
    return process, spec


def server_metrics(port: int, names: dict[str, str]) -> dict[str, float]:
    """The native server's ``/metrics`` counters ``names`` (``textwm_<name>`` -> key of the result); a counter
    the server does not export is an error, not a zero."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text
    out = {}
    for line in text.splitlines():
        name = line.split("{", 1)[0].removeprefix("textwm_")
        if name in names:
            out[names[name]] = float(line.rsplit(" ", 1)[1])
    missing = [f"textwm_{name}" for name, key in names.items() if key not in out]
    if missing:
        raise RuntimeError(f"the server on port {port} exports no {', '.join(missing)} on /metrics")
    return out


def engine_counters(port: int) -> dict[str, float]:
    """The native server's step counters (``/metrics``: steps, rows over steps, seconds in the decoder; of those,
    the continuous engine's seconds in prefills and in decode steps; CPU seconds of the event loop's thread, of
    the decode worker's and of the whole process)."""
    return server_metrics(port, {"decode_steps_total": "steps", "step_rows_total": "rows",
                                 "decode_seconds_total": "decode_s", "prefill_seconds_total": "prefill_s",
                                 "step_seconds_total": "step_s", "event_loop_cpu_seconds_total": "loop_cpu_s",
                                 "decode_worker_cpu_seconds_total": "worker_cpu_s",
                                 "process_cpu_seconds_total": "process_cpu_s", "engine_process": "engine_process"})


def chat_bodies(inputs: list[dict], stream: bool) -> list[dict]:
    bodies = [{"model": "bench-wm", "max_tokens": x["max_tokens"], "temperature": 0,
               "chat_template_kwargs": {"enable_thinking": False},
               "messages": [{"role": "system", "content": SYSTEM},
                            {"role": "user", "content": wm_user_message(x["state"], x["action"])}]}
              for x in inputs]
    if stream:
        for b in bodies:
            b.update(stream=True, stream_options={"include_usage": True})
    return bodies


def run_backend(backend: str, model: str, inputs: list[dict], args, tmp: Path) -> dict:
    server, spec = start_backend(backend, model, args, tmp)
    proxy = ManagedProcess(f"proxy-{backend}", tmp)
    chat = f"http://127.0.0.1:{spec.port}/v1/chat/completions"
    runs, counters = {}, {}
    try:
        if "proxy" in args.paths:
            proxy.start(proxy_command(proxy_port := free_port(), f"http://127.0.0.1:{spec.port}"))
            proxy.wait_healthy(f"http://127.0.0.1:{proxy_port}/health", 60)
        asyncio.run(fire(chat, chat_bodies(inputs[:2 * args.concurrency], False), args.concurrency))   # warm-up
        for path in args.paths:
            before = engine_counters(spec.port) if backend == "native" else {}
            if path == "proxy":
                runs[path] = asyncio.run(fire(f"http://127.0.0.1:{proxy_port}/", [{"input": x} for x in inputs],
                                              args.concurrency))
            else:
                runs[path] = asyncio.run(fire(chat, chat_bodies(inputs, path == "stream"), args.concurrency))
            if before:
                after = engine_counters(spec.port)
                counters[path] = {k: v if k == "engine_process" else v - before[k] for k, v in after.items()}
    finally:
        proxy.stop()
        server.stop()
    report = {}
    for name, (lat, failures, secs, answers) in runs.items():
        usage = [a.get("usage") or {} for a in answers if a is not None]
        tokens = sum(u.get("completion_tokens", 0) for u in usage)
        prompt = sum(u.get("prompt_tokens", 0) for u in usage) / max(len(usage), 1)
        report[name] = {"ok": len(lat), "failed": len(failures), "first_failures": failures[:3],
                        "requests_per_s": len(lat) / secs, "generated_tokens_per_s": tokens / secs,
                        "mean_prompt_tokens": prompt,
                        "p50_ms": pct(lat, 50), "p90_ms": pct(lat, 90), "p99_ms": pct(lat, 99), "seconds": secs}
        steps = ""
        if name in counters and counters[name]["steps"]:
            c = counters[name]
            report[name].update(engine_steps_per_s=c["steps"] / secs, rows_per_step=c["rows"] / c["steps"],
                                decoder_share=c["decode_s"] / secs, prefill_share=c["prefill_s"] / secs,
                                ms_per_decode_step=1000 * c["step_s"] / c["steps"],
                                loop_cpu_ms_per_request=1000 * c["loop_cpu_s"] / len(lat),
                                worker_cpu_ms_per_step=1000 * c["worker_cpu_s"] / c["steps"],
                                engine_process=bool(c["engine_process"]),
                                other_cpu_ms_per_request=1000 * (c["process_cpu_s"] - c["loop_cpu_s"] - (
                                    0 if c["engine_process"] else c["worker_cpu_s"])) / len(lat),
                                loop_and_worker_cpu_share=(c["loop_cpu_s"] + c["worker_cpu_s"]) / secs)
            steps = (f", {c['steps'] / secs:6.1f} steps/s ({c['rows'] / c['steps']:4.1f} rows, decoder "
                     f"{100 * c['decode_s'] / secs:3.0f}% of the wall, prefills {100 * c['prefill_s'] / secs:3.0f}%, "
                     f"{1000 * c['step_s'] / c['steps']:.2f} ms a decode step)")
            r = report[name]
            worker = "engine process" if r["engine_process"] else "worker thread"
            steps += (f"; host CPU: event loop {r['loop_cpu_ms_per_request']:.2f} ms a request, {worker} "
                      f"{r['worker_cpu_ms_per_step']:.2f} ms a step, other server threads {r['other_cpu_ms_per_request']:.2f} "
                      f"ms a request; loop + worker {100 * r['loop_and_worker_cpu_share']:.0f}% of the wall")
        print(f"{backend:8s} {name:6s}: {len(lat)}/{len(inputs)} ok, {len(failures)} failed, "
              f"{len(lat) / secs:7.1f} req/s, {tokens / secs:9.1f} tok/s, p50 {pct(lat, 50):7.1f} ms, "
              f"p99 {pct(lat, 99):7.1f} ms, prompt {prompt:.0f} tok{steps}", flush=True)
    if "direct" in runs and "proxy" in runs:
        report["added_by_proxy_ms"] = {q: report["proxy"][f"{q}_ms"] - report["direct"][f"{q}_ms"]
                                       for q in ("p50", "p99")}
    # Texts of the direct path (the proxy refuses empty completions, which random weights often give).
    first = next(p for p in ("direct", "stream", "proxy") if p in runs)
    report["texts"] = [None if a is None else (a["choices"][0]["message"].get("content") or "",
                                               a["choices"][0].get("finish_reason"))
                       for a in runs[first][3]]
    return report


@dataclass
class StackBenchConfig:
    requests: int = option(1000, "requests sent")
    concurrency: int = option(64, "requests in flight")
    max_tokens: list[int] = option(help="each request's max_tokens, drawn in [MIN, MAX]", default_factory=lambda: [8, 24],
                                   metavar="MIN MAX")
    state_words: list[int] = option(help="words of each request's state, drawn in [MIN, MAX]",
                                    default_factory=lambda: [5, 120], metavar="MIN MAX")
    model_path: str | None = option(None, "default: a tiny random SDAR model built here")
    device: str = option("cpu", "native server device")
    backends: list[str] = option(help="servers measured", default_factory=lambda: ["native"],
                                 choices=("native", "lmdeploy"))
    paths: list[str] = option(help="direct: chat requests to the server; stream: the same with stream=true; proxy: "
                                   "WM payloads through the proxy (each after the other, after one warm-up)",
                              default_factory=lambda: ["direct", "proxy"], choices=("direct", "stream", "proxy"))
    max_batch_size: int = option(64, "the servers' rows decoded together")
    max_model_len: int = option(2048, "the servers' prompt + answer limit")
    dllm_block_length: int | None = option(None, "SDAR under lmdeploy's rules: block length (both backends)")
    dllm_denoising_steps: int | None = option(None, "... and denoising steps")
    server_args: str = option("", "more flags for the native server, e.g. '--join-min-rows 16'")
    lmdeploy_cache_share: float = option(0.3, "lmdeploy --cache-max-entry-count")
    start_timeout: float = option(300, "seconds a server may take to report healthy")
    out: str = option("runs/bench_wm_stack.json", "the figures (JSON)")

    def __post_init__(self) -> None:
        for name in ("max_tokens", "state_words"):
            pair = getattr(self, name)
            if len(pair) != 2 or pair[0] > pair[1]:
                raise ConfigError(f"takes MIN MAX, got {pair}", key="--" + name.replace("_", "-"))


def main(argv: list[str] | None = None) -> int:
    parsed = ConfigCLI(StackBenchConfig, prog="scripts/bench_wm_stack.py", description=__doc__,
                       key_values=False).parse_or_report(argv)
    if parsed is None:
        return 2
    args = parsed[0]
    tmp = Path(tempfile.mkdtemp(prefix="bench_wm_"))
    model = args.model_path
    if model is None:
        from textwm.models.tiny import build_tiny_checkpoint

        model = str(build_tiny_checkpoint(tmp / "model", [" ".join(WORDS)] * 50, family="sdar", vocab_size=300))
    inputs = make_inputs(args)
    report = {"requests": args.requests, "concurrency": args.concurrency, "max_tokens": args.max_tokens,
              "state_words": args.state_words, "model": model}
    for backend in args.backends:
        report[backend] = run_backend(backend, model, inputs, args, tmp)
    if len(args.backends) == 2:
        a, b = (report[x].pop("texts") for x in args.backends)
        pairs = [(x, y) for x, y in zip(a, b) if x is not None and y is not None]   # (text, finish reason) each
        report["equal_texts"] = sum(x[0] == y[0] for x, y in pairs) / max(len(pairs), 1)
        report["empty_texts"] = {name: sum(not p[i][0] for p in pairs) for i, name in enumerate(args.backends)}
        report["differing_examples"] = [p for p in pairs if p[0][0] != p[1][0]][:10]
        print(f"{args.backends[0]} and {args.backends[1]} gave equal texts for {100 * report['equal_texts']:.1f}% of "
              f"{len(pairs)} requests")
    else:
        report[args.backends[0]].pop("texts")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    return 0 if all(report[b][path]["failed"] == 0 for b in args.backends for path in args.paths) else 1


if __name__ == "__main__":
    raise SystemExit(main())
