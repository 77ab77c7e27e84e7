"""Replay a catalogue of hostile and careless requests against the three real servers; print what they answered.

Starts, on free loopback ports: the native WM server (a tiny random SDAR model, client chat templates
allowed so their limits are probed), the WM proxy in front of it, and the ScienceWorld env server
(one worker). Every probe is sent as raw bytes (or a chunked body); after each one ``/health`` must answer 200.
Then: ``/health`` latency while a slow request (a template of 30,000 x 30,000 loop steps) is being prepared;
poison requests (settings that would overflow the shared sampling step) sent beside healthy ones, counting the
healthy ones that failed; 1,000 requests at concurrency 64 through the proxy, counting failures and connection
resets, with the proxy's ``/health`` timed throughout; a hung upstream behind a proxy with ``--timeout 30``; a
load through proxy -> server with the server killed and restarted mid-run (failures only while it is down, each
within the client's deadline); and how long the server takes to exit on SIGTERM with requests running.

    python scripts/probe_servers.py --out runs/probe_servers.json          # ~5 min on 2 CPU cores
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

from textwm.clients.retry import RetryPolicy
from textwm.clients.wm import WMClient, WMError
from textwm.config import ConfigCLI, option
from textwm.generation.settings import DecodeSettings
from textwm.serving.launch import BackendSpec, ManagedProcess, proxy_command, server_command

JSON = {"content-type": "application/json"}
DEEP = b"[" * 100_000 + b"]" * 100_000
SLOW = "{% for i in range(30000) %}{% for j in range(30000) %}{% endfor %}{% endfor %}x"
MSG = [{"role": "user", "content": "State: hall\n\nAction: look"}]
#: A 10 MB body sent in chunks: no Content-Length to refuse it by.
CHUNKED = "chunked"


def _chunks():
    for _ in range(100):
        yield b"a" * 100_000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def body(obj: object) -> bytes:
    return json.dumps(obj).encode()


def common(path: str) -> list[tuple[str, str, str, dict, bytes]]:
    """Probes every POST route gets: (name, method, path, headers, raw body)."""
    return [("malformed JSON", "POST", path, JSON, b"{oops"),
            ("JSON nested 100,000 deep", "POST", path, JSON, DEEP),
            ("5,000-digit integer", "POST", path, JSON, b'{"x": ' + b"9" * 5000 + b"}"),
            ("lone surrogate", "POST", path, JSON, b'{"x": "a\\ud800"}'),
            ("text/plain (a browser form)", "POST", path, {"content-type": "text/plain"}, b"{}"),
            ("20 MB body", "POST", path, JSON, b'{"x": "' + b"a" * 20_000_000 + b'"}'),
            ("a JSON list", "POST", path, JSON, b"[1, 2]"),
            ("empty body", "POST", path, JSON, b""),
            ("Host of another site (DNS rebinding)", "POST", path, {**JSON, "host": "evil.example"}, b"{}"),
            ("GET on a POST route", "GET", path, {}, b""),
            ("10 MB chunked body (no Content-Length)", "POST", path, JSON, CHUNKED),
            ("NaN and Infinity", "POST", path, JSON, b'{"x": NaN, "temperature": Infinity}'),
            ("unknown route", "GET", "/no/such/route", {}, b""),
            ("/docs", "GET", "/docs", {}, b"")]


def wm_probes() -> list[tuple[str, str, str, dict, bytes]]:
    p = "/v1/chat/completions"
    chat = lambda **kw: body({"messages": MSG, "max_tokens": 4, **kw})  # noqa: E731
    return [*common(p),
            ("unknown field denoise_steps", "POST", p, JSON, chat(denoise_steps=2)),
            ("seed 2^70", "POST", p, JSON, chat(seed=2**70)),
            ("chat_template_kwargs.tokenize", "POST", p, JSON, chat(chat_template_kwargs={"tokenize": True})),
            ("chat_template_kwargs.add_generation_prompt", "POST", p, JSON,
             chat(chat_template_kwargs={"add_generation_prompt": False})),
            ("chat_template_kwargs.conversation", "POST", p, JSON, chat(chat_template_kwargs={"conversation": []})),
            ("broken Jinja template", "POST", p, JSON, chat(chat_template_kwargs={"chat_template": "{% for %}"})),
            ("5 MB model field", "POST", p, JSON, chat(model="m" * 5_000_000)),
            ("max_tokens 0", "POST", p, JSON, chat(max_tokens=0)),
            ("n 100", "POST", p, JSON, chat(n=100)),
            ("no messages", "POST", p, JSON, body({"messages": []})),
            ("role wizard", "POST", p, JSON, body({"messages": [{"role": "wizard", "content": "x"}]})),
            ("stream true", "POST", p, JSON, chat(stream=True)),
            ("prompt past max_model_len", "POST", p, JSON, chat(messages=[{"role": "user", "content": "a " * 40000}])),
            ("unknown model", "POST", p, JSON, chat(model="other")),
            ("temperature 1e-39 (overflows the sampling)", "POST", p, JSON, chat(temperature=1e-39)),
            ("repetition_penalty 1e-300", "POST", p, JSON, chat(repetition_penalty=1e-300)),
            ("num_diffusion_steps 1e9", "POST", p, JSON, chat(num_diffusion_steps=10**9)),
            ("300,000 stop strings, n=4", "POST", p, JSON, chat(stop=[f"s{i}" for i in range(300_000)], n=4)),
            ("max_tokens \"8\" (a string)", "POST", p, JSON, chat(max_tokens="8")),
            ("stream \"yes\"", "POST", p, JSON, chat(stream="yes")),
            ("a message's name field", "POST", p, JSON, chat(messages=[{**MSG[0], "name": "bob"}])),
            ("OpenAI text content parts", "POST", p, JSON,
             chat(messages=[{"role": "user", "content": [{"type": "text", "text": "State: hall"}]}])),
            ("an image content part", "POST", p, JSON,
             chat(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}])),
            ("Host: LOCALHOST", "GET", "/health", {"host": "LOCALHOST"}, b"")]


def proxy_probes() -> list[tuple[str, str, str, dict, bytes]]:
    ok = {"state": "s", "action": "a", "max_tokens": 4}
    return [*common("/"),
            ("unknown field block_length", "POST", "/", JSON, body({"input": {**ok, "block_length": 4}})),
            ("extra key beside input", "POST", "/", JSON, body({"input": ok, "model": "x"})),
            ("no action", "POST", "/", JSON, body({"input": {"state": "s"}})),
            ("max_tokens 0", "POST", "/", JSON, body({"input": {**ok, "max_tokens": 0}})),
            ("max_tokens past the model", "POST", "/", JSON, body({"input": {**ok, "max_tokens": 50_000}})),
            ("temperature Infinity", "POST", "/", JSON, b'{"input": {"state": "s", "action": "a", "temperature": Infinity}}'),
            ("temperature 1e-39", "POST", "/", JSON, body({"input": {**ok, "temperature": 1e-39}})),
            ("num_diffusion_steps 1e9", "POST", "/", JSON, body({"input": {**ok, "num_diffusion_steps": 10**9}}))]


def env_probes() -> list[tuple[str, str, str, dict, bytes]]:
    return [*common("/reset"), *common("/step")[:4],
            ("unknown task", "POST", "/reset", JSON, body({"task_id": "boyl_v0"})),
            ("variation out of range", "POST", "/reset", JSON, body({"task_id": "boil_v999"})),
            ("task_id a number", "POST", "/reset", JSON, body({"task_id": 7})),
            ("unknown field", "POST", "/reset", JSON, body({"task_id": "boil_v0", "colour": "red"})),
            ("5 MB task id", "POST", "/reset", JSON, body({"task_id": "b" * 5_000_000})),
            ("unknown session", "POST", "/step", JSON, body({"session_id": "nope", "action": "look around"})),
            ("action a list", "POST", "/step", JSON, body({"session_id": "nope", "action": ["look"]})),
            ("close an unknown session", "DELETE", "/session/nope", {}, b""),
            ("close a session by a text/plain body", "DELETE", "/session", {"content-type": "text/plain"},
             b"session_id=nope"),
            ("the paper form: step another client's task id", "POST", "/",
             {**JSON, "authorization": "Bearer someone-else"}, body({"task_id": "boil_v0_genabc", "action": "look"}))]


def probe(base: str, probes: list, health: str) -> list[dict]:
    rows = []
    with httpx.Client(timeout=60) as http:
        for name, method, path, headers, raw in probes:
            started = time.perf_counter()
            r = http.request(method, base + path, headers=headers,
                             content=_chunks() if raw == CHUNKED else (raw or None))
            seconds = time.perf_counter() - started
            ok = http.get(base + health).status_code == 200
            kind = None
            with contextlib.suppress(ValueError, AttributeError):
                kind = r.json().get("error", {}).get("type")
            rows.append({"probe": name, "status": r.status_code, "error_type": kind, "body_bytes": len(r.content),
                         "seconds": round(seconds, 3), "healthy_after": ok})
    return rows


def health_during_slow_request(base: str) -> float:
    """The slowest of 10 /health answers while a slow client template is being rendered (seconds)."""
    slow = threading.Thread(target=lambda: httpx.post(base + "/v1/chat/completions", timeout=60, json={
        "messages": MSG, "max_tokens": 4, "chat_template_kwargs": {"chat_template": SLOW}}))
    slow.start()
    time.sleep(0.3)
    worst = 0.0
    for _ in range(10):
        started = time.perf_counter()
        httpx.get(base + "/health", timeout=10)
        worst = max(worst, time.perf_counter() - started)
        time.sleep(0.1)
    slow.join(60)
    return worst


def poison_beside_healthy(base: str, healthy: int = 16) -> dict:
    """Healthy requests and poison ones (settings that would overflow a shared sampling step) sent at once."""
    poisons = [{"temperature": 1e-39}, {"repetition_penalty": 1e-300}, {"temperature": 1e-30, "top_p": 0.5}] * 2
    bodies = [({"temperature": 0.7, "seed": i}, True) for i in range(healthy)] + [(p, False) for p in poisons]

    def send(item):
        extra, is_healthy = item
        r = httpx.post(base + "/v1/chat/completions", json={"messages": MSG, "max_tokens": 8, **extra}, timeout=120)
        return is_healthy, r.status_code

    with concurrent.futures.ThreadPoolExecutor(len(bodies)) as pool:
        answers = list(pool.map(send, bodies))
    return {"healthy": healthy, "healthy_failed": sum(ok and status != 200 for ok, status in answers),
            "poison": len(poisons), "poison_statuses": sorted({status for ok, status in answers if not ok})}


#: A process that times GET <url> every 50 ms until a line arrives on stdin, then prints the latencies.
HEALTH_WATCH = """
import sys, threading, time, httpx
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
seen = []
with httpx.Client(timeout=10) as http:
    while not stop.is_set():
        t = time.perf_counter(); http.get(sys.argv[1]); seen.append(time.perf_counter() - t); time.sleep(0.05)
