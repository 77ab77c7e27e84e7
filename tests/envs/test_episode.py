"""The one episode loop's turn rules (shared by RL rollouts and evaluation), on plain data."""

import json

from textwm.envs.contract import Outcome
from textwm.envs.episode import FEEDBACK, Step, Trajectory, TurnRules

RULES = TurnRules(parse=lambda text: text.strip() or None, hint="say an action", unparseable_limit=2)
GOING = Outcome(False, None, 0.5)


def test_a_turn_records_the_step_and_queues_the_observation():
    t = Trajectory("t", max_turns=5)
    action = t.reply(" look ", RULES)
    t.stepped(action, Step("a room", GOING, source="local"))
    assert (t.actions, t.observations, t.scores, t.sources, t.pending) == (["look"], ["a room"], [0.5], ["local"],
                                                                             "a room")
    assert Trajectory.from_dict(json.loads(json.dumps(t.to_dict()))) == t


def test_unparseable_replies_get_the_hint_and_end_after_the_streak():
    t = Trajectory("t", max_turns=9)
    assert t.reply("  ", RULES) is None
    t.skipped(RULES)
    assert (t.pending, t.sources, t.observations, t.finished) == ("say an action", [FEEDBACK], [None], False)
    t.reply("", RULES)
    t.skipped(RULES)
    assert (t.finished, t.end_reason, t.unparseable, t.env_ended) == (True, "unparseable_streak", 2, False)


def test_order_of_the_end_rules():
    failed = Trajectory("t", max_turns=1)
    failed.stepped(failed.reply("go", RULES), Step(None, GOING, error="WM down", failure="wm_error"))
    assert (failed.end_reason, failed.error, failed.scores) == ("wm_error", "WM down", [None])
    won = Trajectory("t", max_turns=1)                      # the env's end wins over the turn limit
    won.stepped(won.reply("go", RULES), Step("won", Outcome(True, "success", 1.0)))
    assert (won.end_reason, won.env_ended, won.score) == ("success", True, 1.0)
    cut = Trajectory("t", max_turns=1)
    cut.stepped(cut.reply("go", RULES), Step("x", GOING))
    assert (cut.end_reason, cut.pending) == ("max_turns", None)
    agent = Trajectory("t")
    agent.fail("agent_error", "endpoint gone")
    assert (agent.end_reason, agent.turns) == ("agent_error", 0)
