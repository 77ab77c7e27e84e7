"""python -m textwm.rl.rewards: the reward per outcome as GRPO computes it, for each rule an env defines."""

import json

from textwm.rl.rewards import main


def test_sciworld_rewards_per_outcome_under_both_rules(capsys):
    assert main(["--env", "sciworld", "--json"]) == 0
    ours = {r["outcome"]: r["reward"] for r in json.loads(capsys.readouterr().out)}
    assert ours["success"] == 1.0 and ours["partial"] == 0.5 and ours["nothing"] == 0.0
    assert ours["wrong focus after progress"] == ours["partial"] > ours["wrong focus at once"] >= ours["loop"]
    assert main(["--env", "sciworld", "--reward", "paper", "--json"]) == 0
    paper = {r["outcome"]: r["reward"] for r in json.loads(capsys.readouterr().out)}
    assert paper["wrong focus after progress"] == -0.2 < paper["nothing"] == 0.0       # the paper's: don't try
    assert main(["--env", "sciworld"]) == 0
    assert "| wrong focus after progress | wrong_focus | -100 | 2 | +0.500 |" in capsys.readouterr().out


def test_alfworld_rewards_per_outcome_and_the_papers_format_factor(capsys):
    assert main(["--env", "alfworld", "--json"]) == 0
    ours = {r["outcome"]: r["reward"] for r in json.loads(capsys.readouterr().out)}
    assert ours["success"] == 1.0 > ours["partial: another object placed"] > ours["partial: the target taken"] > 0
    assert ours["wandering"] < ours["nothing"] == 0.0
    assert main(["--env", "alfworld", "--reward", "paper", "--json"]) == 0
    paper = {r["outcome"]: r["reward"] for r in json.loads(capsys.readouterr().out)}
    assert paper["partial, prose before the action"] == round(0.7 * ours["partial, prose before the action"], 4)
    assert {k: v for k, v in paper.items() if "prose" not in k} == {k: v for k, v in ours.items() if "prose" not in k}


def test_appworld_rewards_per_outcome(capsys):
    assert main(["--env", "appworld", "--json"]) == 0
    ours = {r["outcome"]: r["reward"] for r in json.loads(capsys.readouterr().out)}
    assert ours["success"] == 1.0 > ours["wrong number"] > ours["partial: records found, no answer"] > 0
    assert ours["failed calls, no password lookup"] < ours["partial: records found, no answer"]
    assert ours["nothing"] == ours["unparseable"] == 0.0


def test_appworld_has_the_papers_rule_too(capsys):
    assert main(["--env", "appworld", "--reward", "paper", "--json"]) == 0
    paper = {r["outcome"]: r["reward"] for r in json.loads(capsys.readouterr().out)}
    assert paper["success"] == 1.0 > paper["wrong number"] > paper["partial: records found, no answer"] > 0
    assert paper["nothing"] == paper["unparseable"] == 0.0
