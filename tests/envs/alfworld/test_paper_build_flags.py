"""The paper's alfworld/build_dataset.py and build_sft_expert.py flags (--split, --out, --limit, --shuffle,
--max-steps, --workers) on our builder: the argv mapping, the game selection (sorted, seed 7, first N), the errors
for what we cannot take, --help, and (slow) a two-game build into one file."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from textwm.envs.alfworld.build import (
    PAPER_SHUFFLE_SEED,
    AlfWorldBuildConfig,
    AlfWorldBuilder,
    paper_argv,
    paper_main,
)

ROOT = Path(__file__).resolve().parents[3]


def test_paper_argv_of_build_dataset():
    flags, out, split = paper_argv(["--games-dir", "g", "--split", "train", "--shuffle", "--workers", "16",
                                    "--limit", "300", "--out", "data/alfworld_rl.jsonl"], kind="rl")
    assert out == Path("data/alfworld_rl.jsonl") and split == "train"
    assert flags == ["--games-dir", "g", "--shuffle", "--workers", "16", "--split", "train", "--limit", "300"]
    assert paper_argv(["--out-dir", "d", "--train-variations", "2"], kind="rl") == (
        ["--train-variations", "2", "--out-dir", "d"], None, "")


def test_paper_argv_of_build_sft_expert_plays_shuffled_train_games():
    flags, out, split = paper_argv(["--workers", "16", "--limit", "1500", "--out", "sft.jsonl"], kind="sft")
    assert (out, split) == (Path("sft.jsonl"), "train")
    assert flags == ["--workers", "16", "--shuffle", "--split", "train", "--limit", "1500"]
    assert "--shuffle" not in paper_argv(["--out", "s.jsonl", "--no-shuffle"], kind="sft")[0]


@pytest.mark.parametrize(("argv", "match"), [
    (["--out", "x.jsonl"], "add --split"),
    (["--out", "x.jsonl", "--out-dir", "d", "--split", "train"], "not both"),
    (["--out", "x.jsonl", "--shard-id", "0"], "--workers N"),
])
def test_paper_argv_errors_name_the_flag(argv, match):
    with pytest.raises(ValueError, match=match):
        paper_argv(argv, kind="rl")


def _fake_games(root: Path) -> list[str]:
    """Empty ``game.tw-pddl`` files in the games layout (planning reads paths only)."""
    files = []
    for task in ("pick_and_place_simple-Mug-None-Cabinet-1", "pick_heat_then_place_in_recep-Apple-None-Fridge-3",
                 "look_at_obj_in_light-Mug-None-DeskLamp-10"):
        for trial in ("trial_a", "trial_b"):
            game = root / "train" / task / trial / "game.tw-pddl"
            game.parent.mkdir(parents=True)
            game.touch()
            files.append(str(game))
    return sorted(files)


def test_split_plan_is_sorted_shuffled_with_seed_7_then_limited(tmp_path):
    files = _fake_games(tmp_path)
    expected = list(files)
    random.Random(PAPER_SHUFFLE_SEED).shuffle(expected)
    config = AlfWorldBuildConfig(out_dir=str(tmp_path / "o"), games_dir=str(tmp_path), split="train", shuffle=True,
                                 limit=4)
    jobs = AlfWorldBuilder().plan(config)
    assert [str(tmp_path / j.task_id / "game.tw-pddl") for j in jobs] == expected[:4]
    assert {j.split for j in jobs} == {"train"} and all(j.meta["game_split"] == "train" for j in jobs)
    only = AlfWorldBuilder().plan(AlfWorldBuildConfig(out_dir="o", games_dir=str(tmp_path), split="train",
                                                      tasks=("look_at_obj_in_light",)))
    assert [j.family for j in only] == ["look_at_obj_in_light"] * 2


def test_config_refuses_limit_without_split(tmp_path):
    with pytest.raises(ValueError, match="add --split"):
        AlfWorldBuildConfig(out_dir="o", games_dir=str(tmp_path), limit=3)
    with pytest.raises(ValueError, match="--limit must be"):
        AlfWorldBuildConfig(out_dir="o", games_dir=str(tmp_path), split="train", limit=0)
    with pytest.raises(ValueError, match="no games under"):
        AlfWorldBuilder().plan(AlfWorldBuildConfig(out_dir="o", games_dir=str(tmp_path), split="eval_in_distribution"))


@pytest.mark.parametrize("path", ["alfworld/build_dataset.py", "alfworld/build_sft_expert.py"])
def test_builders_answer_help_and_refuse_bad_flags(path):
    done = subprocess.run([sys.executable, str(ROOT / path), "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "--out FILE" in done.stdout and "--max-steps" in done.stdout
    bad = subprocess.run([sys.executable, str(ROOT / path), "--out", "x.jsonl", "--num-shards", "4"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--num-shards" in bad.stderr


@pytest.mark.slow
def test_two_game_build_writes_only_the_out_file(games_root, tmp_path):
    out = tmp_path / "data" / "alfworld_rl.jsonl"
    base = ["--explore-episodes", "0", "--games-dir", str(games_root), "--workers", "1", "--limit", "2"]
    assert paper_main([*base, "--split", "train", "--shuffle", "--out", str(out)], kind="rl", prog="b") == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 2 and all(r["split"] == "train" and r["game_file"].endswith("game.tw-pddl") for r in rows)
    assert sorted(p.name for p in out.parent.iterdir()) == ["alfworld_rl.jsonl"]
    sft = tmp_path / "sft.jsonl"
    assert paper_main([*base, "--max-steps", "40", "--out", str(sft)], kind="sft", prog="s") == 0
    demos = [json.loads(line) for line in sft.read_text().splitlines()]
    assert demos and all(d["messages"][2]["content"].startswith("Action: ") and "game_file" in d for d in demos)
