"""A dataset build gives the same files whatever the number of workers, also for an env whose episodes depend on
what it played before (``fresh_env_per_job``)."""

from __future__ import annotations

import json

import pytest

from tests.envs.toy.spec import ToyBuilder, ToySpec
from textwm.envs.build import BuildConfig, Job, JobResult, build


class RememberingBuilder(ToyBuilder):
    """The toy builder over an env that remembers how many jobs it played: each row says so."""

    fresh_env_per_job = True

    def run_job(self, env, job: Job, config: BuildConfig) -> JobResult:
        played_before = getattr(env, "jobs_played", 0)
        env.jobs_played = played_before + 1
        result = super().run_job(env, job, config)
        for row in result.rows:
            row["played_before"] = played_before
        return result


class ForgetfulBuilder(RememberingBuilder):
    fresh_env_per_job = False


def _played_before(builder, tmp_path):
    class Spec(ToySpec):
        def dataset_builder(self):
            return builder

    build(Spec(), BuildConfig(out_dir=str(tmp_path), train_variations=3, dev_variations=0, test_variations=1,
                            explore_episodes=0, workers=1))
    rows = [json.loads(line) for split in ("train", "test")
            for line in (tmp_path / f"wm_{split}.jsonl").read_text().splitlines()]
    return {row["played_before"] for row in rows}


def test_each_job_gets_a_new_env_when_the_builder_asks(tmp_path):
    assert _played_before(RememberingBuilder(), tmp_path / "fresh") == {0}
    # The check can fail: one env for all of a worker's jobs remembers them.
    assert _played_before(ForgetfulBuilder(), tmp_path / "shared") == {0, 1, 2, 3}


@pytest.mark.slow
def test_a_sciworld_build_is_the_same_with_one_worker_or_two(tmp_path):
    """ScienceWorld's gold path depends on what its JVM loaded before (a lifespan variation after a melt one walks
    another way), so only a JVM per job makes the files independent of how jobs fall on workers."""
    from textwm.envs.sciworld.build import SciWorldBuildConfig

    def built(workers):
        out = tmp_path / f"w{workers}"
        build("sciworld", SciWorldBuildConfig(
            out_dir=str(out), tasks=("melt", "lifespan-longest-lived"), train_variations=1, dev_variations=0,
            test_variations=1, explore_episodes=1, explore_steps=4, workers=workers))
        return {name: (out / name).read_bytes() for name in ("wm_train.jsonl", "wm_test.jsonl", "rl_train.jsonl")}

    assert built(1) == built(2)
