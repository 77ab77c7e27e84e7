import json

import pytest

from textwm.envs import get_env
from textwm.envs.build import build
from textwm.envs.sciworld.agent import parse_action
from textwm.envs.sciworld.build import SciWorldBuildConfig
from textwm.envs.sciworld.env import task_catalog


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("sw")
    report = build("sciworld", SciWorldBuildConfig(out_dir=str(out), tasks=("boil",), train_variations=1,
                                                   dev_variations=1, test_variations=1, explore_episodes=1,
                                                   explore_steps=6, workers=1))
    return out, report


def _rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_splits_follow_sciworld_variation_lists(built):
    out, report = built
    catalog = task_catalog()["boil"]
    seen = {}
    for split in ("train", "dev", "test"):
        rows = _rows(out / f"wm_{split}.jsonl")
        assert rows, split
        variations = {r["variation"] for r in rows}
        assert variations <= set(catalog[split])
        seen[split] = variations
    assert not (seen["train"] & seen["dev"]) and not (seen["train"] & seen["test"]) and not (seen["dev"] & seen["test"])
    assert report.gold_below_success == []


def test_rows_carry_the_state_at_that_step(built, real_env):
    out, _ = built
    rows = [r for r in _rows(out / "wm_train.jsonl") if r["source"] == "gold"]
    real_env.reset(rows[0]["task_id"])
    for row in rows[:12]:
        system, user, target = (m["content"] for m in row["messages"])
        assert real_env.look().strip() in system              # room contents at that step
        assert real_env.inventory().strip() in system         # inventory at that step
        assert "## ENVIRONMENT STATE" in system and "PREDICTION TARGET" in system
        action = user.rsplit("\n\nAction: ", 1)[1]
        assert user.startswith("State: ")
        assert real_env.step(action).observation == target


def test_agent_rows(built):
    out, _ = built
    rl = _rows(out / "rl_train.jsonl")[0]
    assert set(rl) >= {"messages", "task_id", "instruction", "wm_system_prompt", "max_turns", "sim_task"}
    task = get_env("sciworld").load_row(rl, need_sim=True).sim_task
    assert task.goals["focus_targets"] and len(task.room_map) == 10
    sft = _rows(out / "sft_train.jsonl")[0]
    assert sft["score"] == 100 and sft["messages"][-1]["role"] == "assistant"
    card = json.loads((out / "dataset_card.json").read_text())
    assert card["transitions"]["train"] == len(_rows(out / "wm_train.jsonl"))


def test_parse_action():
    assert parse_action("<think>plan</think>\nAction: teleport to kitchen\nthen more") == "teleport to kitchen"
    assert parse_action("> look around") == "look around"
    assert parse_action("```\ncode\n```") is None
    assert parse_action("   ") is None
    assert parse_action("x" * 300) is None
    assert parse_action("0") == "0"  # a choice number is an action


@pytest.mark.slow
def test_bundled_catalog_matches_the_installed_scienceworld():
    from textwm.envs.sciworld.env import live_task_catalog

    assert task_catalog() == live_task_catalog()


@pytest.mark.slow
def test_a_paper_layout_build_writes_the_papers_query_and_baked_prompt(tmp_path):
    """``--prompt-style paper``: each row is the query the paper's plugin would send at that step (its state the
    agent's conversation as JSON, its current action last) and the RL row carries the paper's baked prompt, which
    the simulator reads the same way."""
    from textwm.data.wm_message import split_wm_user_message
    from textwm.envs.sciworld import paper_prompt as pp

    build("sciworld", SciWorldBuildConfig(out_dir=str(tmp_path), tasks=("lifespan-longest-lived",), train_variations=1,
                                          dev_variations=0, test_variations=0, explore_episodes=0, workers=1,
                                          prompt_style="paper"))
    rows = _rows(tmp_path / "wm_train.jsonl")
    rl = _rows(tmp_path / "rl_train.jsonl")[0]
    assert rl["wm_system_prompt"].startswith("## ENVIRONMENT\n") and "## COMPLETE ROOM MAP" in rl["wm_system_prompt"]
    messages = json.loads(rl["messages"]) if isinstance(rl["messages"], str) else rl["messages"]
    steps = []
    for row in rows:
        system, user, target = (m["content"] for m in row["messages"])
        state, action = split_wm_user_message(user)
        action = json.loads(action)[0]["content"]
        conversation = pp.conversation_of(messages, steps, action)
        assert json.loads(state) == conversation
        assert system == pp.system_prompt(rl["wm_system_prompt"], conversation, action, pp.tracked_inventory(steps))
        steps.append((action, target))
    assert len(rows) >= 2
