"""Load benchmark of the WM stack: N requests at concurrency C through proxy -> native server, and
the same requests sent directly to the server; reports requests/s, latency percentiles, the latency
the proxy adds (proxy path minus direct path), and failures (must be 0).

Starts its own server and proxy on free loopback ports (a tiny random SDAR model unless
--model-path is given) and stops them at the end.

    python scripts/bench_wm_stack.py --requests 1000 --concurrency 64
"""

import argparse
import asyncio
import json
import socket
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from textwm.data.wm_message import wm_user_message
from textwm.serving.launch import BackendSpec, ManagedProcess, proxy_command, server_command

SYSTEM = "You are the world model of a text game."


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def fire(url: str, bodies: list[dict], concurrency: int) -> tuple[list[float], list[str], float]:
    gate = asyncio.Semaphore(concurrency)
    latencies, failures = [], []
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=300, limits=limits) as client:
        async def one(body):
            async with gate:
                start = time.perf_counter()
                try:
                    r = await client.post(url, json=body)
                    ok = r.status_code == 200
                    if not ok:
                        failures.append(f"HTTP {r.status_code}: {r.text[:100]}")
                except httpx.HTTPError as exc:
                    ok = False
                    failures.append(f"{type(exc).__name__}: {exc}")
                if ok:
                    latencies.append(time.perf_counter() - start)
        started = time.perf_counter()
        await asyncio.gather(*(one(b) for b in bodies))
        return latencies, failures, time.perf_counter() - started


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] * 1000 if len(values) > 1 else float("nan")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, default=1000)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--model-path", default=None, help="default: a tiny random SDAR model built here")
    p.add_argument("--max-batch-size", type=int, default=64)
    p.add_argument("--out", default="runs/bench_wm_stack.json")
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench_wm_"))
    model = args.model_path
    if model is None:
        from textwm.models.tiny import build_tiny_checkpoint

        words = ["kitchen", "door", "open", "closed", "you", "see", "a", "table", "lamp", "move", "to", "the"]
        model = str(build_tiny_checkpoint(tmp / "model", [" ".join(words)] * 50, family="sdar", vocab_size=300))
    server_port, proxy_port = free_port(), free_port()
    server, proxy = ManagedProcess("server", tmp), ManagedProcess("proxy", tmp)
    spec = BackendSpec(backend="native", model_path=model, port=server_port, served_model_name="bench-wm",
                       device="cpu", max_batch_size=args.max_batch_size, max_model_len=2048)
    server.start([*server_command(spec), "--temperature", "0", "--max-queue", str(4 * args.requests)])
    try:
        server.wait_healthy(f"http://127.0.0.1:{server_port}/health", 180)
        proxy.start(proxy_command(proxy_port, f"http://127.0.0.1:{server_port}"))
        proxy.wait_healthy(f"http://127.0.0.1:{proxy_port}/health", 60)
        inputs = [{"system_prompt": SYSTEM, "state": f"You are in room {i % 50}.", "action": f"open door {i % 7}",
                   "max_tokens": args.max_tokens, "temperature": 0} for i in range(args.requests)]
        direct = [{"model": "bench-wm", "max_tokens": args.max_tokens, "temperature": 0,
                   "chat_template_kwargs": {"enable_thinking": False},
                   "messages": [{"role": "system", "content": SYSTEM},
                                {"role": "user", "content": wm_user_message(x["state"], x["action"])}]}
                  for x in inputs]
        asyncio.run(fire(f"http://127.0.0.1:{server_port}/v1/chat/completions", direct[:32], 16))  # warm-up
        runs = {
            "direct": asyncio.run(fire(f"http://127.0.0.1:{server_port}/v1/chat/completions", direct, args.concurrency)),
            "proxy": asyncio.run(fire(f"http://127.0.0.1:{proxy_port}/", [{"input": x} for x in inputs], args.concurrency)),
        }
    finally:
        proxy.stop()
        server.stop()
    report = {"requests": args.requests, "concurrency": args.concurrency, "max_tokens": args.max_tokens}
    for name, (lat, failures, secs) in runs.items():
        report[name] = {"ok": len(lat), "failed": len(failures), "first_failures": failures[:3],
                        "requests_per_s": len(lat) / secs, "p50_ms": pct(lat, 50), "p90_ms": pct(lat, 90),
                        "p99_ms": pct(lat, 99), "seconds": secs}
        print(f"{name:7s}: {len(lat)}/{args.requests} ok, {len(failures)} failed, {len(lat) / secs:7.1f} req/s, "
              f"p50 {pct(lat, 50):7.1f} ms, p90 {pct(lat, 90):7.1f} ms, p99 {pct(lat, 99):7.1f} ms")
    report["added_by_proxy_ms"] = {q: report["proxy"][f"{q}_ms"] - report["direct"][f"{q}_ms"] for q in ("p50", "p99")}
    print(f"latency added by the proxy: p50 {report['added_by_proxy_ms']['p50']:+.1f} ms, "
          f"p99 {report['added_by_proxy_ms']['p99']:+.1f} ms")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    return 0 if all(r[1] == [] for r in runs.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
