"""Benchmark of the real ScienceWorld env server, through real server processes on free ports.

(a) gold: the gold action sequence of every task at variation 0 (simplification "easy", read from a
    local env) played through the server, stopping when the episode is done; every score must be 100.
(b) parallel: 8 sessions at once, each playing a different task's gold sequence; no error allowed.
(c) throughput: steps/s with 1, 2 and 4 workers, 8 concurrent clients on the fast path (no valid
    actions), each stepping a mix of actions that never ends the episode on its own session, after
    a warm-up; then the latency of a reset in an open session (same JVM).

    python scripts/bench_sciworld_server.py --out runs/bench_sciworld_server.json
"""

import json
import logging
import socket
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from textwm.config import ConfigCLI, option
from textwm.envs.client import EnvClient
from textwm.envs.protocol import EnvError
from textwm.envs.sciworld.env import SciWorldEnv, task_catalog
from textwm.serving.launch import ManagedProcess

REPO = Path(__file__).resolve().parents[1]
log = logging.getLogger("bench_sciworld_server")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gold_sequences() -> dict[str, list[str]]:
    """``{task: gold actions}`` at variation 0 with the server's default simplification (easy)."""
    env = SciWorldEnv()
    try:
        golds = {}
        for task in sorted(task_catalog()):
            env.reset(f"{task}_v0", gold_path=True)
            golds[task] = env.gold_actions()
        return golds
    finally:
        env.close()


def start_server(run_dir: Path, workers: int, sessions_per_worker: int) -> tuple[ManagedProcess, str]:
    port = free_port()
    proc = ManagedProcess(f"sciworld_env_w{workers}", run_dir)
    proc.start([sys.executable, str(REPO / "sciworld" / "sciworld_env_server.py"), "--port", str(port),
                "--workers", str(workers), "--max-sessions-per-worker", str(sessions_per_worker)])
    started = time.monotonic()
    proc.wait_healthy(f"http://127.0.0.1:{port}/health", 300)
    log.info("server with %d worker(s) healthy after %.1f s", workers, time.monotonic() - started)
    return proc, f"http://127.0.0.1:{port}"


def play_gold(url: str, task: str, gold: list[str]) -> dict:
    """Play ``gold`` until done; the score, steps taken, trailing gold actions left unplayed, any error."""
    score, done, steps, error = 0.0, False, 0, None
    try:
        with EnvClient(url, timeout_s=300) as env:
            env.reset(f"{task}_v0")
            for action in gold:
                result = env.step(action)
                steps, score, done = steps + 1, result.score, result.done
                if done:
                    break
    except EnvError as exc:
        error = str(exc)
        log.error("%s: %s", task, exc)
    return {"task": task, "gold_len": len(gold), "steps": steps, "trailing": len(gold) - steps, "score": score,
            "done": done, "error": error}


#: A step mix that never ends an episode (no "focus on"): teleport, look, open/close, examine, inventory.
CYCLE = ["look around", "go to kitchen", "look around", "open cupboard", "look at cupboard", "close cupboard",
         "go to hallway", "inventory"]


def throughput(url: str, tasks: list[str], seconds: float, warmup_steps: int) -> dict:
    """One client thread per task steps :data:`CYCLE` on its own session for ``seconds`` (after
    ``warmup_steps`` untimed steps: a fresh JVM runs ~2x slower until its JIT has warmed up), then
    times three resets of its session (same JVM)."""
    stop, barrier = threading.Event(), threading.Barrier(len(tasks) + 1)
    step_ms, reset_ms = [], []
    lock = threading.Lock()

    def client(task: str) -> int:
        with EnvClient(url, timeout_s=300) as env:
            env.reset(f"{task}_v0")                          # the JVM start is outside the window
            for i in range(warmup_steps):
                env.step(CYCLE[i % len(CYCLE)])
            barrier.wait()
            steps = 0
            while not stop.is_set():
                t0 = time.perf_counter()
                env.step(CYCLE[steps % len(CYCLE)])
                with lock:
                    step_ms.append(1000 * (time.perf_counter() - t0))
                steps += 1
            barrier.wait()
            for _ in range(3):
                t0 = time.perf_counter()
                env.reset(f"{task}_v0")
                with lock:
                    reset_ms.append(1000 * (time.perf_counter() - t0))
            return steps

    with ThreadPoolExecutor(len(tasks)) as ex:
        futures = [ex.submit(client, t) for t in tasks]
        barrier.wait()
        started = time.perf_counter()
        time.sleep(seconds)
        stop.set()
        barrier.wait()
        wall = time.perf_counter() - started
        steps = sum(f.result() for f in futures)
    q = statistics.quantiles(step_ms, n=10)
    return {"clients": len(tasks), "seconds": round(wall, 1), "steps": steps, "steps_per_s": round(steps / wall, 1),
            "step_p50_ms": round(statistics.median(step_ms), 1), "step_p90_ms": round(q[8], 1),
            "reset_p50_ms": round(statistics.median(reset_ms), 1)}


