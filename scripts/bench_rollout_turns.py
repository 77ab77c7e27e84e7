"""Benchmark of the simulator side of a GRPO step: episodes played turn by turn in lockstep through the one
episode driver (local responder, then the world model behind ``--wm-endpoint``), as ms-swift's colocate loop
plays them: every unfinished episode's turn at once (``--threads`` worker threads, like ``asyncio.to_thread``'s
default pool), then the next turn.

The agent's replies are the gold demos' actions (``sft_train.jsonl``), replayed whatever the world model answers,
so the load is the rollout path's and not a policy's: ``--tasks`` task rows x ``--group`` episodes each (a GRPO
group shares its start), at most ``--max-turns`` turns. Prints the wall of each lockstep turn (what a GRPO step
waits for besides the agent's generation), the world-model call's latency percentiles, and how many steps the
local responder and the world model answered.

    python scripts/bench_rollout_turns.py --env sciworld --data-dir runs/lifespan3 \\
        --wm-endpoint http://127.0.0.1:30000/ --tasks 4 --group 8 --rounds 3 --wm-max-tokens 96
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from textwm.clients.retry import RetryPolicy
from textwm.clients.wm import WMClient
from textwm.config import ConfigCLI, option
from textwm.data.jsonl import read_jsonl
from textwm.envs.registry import env_names, get_env
from textwm.envs.simulator import Simulator
from textwm.rl.swift_adapters import EpisodeDriver


class TimedWM(WMClient):
    """The WM client, with each call's wall recorded (thread-safe)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.latencies: list[float] = []
        self._latency_lock = threading.Lock()

    def predict(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return super().predict(*args, **kwargs)
        finally:
            with self._latency_lock:
                self.latencies.append(time.perf_counter() - start)


def demo_actions(path: Path) -> list[list[str]]:
    """Each gold demo's actions (its assistant messages), in file order."""
    return [[m["content"] for m in row["messages"] if m["role"] == "assistant"] for row in read_jsonl(path).rows]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))] if ordered else float("nan")


def play_round(driver: EpisodeDriver, rows: list[dict], demos: list[list[str]], args, pool) -> list[float]:
    """One GRPO-step-shaped round; returns the wall of each lockstep turn in seconds."""
    episodes = []
    for t, row in enumerate(rows):
        for _ in range(args.group):
            episodes.append((driver.begin(row, row.get("messages") or ()), demos[t % len(demos)]))
    walls = []
    for turn in range(args.max_turns):
        live = [(state, actions) for state, actions in episodes if not driver.finished(state)]
        if not live:
            break
        start = time.perf_counter()
        replies = [actions[turn] if turn < len(actions) else "look around" for _, actions in live]
        list(pool.map(driver.turn, [state for state, _ in live], replies))
        walls.append(time.perf_counter() - start)
    return walls


@dataclass
class RolloutTurnsConfig:
    env: str = option(help="the env", choices=env_names())
    data_dir: str = option(help="the env builder's folder: rl_train.jsonl and sft_train.jsonl")
    wm_endpoint: str = option(help="the WM proxy's URL")
    tasks: int = option(4, "task rows a round (GRPO tasks per step)")
    group: int = option(8, "episodes per task (GRPO num_generations)")
    rounds: int = option(3, "rounds of turns")
    max_turns: int = option(8, "turns per episode at most")
    threads: int = option(20, "worker threads (asyncio.to_thread's default on 16 cores)")
    wm_max_tokens: int = option(96, "the world model's tokens per answer")
    wm_temperature: float = option(0.7, "the world model's sampling temperature")
    local: bool = option(True, "answer from the env's local responder where state decides (--no-local: every step "
                               "to the world model)")
    wm_retries: int = option(3, "WM client retries (0: a failed call fails at once)")
    on_wm_error: str = option("end", "a failed WM call ends the episode (as in GRPO by default) or is substituted, so "
                                     "that an untrained world model still makes whole episodes of load",
                              choices=("end", "fallback"))
    out: str = option("", "write the figures as JSON here")


def main(argv: list[str] | None = None) -> int:
    parsed = ConfigCLI(RolloutTurnsConfig, prog="scripts/bench_rollout_turns.py", description=__doc__.split("\n\n")[0], key_values=False).parse_or_report(argv)
    if parsed is None:
        return 2
    args = parsed[0]

    data = Path(args.data_dir)
    rows = read_jsonl(data / "rl_train.jsonl").rows
    demos = demo_actions(data / "sft_train.jsonl")
    wm = TimedWM(args.wm_endpoint, max_tokens=args.wm_max_tokens, temperature=args.wm_temperature,
                 retry=RetryPolicy(max_retries=args.wm_retries))
    simulator = Simulator(wm, use_local=args.local, on_wm_error=args.on_wm_error)
    driver = EpisodeDriver(get_env(args.env), simulator, max_turns=args.max_turns)
    walls: list[float] = []
    with ThreadPoolExecutor(args.threads) as pool:
        for r in range(args.rounds):
            chosen = [rows[(r * args.tasks + i) % len(rows)] for i in range(args.tasks)]
            round_walls = play_round(driver, chosen, demos, args, pool)
            walls += round_walls
            print(f"round {r}: {len(round_walls)} turns, {sum(round_walls):.2f} s "
                  f"({', '.join(f'{w * 1000:.0f}' for w in round_walls)} ms)", flush=True)
    stats = simulator.stats
    figures = {"episodes_per_round": args.tasks * args.group, "rounds": args.rounds, "threads": args.threads,
               "turn_wall_mean_ms": 1000 * statistics.mean(walls), "turn_wall_max_ms": 1000 * max(walls),
               "wm_calls": len(wm.latencies), "wm_p50_ms": 1000 * pct(wm.latencies, 50),
               "wm_p90_ms": 1000 * pct(wm.latencies, 90), "wm_max_ms": 1000 * max(wm.latencies, default=0.0),
               "local_answers": stats.local, "wm_answers": stats.wm, "wm_errors": stats.wm_errors}
    print(json.dumps(figures, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
