"""The paired comparison of two agents' episodes: McNemar's exact test, the bootstrap difference, the pairing."""

import json

import pytest
from scipy.stats import binomtest

from textwm.eval.paired import bootstrap_difference, compare, main, mcnemar_exact


@pytest.mark.parametrize(("only_before", "only_after"), [(0, 6), (1, 9), (5, 5), (3, 12), (0, 0), (20, 31)])
def test_mcnemar_is_the_exact_binomial_test_on_the_discordant_pairs(only_before, only_after):
    n = only_before + only_after
    expected = 1.0 if n == 0 else binomtest(only_after, n, 0.5).pvalue
    assert mcnemar_exact(only_before, only_after) == pytest.approx(expected, rel=1e-12)
    assert mcnemar_exact(0, 6) == pytest.approx(2 / 64)            # by hand: both tails of 6 heads in 6


def _records(successes, prefix="boil_v"):
    return [{"episode_id": f"{prefix}{i}", "success": bool(s)} for i, s in enumerate(successes)]


def test_compare_pairs_by_episode_and_counts_the_discordant_pairs():
    before = _records([1, 0, 0, 1, 0, 0, 0, 0, 1, 0] * 15)           # 150 episodes, 45 successes
    after = _records([1, 1, 0, 1, 0, 0, 1, 0, 1, 0] * 15)            # 75 successes: 30 gained, none lost
    result = compare(list(reversed(before)), after, resamples=2000)   # order does not matter, ids do
    assert (result.episodes, result.successes_before, result.successes_after) == (150, 45, 75)
    assert (result.both, result.only_before, result.only_after, result.neither) == (45, 0, 30, 75)
    assert result.difference == 0.2 and result.difference_ci95[0] > 0.1 and result.difference_ci95[1] < 0.3
    assert result.p_value == pytest.approx(2 / 2**30) and result.p_value < 0.05
    assert result.ci95_before[0] < 0.3 < result.ci95_before[1]
    assert "exact McNemar p" in result.markdown()
    broken = [{**r, "reason": "env_error"} if r["episode_id"] == "boil_v1" else r for r in after]
    assert compare(before, broken, resamples=200).failed_pairs == 1
    same = compare(before, before, resamples=500)
    assert same.p_value == 1.0 and same.difference == 0.0 and same.difference_ci95 == [0.0, 0.0]


def test_unpaired_runs_are_refused_by_name():
    with pytest.raises(ValueError, match=r"1 only before \(e.g. \['boil_v2'\]\)"):
        compare(_records([1, 0, 1]), _records([1, 0]))
    with pytest.raises(ValueError, match="appears twice"):
        compare(_records([1]) * 2, _records([1]))
    with pytest.raises(ValueError, match="needs episode_id and success"):
        compare([{"success": True}], _records([1]))
    with pytest.raises(ValueError, match="no pairs"):
        bootstrap_difference([], [])


def test_the_command_reads_episode_files(tmp_path, capsys):
    for name, successes in (("sft", [0, 0, 1, 0]), ("grpo", [1, 0, 1, 1])):
        (tmp_path / name).mkdir()
        (tmp_path / name / "episodes_real.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in _records(successes)))
    out = tmp_path / "paired.json"
    assert main(["--before", str(tmp_path / "sft"), "--after", str(tmp_path / "grpo"), "--out", str(out)]) == 0
    assert "| after | 4 | 3 | 0.750 |" in capsys.readouterr().out
    assert json.loads(out.read_text())["only_after"] == 2
    assert main(["--before", str(tmp_path / "nope"), "--after", str(tmp_path / "grpo")]) == 2
    assert "no such episodes file" in capsys.readouterr().err


def test_several_after_runs_against_one_before_run_count_each_task_once():
    from textwm.eval.paired import mcnemar_exact, sign_test_over_runs

    before = [{"episode_id": str(i), "success": False} for i in range(12)]
    better = [{"episode_id": str(i), "success": i < 10} for i in range(12)]
    # Ten tasks better in both seeds: a sign test over 10 tasks, not a McNemar test over 20 pairs.
    assert sign_test_over_runs(before, [better, better]) == mcnemar_exact(0, 10) > mcnemar_exact(0, 20)
    with pytest.raises(ValueError, match="after-run 1 did not play"):
        sign_test_over_runs(before, [better, better[:5]])