print(" ".join(f"{x:.4f}" for x in seen))
"""


def load_through_proxy(proxy_url: str, requests: int = 1000, concurrency: int = 64) -> dict:
    """``requests`` WM requests at ``concurrency`` through the proxy (keep-alive connections): failures,
    connection resets, and the proxy's ``/health`` latency sampled throughout."""
    payload = {"input": {"state": "hall", "action": "look", "max_tokens": 4}}
    statuses: list[int] = []
    resets = 0
    lock = threading.Lock()
    # /health is timed from a process of its own: a thread here would wait on this process's 64 client threads
    # (one interpreter lock), which is not the proxy's latency.
    watcher = subprocess.Popen([sys.executable, "-c", HEALTH_WATCH, proxy_url + "/health"], stdout=subprocess.PIPE,
                               stdin=subprocess.PIPE, text=True)

    def worker(n: int) -> None:
        nonlocal resets
        with httpx.Client(timeout=120) as http:
            for _ in range(n):
                try:
                    status = http.post(proxy_url + "/", json=payload).status_code
                except (httpx.RemoteProtocolError, httpx.ReadError, httpx.ConnectError):
                    with lock:
                        resets += 1
                    continue
                with lock:
                    statuses.append(status)

    started = time.perf_counter()
    per = [requests // concurrency + (i < requests % concurrency) for i in range(concurrency)]
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(worker, per))
    seconds = time.perf_counter() - started
    out, _ = watcher.communicate("stop\n", timeout=30)
    health_s = [float(x) for x in out.split()]
    return {"requests": requests, "concurrency": concurrency, "ok": statuses.count(200),
            "failed": sum(s != 200 for s in statuses), "resets": resets, "seconds": round(seconds, 1),
            "health_max_s": round(max(health_s, default=0.0), 3),
            "health_p50_s": round(sorted(health_s)[len(health_s) // 2], 3) if health_s else None}


def sigterm_exit(server: ManagedProcess, base: str) -> dict:
    """Seconds from SIGTERM to exit while requests run on the server (they get answers or errors, not hangs)."""
    def running() -> None:
        with contextlib.suppress(httpx.HTTPError):
            httpx.post(base + "/v1/chat/completions", json={"messages": MSG, "max_tokens": 64}, timeout=60)

    threads = [threading.Thread(target=running) for _ in range(8)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    started = time.monotonic()
    server.stop(grace_s=30)
    seconds = time.monotonic() - started
    for t in threads:
        t.join(60)
    return {"exit_s": round(seconds, 2)}


def hung_upstream(timeout_s: float) -> dict:
    """A proxy in front of an upstream that lists a model and never answers a completion."""
    class Hang(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            data = body({"data": [{"id": "m", "owned_by": "textwm"}]})
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self):
            time.sleep(timeout_s * 3)

    upstream = ThreadingHTTPServer(("127.0.0.1", 0), Hang)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    port = free_port()
    proc = ManagedProcess("hung_proxy", Path(tempfile.mkdtemp()))
    proc.start([*proxy_command(port, f"http://127.0.0.1:{upstream.server_address[1]}"), "--timeout", str(timeout_s)])
    try:
        proc.wait_healthy(f"http://127.0.0.1:{port}/health", 60)
        started = time.perf_counter()
        r = httpx.post(f"http://127.0.0.1:{port}/", json={"input": {"state": "s", "action": "a"}},
                       timeout=timeout_s * 4)
        return {"timeout_s": timeout_s, "status": r.status_code, "seconds": round(time.perf_counter() - started, 2)}
    finally:
        proc.stop()
        upstream.shutdown()


def killed_upstream(server: ManagedProcess, server_argv: list[str], server_health: str, proxy_url: str,
                    requests: int = 240, concurrency: int = 8, deadline_s: float = 10.0) -> dict:
    """Requests through the proxy while the server is killed after 2 s and restarted 3 s later."""
    down: dict[str, float] = {}
    results: list[tuple[float, float, bool]] = []

    def one(i: int) -> None:
        started = time.monotonic()
        try:
            with WMClient(proxy_url, timeout_s=deadline_s, retry=RetryPolicy(max_retries=2, backoff_s=0.2),
                          max_tokens=4) as wm:
                wm.predict("sys", f"state {i}", "look")
            ok = True
        except WMError:
            ok = False
        results.append((started, time.monotonic(), ok))
        time.sleep(0.05)

    def chaos() -> None:
        time.sleep(2.0)
        server.stop(grace_s=0.1)
        down["at"] = time.monotonic()
        time.sleep(3.0)
        server.start(server_argv)
        server.wait_healthy(server_health, 180)
        down["back"] = time.monotonic()

    killer = threading.Thread(target=chaos)
    killer.start()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, range(requests)))
    killer.join()
    failed = [(s, e) for s, e, ok in results if not ok]
    after = [ok for s, e, ok in results if s > down.get("back", float("inf"))]
    return {"requests": len(results), "failed": len(failed),
            "failed_outside_the_outage": sum(1 for s, e in failed if e < down["at"] or s > down["back"]),
            "slowest_failure_s": round(max((e - s for s, e in failed), default=0.0), 2), "deadline_s": deadline_s,
            "outage_s": round(down["back"] - down["at"], 1), "after_recovery": len(after),
            "failed_after_recovery": after.count(False)}


def table(title: str, rows: list[dict]) -> str:
    lines = [f"## {title}", "", "| probe | status | error type | body bytes | seconds | healthy after |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['probe']} | {r['status']} | {r['error_type']} | {r['body_bytes']} | {r['seconds']} | "
              f"{'yes' if r['healthy_after'] else 'NO'} |" for r in rows]
    return "\n".join(lines)


@dataclass
class ProbeConfig:
    out: str = option("runs/probe_servers.json", "the probes' results (JSON)")
    hung_timeout: float = option(30.0, "the hung-upstream proxy's --timeout")


def main(argv: list[str] | None = None) -> int:
    parsed = ConfigCLI(ProbeConfig, prog="scripts/probe_servers.py", description=__doc__,
                       key_values=False).parse_or_report(argv)
    if parsed is None:
        return 2
    args = parsed[0]
    from textwm.models.tiny import build_tiny_checkpoint

    tmp = Path(tempfile.mkdtemp(prefix="probe_"))
    words = ["kitchen", "door", "open", "closed", "you", "see", "a", "table", "hall", "look", "state", "action"]
    model = str(build_tiny_checkpoint(tmp / "model", [" ".join(words)] * 50, family="sdar", vocab_size=300))
    ports = {name: free_port() for name in ("server", "proxy", "env")}
    spec = BackendSpec(backend="native", model_path=model, port=ports["server"], served_model_name="probe-wm",
                       device="cpu", max_model_len=2048, decode=DecodeSettings(gen_length=8, temperature=0.0))
    server_argv = [*server_command(spec), "--allow-client-chat-template"]
    server, proxy, env = (ManagedProcess(n, tmp) for n in ("server", "proxy", "env"))
    urls = {n: f"http://127.0.0.1:{port}" for n, port in ports.items()}
    report: dict = {}
    try:
        server.start(server_argv)
        env.start([sys.executable, str(Path(__file__).resolve().parents[1] / "sciworld" / "sciworld_env_server.py"),
                   "--port", str(ports["env"]), "--workers", "1", "--max-sessions-per-worker", "2"])
        server.wait_healthy(urls["server"] + "/health", 180)
        proxy.start([*proxy_command(ports["proxy"], urls["server"]), "--timeout", "30"])
        proxy.wait_healthy(urls["proxy"] + "/health", 60)
        env.wait_healthy(urls["env"] + "/health", 180)
        report["wm_server"] = probe(urls["server"], wm_probes(), "/health")
        report["proxy"] = probe(urls["proxy"], proxy_probes(), "/health")
        report["env_server"] = probe(urls["env"], env_probes(), "/health")
        report["health_during_slow_request_s"] = round(health_during_slow_request(urls["server"]), 3)
        report["poison_beside_healthy"] = poison_beside_healthy(urls["server"])
        report["load_through_proxy"] = load_through_proxy(urls["proxy"])
        report["killed_upstream"] = killed_upstream(server, server_argv, urls["server"] + "/health",
                                                    urls["proxy"] + "/")
        report["sigterm"] = sigterm_exit(server, urls["server"])
    finally:
        for proc in (proxy, server, env):
            proc.stop()
    report["hung_upstream"] = hung_upstream(args.hung_timeout)
    for name in ("wm_server", "proxy", "env_server"):
        print(table(name, report[name]), "\n")
    all_rows = [r for n in ("wm_server", "proxy", "env_server") for r in report[n]]
    report["summary"] = {"probes": len(all_rows), "status_500": sum(r["status"] >= 500 for r in all_rows),
                         "unhealthy_after": sum(not r["healthy_after"] for r in all_rows),
                         "healthy_failed_beside_poison": report["poison_beside_healthy"]["healthy_failed"]}
    print(f"summary: {report['summary']}; /health during a slow request: {report['health_during_slow_request_s']} s"
          f" at worst; poison beside healthy: {report['poison_beside_healthy']}; load through the proxy: "
          f"{report['load_through_proxy']}; SIGTERM: {report['sigterm']}; hung upstream: {report['hung_upstream']}; "
          f"killed upstream: {report['killed_upstream']}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    summary = report["summary"]
    return 0 if summary["status_500"] == summary["unhealthy_after"] == summary["healthy_failed_beside_poison"] == 0 \
        else 1


if __name__ == "__main__":
    raise SystemExit(main())
