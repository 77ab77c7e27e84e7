"""Probes of a world model on the facts a ScienceWorld lifespan task turns on, against the real env.

An agent in a lifespan task walks outside and focuses on an animal; its reward decides on two facts a world
model must keep: which animals are outside, and that a focus on an animal that is not there does nothing. For
each held-out task row the real env plays the gold walk up to the focus (the simulated episode follows the real
observations, so the world model is asked from the real history), then three actions are put both to the real
env and to the world model, from the same state:

- ``look around`` outside: the objects each lists (set precision / recall of the world model's against the real);
- ``focus on <absent animal>`` (an animal that is the answer of another task row and is not in the real
  listing): does each accept it ("You focus on ...")? The real env never does;
- ``focus on <right animal>`` (the gold focus): does each accept it?

    python -m textwm.envs.sciworld.probes --rows runs/lifespan3/rl_test.jsonl --wm-endpoint http://127.0.0.1:30000 \
        --out runs/probes_ar

writes ``probes.jsonl`` (one record per row) and ``probes.json`` (the rates) in ``--out``.
"""

from __future__ import annotations

import re
import sys
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from textwm.clients.wm import WMClient, WMError
from textwm.config import ConfigCLI, option
from textwm.data.jsonl import read_jsonl, write_json, write_jsonl
from textwm.envs.registry import get_env
from textwm.envs.sciworld.env import SciWorldEnv
from textwm.envs.sim_cache import SimTaskCache

#: The actions the gold walk ends before (a focus ends a lifespan task).
FOCUS = "focus on "
#: The task types probed: the three lifespan ones.
TASK_PREFIX = "lifespan-"
REAL = "real"


def listed_objects(observation: str) -> set[str]:
    """The objects a ``look around`` lists in the room (the tab-indented lines after "you see:" up to the doors),
    articles dropped: ``"\\ta baby elephant"`` -> ``"baby elephant"``."""
    text = observation.split("You also see:", 1)[0]
    if "you see:" in text:
        text = text.split("you see:", 1)[1]
    objects = set()
    for line in text.splitlines():
        item = re.sub(r"^(?:an?|the)\s+", "", line.strip(), flags=re.IGNORECASE)
        if item and line.startswith(("\t", " ")):
            objects.add(item.lower())
    return objects


def accepts_focus(observation: str | None) -> bool:
    """Does an answer to ``focus on X`` accept the focus?"""
    return observation is not None and "you focus on" in observation.lower()


@dataclass
class RowProbe:
    """One task row's probes: each action's real and world-model answers (None: the world model failed)."""

    task_id: str
    right: str
    absent: str
    look_real: str
    look_wm: str | None
    absent_real: str
    absent_wm: str | None
    right_real: str
    right_wm: str | None
    error: str | None = None

    def figures(self) -> dict[str, Any]:
        real, wm = listed_objects(self.look_real), listed_objects(self.look_wm or "")
        return {"look_exact": real == wm, "look_precision": len(real & wm) / len(wm) if wm else 0.0,
                "look_recall": len(real & wm) / len(real) if real else 1.0,
                "absent_accepted_real": accepts_focus(self.absent_real),
                "absent_accepted_wm": accepts_focus(self.absent_wm),
                "right_accepted_real": accepts_focus(self.right_real), "right_accepted_wm": accepts_focus(self.right_wm)}


def gold_focus(env: Any, task_id: str, options: dict[str, Any]) -> tuple[list[str], str]:
    """The gold walk of a task (its actions before the first focus) and the animal the gold run focuses on."""
    env.reset(task_id, gold_path=True, **options)
    gold = env.gold_actions()
    i = next((k for k, a in enumerate(gold) if a.startswith(FOCUS)), None)
    if i is None:
        raise ValueError(f"{task_id}: the gold run never focuses (not a lifespan-style task)")
    return gold[:i], gold[i][len(FOCUS):]


#: Animals to probe an absent focus with, beside the other rows' answers (any name the real env does not list is
#: refused by it, so the pool need not be ScienceWorld's).
ANIMAL_POOL = ("elephant", "giant tortoise", "crocodile", "parrot", "brown bear", "wolf", "beaver", "rabbit",
               "mouse", "dragonfly", "frog", "chipmunk")
#: Words of an animal's name that give its life stage, not its kind.
STAGE_WORDS = {"baby", "adult", "juvenile", "egg", "young"}


def animal_words(name: str) -> set[str]:
    """The words of an animal's kind: the gold runs write ``egg parrot`` and ``baby baby brown bear`` for the
    listing's ``a parrot egg`` and ``a baby brown bear``, and the env's parser takes either."""
    return set(name.lower().split()) - STAGE_WORDS


def absent_animal(task_id: str, look: str, animals: Sequence[str]) -> str:
    """An animal of another row none of whose kind's words the real listing has (chosen by the task id, so reruns
    agree)."""
    listed = set(re.findall(r"[a-z]+", look.lower()))
    candidates = sorted(a for a in {*animals, *ANIMAL_POOL} if animal_words(a) and not animal_words(a) & listed)
    if not candidates:
        raise ValueError(f"{task_id}: every known animal is outside; no absent one to probe with")
    return candidates[zlib.crc32(task_id.encode()) % len(candidates)]


