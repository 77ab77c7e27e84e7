"""The real-env rollout backend against a real env server (the toy env) on a loopback port."""

import pytest

from tests.envs.toy.spec import ToySpec
from tests.loopback import serving
from textwm.envs.contract import Outcome
from textwm.envs.pool import PoolConfig
from textwm.envs.protocol import EnvError
from textwm.envs.registry import register
from textwm.envs.server import create_env_app
from textwm.rl.real_rollouts import RealEnvRollouts, ongoing, shaped

SPEC = ToySpec()
register(SPEC, replace=True)


def test_sessions_are_bounded_reused_and_never_reset_behind_the_agent():
    with serving(create_env_app(SPEC, PoolConfig(workers=1, max_sessions_per_worker=4))) as url:
        real = RealEnvRollouts(SPEC, url, max_sessions=2)
        assert real.start("a", "toy_v0", {}).observation
        real.start("b", "toy_v1", {})
        with pytest.raises(EnvError, match="2 real-env episodes in flight"):
            real.start("c", "toy_v0", {})
        with pytest.raises(EnvError, match="started twice"):
            real.start("a", "toy_v0", {})
        lost = real.step("zzz", None, "look", previous_score=0.5)
        assert lost.failure == "env_error" and lost.observation is None and lost.outcome == Outcome(False, None, 0.5)
        assert "no session" in lost.error
        real.end("a")
        assert real.stats()["live"] == 1 and real.stats()["idle"] == 1
        real.start("c", "toy_v0", {})                  # the idle session, reset for a new episode
        assert real.stats()["idle"] == 0
        real.close()
        assert real.stats() == {"steps": real.steps, "errors": real.errors, "live": 0, "idle": 0}


def test_the_real_outcome_takes_the_envs_shaped_reward_where_it_has_none():
    partial = Outcome(False, None, 0.25, reward=0.2)
    assert shaped(Outcome(False, None, 0.0), partial) == Outcome(False, None, 0.0, reward=0.2)
    won = Outcome(True, "success", 1.0, reward=0.7)
    assert shaped(Outcome(True, "success", 1.0), won).reward == 0.7
    assert shaped(Outcome(True, "success", 1.0), partial).reward is None          # they disagree: the real one
    assert shaped(Outcome(True, "wrong_focus", -100, reward=0.5), partial).reward == 0.5


def test_an_ongoing_real_episode_ends_only_by_the_trajectorys_rules_and_keeps_its_shaped_reward():
    class Episode:                     # what ongoing() reads of a simulated episode: its own outcome
        def __init__(self, own):
            self.own = own

        def outcome(self):
            return self.own

    assert ongoing(Episode(Outcome(False, None, 0.25, reward=0.25)), 0.0) == Outcome(False, None, 0.0, reward=0.25)
    assert ongoing(Episode(Outcome(True, "loop", 0.0, reward=0.0)), 0.0) == Outcome(True, "loop", 0.0, reward=0.0)
    # The simulator's own success (its goals read from the real observations) does not end a real episode.
    assert ongoing(Episode(Outcome(True, "success", 1.0, reward=1.0)), 0.0) == Outcome(False, None, 0.0)