@dataclass
class SciServerBenchConfig:
    workers: list[int] = option(help="worker counts for (c)", default_factory=lambda: [1, 2, 4])
    clients: int = option(8, "concurrent sessions in (b) and (c)")
    seconds: float = option(20.0, "measurement window of (c) per worker count")
    warmup_steps: int = option(200, "untimed steps per client before (c)")
    out: str = option("runs/bench_sciworld_server.json", "the figures (JSON)")


def main(argv: list[str] | None = None) -> int:
    parsed = ConfigCLI(SciServerBenchConfig, prog="scripts/bench_sciworld_server.py", description=__doc__, key_values=False).parse_or_report(argv)
    if parsed is None:
        return 2
    args = parsed[0]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    for name in ("py4j", "scienceworld"):
        logging.getLogger(name).setLevel(logging.WARNING)
    run_dir = Path(tempfile.mkdtemp(prefix="bench_sciworld_"))

    started = time.monotonic()
    golds = gold_sequences()
    log.info("gold sequences of %d tasks read in %.1f s", len(golds), time.monotonic() - started)

    proc, url = start_server(run_dir, workers=2, sessions_per_worker=args.clients)
    try:
        started = time.monotonic()
        with ThreadPoolExecutor(4) as ex:
            gold_rows = list(ex.map(lambda t: play_gold(url, t, golds[t]), sorted(golds)))
        gold_s = time.monotonic() - started
        started = time.monotonic()
        tasks = sorted(golds)[: args.clients]
        with ThreadPoolExecutor(args.clients) as ex:
            parallel = list(ex.map(lambda t: play_gold(url, t, golds[t]), tasks))
        parallel_s = time.monotonic() - started
    finally:
        proc.stop()

    rates = []
    for workers in args.workers:
        proc, url = start_server(run_dir, workers=workers, sessions_per_worker=args.clients)
        try:
            rates.append({"workers": workers, **throughput(url, sorted(golds)[: args.clients], args.seconds,
                                                           args.warmup_steps)})
        finally:
            proc.stop()

    print("\n(a) gold sequences at variation 0 (simplification easy), played until done:\n")
    print("| task | gold actions | steps to done | trailing | done | score |\n|---|---|---|---|---|---|")
    for r in gold_rows:
        print(f"| {r['task']} | {r['gold_len']} | {r['steps']} | {r['trailing']} | {r['done']} | {r['score']:g} |")
    perfect = sum(r["score"] == 100 and r["done"] for r in gold_rows)
    print(f"\n{perfect}/{len(gold_rows)} tasks scored 100; {sum(r['steps'] for r in gold_rows)} steps in {gold_s:.1f} s "
          "(4 clients, 2 workers, JVM starts included)")
    ok = sum(r["score"] == 100 for r in parallel)
    errors = sum(r["error"] is not None for r in [*gold_rows, *parallel])
    print(f"\n(b) {len(parallel)} parallel sessions: {ok}/{len(parallel)} scored 100 in {parallel_s:.1f} s wall; "
          f"errors in (a) and (b): {errors}\n")
    print(f"(c) throughput, {args.clients} concurrent clients, fast path, {args.seconds:g} s after "
          f"{args.warmup_steps} warm-up steps per client; then 3 resets per open session:\n")
    print("| workers | steps | steps/s | step p50 ms | step p90 ms | reset p50 ms |\n|---|---|---|---|---|---|")
    for r in rates:
        print(f"| {r['workers']} | {r['steps']} | {r['steps_per_s']} | {r['step_p50_ms']} | {r['step_p90_ms']} | "
              f"{r['reset_p50_ms']} |")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"gold": gold_rows, "gold_s": gold_s, "parallel": parallel,
                                          "parallel_s": parallel_s, "throughput": rates}, indent=1))
    return 0 if perfect == len(gold_rows) and ok == len(parallel) else 1


if __name__ == "__main__":
    raise SystemExit(main())
