"""ALFWorld end to end on CPU: games generated offline, split by floor plan; the WM dataset and RL rows built
from them (no game or unseen floor plan in two splits, the responder measured on every step); the expert
through eval_parallel.py; the paper's positional command line."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

from textwm.eval.parallel import eval_argv, parse


def test_the_papers_positional_form_maps_to_the_eval_flags(tmp_path):
    args = parse(["ckpt", "rows.jsonl", str(tmp_path / "out.jsonl"), "3", "--parallel", "32"])
    argv, out_file = eval_argv(args, "alfworld")
    assert out_file == tmp_path / "out.jsonl"
    assert argv[:3] == ["--env", "alfworld", "agent-real"] and "--agent-path" in argv
    assert argv[argv.index("--device") + 1] == "cuda:3" and argv[argv.index("--workers") + 1] == "32"
    args.positional, args.agent = [], "expert"
    assert "--agent" in eval_argv(args, "alfworld")[0]


@pytest.mark.slow
def test_generated_games_dataset_and_expert_evaluation(tmp_path):
    from textwm.envs.alfworld.build import AlfWorldBuildConfig
    from textwm.envs.alfworld.gamebank import generate_games
    from textwm.envs.alfworld.generate import split_floor_plans
    from textwm.envs.build import build
    from textwm.eval.parallel import main

    games = tmp_path / "games"
    report = generate_games(games, 6, seed=1, eval_fraction=1 / 6, workers=2)
    assert report.games == {"train": 4, "eval_in_distribution": 1, "eval_out_of_distribution": 1}
    plans: dict[str, set[int]] = defaultdict(set)
    for game in games.glob("*/*/*/game.tw-pddl"):
        plans[game.parts[-4]].add(int(game.parts[-3].rsplit("-", 1)[1]))
    assert plans["eval_out_of_distribution"] <= set(split_floor_plans(1)["unseen"])
    assert not plans["eval_out_of_distribution"] & (plans["train"] | plans["eval_in_distribution"])

    data = tmp_path / "data"
    build("alfworld", AlfWorldBuildConfig(out_dir=str(data), games_dir=str(games), train_variations=4, dev_variations=1,
                                          test_variations=1, explore_episodes=1, explore_steps=5, workers=2))
    wm = {s: [json.loads(x) for x in (data / f"wm_{s}.jsonl").read_text().splitlines()] for s in ("train", "dev", "test")}
    ids = {s: {r["task_id"] for r in rows} for s, rows in wm.items()}
    assert not ids["train"] & ids["dev"] and not ids["train"] & ids["test"] and not ids["dev"] & ids["test"]
    test_plans = {r["floor_plan"] for r in wm["test"]}
    assert not test_plans & {r["floor_plan"] for s in ("train", "dev") for r in wm[s]}
    rows = [r for s in wm.values() for r in s]
    assert {r["source"] for r in rows} >= {"expert", "explore_invalid"}
    assert any(r["messages"][-1]["content"] == "Nothing happens." for r in rows)
    answered = [r for r in rows if r["responder"] is not None]
    assert len(answered) == len(rows) and all(r["responder"] == r["messages"][-1]["content"] for r in answered)

    rl = tmp_path / "rl_all.jsonl"
    rl.write_text("".join((data / f"rl_{s}.jsonl").read_text() for s in ("train", "dev", "test")))
    out = tmp_path / "eval"
    paper_file = tmp_path / "eval_expert.jsonl"  # the paper's OUT.jsonl, eval_fast.py's fields
    assert main(["--agent", "expert", "--rows", str(rl), "--output-dir", str(out), "--parallel", "2",
                 "--episodes-file", str(paper_file), "--paper-form", "fast"], env="alfworld") == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"] == 6 and summary["success_rate"] >= 5 / 6 and summary["per_task_type"]
    episodes = [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]
    rl_rows = [json.loads(x) for x in rl.read_text().splitlines()]
    assert [e["index"] for e in episodes] == list(range(6))
    for e, row in zip(episodes, rl_rows):
        assert e["task_type"] == row["task_type"] and e["init_admissible"] == row["init_admissible"] and e["steps"] >= 1
    paper = [json.loads(x) for x in paper_file.read_text().splitlines()]
    assert [list(p) for p in paper] == [["i", "won", "turns", "kill", "task_type", "game_file"]] * 6
    for p, e, row in zip(paper, episodes, rl_rows):
        assert (p["i"], p["won"], p["turns"], p["task_type"]) == (e["index"], e["success"], e["steps"],
                                                                  row.get("task_type"))
        assert p["kill"] is None or not p["won"]
