import json
import shutil
from types import SimpleNamespace

import pytest

#: Two tasks with short gold runs (7 and 3 steps).
TASKS = ("find-non-living-thing", "lifespan-longest-lived")


def _java() -> None:
    pytest.importorskip("scienceworld")
    if shutil.which("java") is None:
        pytest.skip("ScienceWorld needs a Java runtime (java on PATH)")


@pytest.fixture(scope="session")
def fleet():
    """One real-env worker (one JVM) shared by the session's tests; launched at once, ready when first used."""
    _java()
    from textwm.eval.sciworld import RealEnvFleet

    f = RealEnvFleet(1).launch()
    yield f
    f.close()


@pytest.fixture(scope="session")
def sw_data(tmp_path_factory):
    """RL rows, WM transitions and gold actions of TASKS (one test variation each), built from the real env."""
    _java()
    from textwm.envs.sciworld.build import BuildConfig, build

    out = tmp_path_factory.mktemp("sw")
    build(BuildConfig(out_dir=str(out), tasks=TASKS, variations={"train": 0, "dev": 0, "test": 1},
                      explore_episodes=1, explore_steps=5, workers=1))
    load = lambda name: [json.loads(line) for line in (out / name).read_text().splitlines()]  # noqa: E731
    gold = {r["task_id"]: [m["content"] for m in r["messages"] if m["role"] == "assistant"]
            for r in load("sft_test.jsonl")}
    return SimpleNamespace(dir=out, rl=out / "rl_test.jsonl", wm=out / "wm_test.jsonl", rows=load("rl_test.jsonl"),
                           wm_rows=load("wm_test.jsonl"), gold=gold)