def probe_row(spec: Any, env: Any, wm: WMClient, row: dict[str, Any], walk: list[str], right: str,
              animals: Sequence[str]) -> RowProbe:
    """The three probes of one row (``walk``/``right`` from :func:`gold_focus`): the real env replays the walk from a
    fresh reset and the simulated episode observes the real answers, so both are asked from the same state."""
    start = spec.load_row(row, need_sim=True)
    env.reset(start.task_id, **dict(start.reset_options))
    episode = spec.start_episode(start)
    for action in walk:
        episode.observe(action, env.step(action).observation, REAL)

    def ask(action: str) -> tuple[str | None, str | None]:
        q = episode.wm_query(action)
        try:
            return wm.predict(q.system_prompt, q.state, q.action).observation, None
        except WMError as exc:
            return None, f"{type(exc).__name__}: {exc}"

    look_wm, err1 = ask("look around")
    look_real = env.step("look around").observation
    episode.observe("look around", look_real, REAL)
    absent = absent_animal(start.task_id, look_real, animals)
    absent_wm, err2 = ask(FOCUS + absent)
    right_wm, err3 = ask(FOCUS + right)
    absent_real = env.step(FOCUS + absent).observation
    # Each focus from the same state: the real env replays the walk again (a focus may end its episode).
    env.reset(start.task_id, **dict(start.reset_options))
    for action in [*walk, "look around"]:
        env.step(action)
    right_real = env.step(FOCUS + right).observation
    return RowProbe(start.task_id, right, absent, look_real, look_wm, absent_real, absent_wm, right_real, right_wm,
                    error=err1 or err2 or err3)


def summarize(probes: Sequence[RowProbe]) -> dict[str, Any]:
    """The rates over the rows the world model answered (failures counted apart)."""
    answered = [p for p in probes if p.error is None]
    figures = [p.figures() for p in answered]

    def rate(key: str) -> float | None:
        return round(sum(float(f[key]) for f in figures) / len(figures), 4) if figures else None

    return {"rows": len(probes), "wm_failures": len(probes) - len(answered),
            **{key: rate(key) for key in ("look_exact", "look_precision", "look_recall", "absent_accepted_real",
                                          "absent_accepted_wm", "right_accepted_real", "right_accepted_wm")}}


def run_probes(rows: Sequence[dict[str, Any]], wm: WMClient, out: Path, *, limit: int | None = None,
               workers: int = 1) -> dict[str, Any]:
    """Every row's probes (the first ``limit``), ``workers`` real envs at a time (one JVM each; the world model
    batches their queries); writes ``probes.jsonl`` and ``probes.json`` in ``out``."""

    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    spec = get_env("sciworld")
    cache = SimTaskCache(spec)           # rows without a start state (the paper's) get one baked, as eval does
    rows = [cache.complete_row(r) for r in (list(rows)[:limit] if limit else list(rows))]
    starts = [spec.load_row(r, need_sim=True) for r in rows]
    envs: list[SciWorldEnv] = []
    try:
        envs.extend(SciWorldEnv() for _ in range(min(workers, len(rows)) or 1))
        # Gold foci first: an absent animal is drawn from every row's answer.
        golds = _in_parallel(envs, [lambda env, s=s: gold_focus(env, s.task_id, dict(s.reset_options))
                                    for s in starts])
        animals = [right for _, right in golds]
        probes = _in_parallel(envs, [lambda env, r=r, g=g: probe_row(spec, env, wm, r, g[0], g[1], animals)
                                     for r, g in zip(rows, golds)])
    finally:
        for env in envs:
            env.close()
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(out / "probes.jsonl", [{**asdict(p), **p.figures()} for p in probes])
    summary = summarize(probes)
    write_json(out / "probes.json", summary)
    return summary


def _in_parallel(envs: Sequence[Any], jobs: Sequence[Callable[[Any], Any]]) -> list[Any]:
    """Each job run with an env of its own: job ``i`` on ``envs[i % len(envs)]``, one thread per env taking its
    jobs in order; the results in the jobs' order (the first error is raised)."""
    def worker(k: int) -> list[Any]:
        return [job(envs[k]) for job in jobs[k::len(envs)]]

    with ThreadPoolExecutor(max_workers=len(envs), thread_name_prefix="probe") as pool:
        chunks = list(pool.map(worker, range(len(envs))))
    results: list[Any] = [None] * len(jobs)
    for k, chunk in enumerate(chunks):
        results[k::len(envs)] = chunk
    return results


@dataclass
class ProbesConfig:
    """Lifespan probes of a ScienceWorld world model against the real env."""

    rows: str = option(help="ScienceWorld RL task rows of lifespan tasks (rl_test.jsonl)")
    wm_endpoint: str = option(help="the world model's proxy or server (/predict)")
    out: str = option(help="writes probes.jsonl and probes.json here")
    limit: int | None = option(None, "the first N rows")
    max_tokens: int = option(256, "the world model's tokens per answer")
    workers: int = option(4, "real envs (JVMs) probing at once")


def main(argv: list[str] | None = None, prog: str = "python -m textwm.envs.sciworld.probes") -> int:
    parsed = ConfigCLI(ProbesConfig, prog=prog, description=__doc__.split("\n\n")[0],
                       key_values=False).parse_or_report(argv)
    if parsed is None:
        return 2
    args = parsed[0]
    rows = read_jsonl(args.rows).rows
    try:
        summary = run_probes(rows, WMClient(args.wm_endpoint, max_tokens=args.max_tokens), Path(args.out),
                             limit=args.limit, workers=args.workers)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for key, value in summary.items():
        print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
