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
    from textwm.envs import get_env
    from textwm.envs.blocking import BlockingPool

    pool = BlockingPool(get_env("sciworld"), 1).launch()
    yield pool
    pool.close()


@pytest.fixture(scope="session")
def sw_data(tmp_path_factory):
    """RL rows, WM transitions and gold actions of TASKS (one test variation each), built from the real env."""
    _java()
    from textwm.envs import get_env
    from textwm.envs.build import build
    from textwm.envs.sciworld.build import SciWorldBuildConfig

    out = tmp_path_factory.mktemp("sw")
    build("sciworld", SciWorldBuildConfig(out_dir=str(out), tasks=TASKS, train_variations=0, dev_variations=0,
                                          test_variations=1, explore_episodes=1, explore_steps=5, workers=1))
    load = lambda name: [json.loads(line) for line in (out / name).read_text().splitlines()]  # noqa: E731
    gold = {r["task_id"]: [m["content"] for m in r["messages"] if m["role"] == "assistant"]
            for r in load("sft_test.jsonl")}
    spec = get_env("sciworld")
    rows = load("rl_test.jsonl")
    return SimpleNamespace(dir=out, rl=out / "rl_test.jsonl", wm=out / "wm_test.jsonl", rows=rows,
                           starts=[spec.load_row(r) for r in rows], wm_rows=load("wm_test.jsonl"), gold=gold,
                           spec=spec)
