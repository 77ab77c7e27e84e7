"""The demo report's plain verdict on which world-model family won at the demo's budget."""

from textwm.demo_report import budget_winner


def test_the_verdict_names_the_leader_of_each_metric_and_ties():
    scores = {"wm_ar": {"exact_match": 0.475, "rouge_l_f1": 0.8, "bleu_1": 0.6, "mauve": 0.3},
              "wm_sdar": {"exact_match": 0.067, "rouge_l_f1": 0.5, "bleu_1": 0.6, "mauve": 0.4},
              "init_ar": {"exact_match": 0.0}}
    lines = budget_winner(scores, ["ar", "sdar"])
    assert lines[0] == ("**Which won at this budget:** ar leads on exact_match, rouge_l_f1; "
                        "ar and sdar tie on bleu_1; sdar leads on mauve.")
    assert "pretrained Qwen3" in lines[1] and "scripts/wm_comparison.py" in lines[1]
    assert budget_winner({"wm_ar": {"exact_match": 0.1}}, ["ar"]) == []


def test_the_agent_verdict_says_what_sft_and_grpo_did():
    from textwm.demo_report import agent_verdict

    def real(successes):
        return {"real": {"episodes": 20, "successes": successes, "success_ci95": [0.03, 0.3]}}

    lines = agent_verdict({"agent_sft": real(2), "agent_grpo": real(2)}, [-1.0, -1.0, -1.0])
    assert lines[0].startswith("**The agent in the real env:** 2 of 20 held-out tasks ([0.030, 0.300]) after its "
                               "SFT on the gold demos, then 2 of 20 held-out tasks")
    assert "after 3 GRPO steps inside the world model (no change;" in lines[0]
    assert "as a random agent (no SFT), then 1 of 20" in agent_verdict({"agent_init": real(0), "agent_grpo": real(1)},
                                                                        [0.0])[0]
    assert "(up;" in agent_verdict({"agent_init": real(0), "agent_grpo": real(1)}, [0.0])[0]
    assert agent_verdict({}, []) == []


def test_the_agent_verdict_gives_the_paired_test_on_the_same_tasks():
    from textwm.demo_report import agent_verdict
    from textwm.eval.paired import compare

    before = [{"episode_id": f"t{i}", "success": i < 2} for i in range(20)]
    after = [{"episode_id": f"t{i}", "success": 1 <= i < 5} for i in range(20)]
    paired = compare(before, after, resamples=500).to_dict()
    agent = {"agent_sft": {"real": {"episodes": 20, "successes": 2, "success_ci95": [0.03, 0.3]}},
             "agent_grpo": {"real": {"episodes": 20, "successes": 4, "success_ci95": [0.08, 0.42]},
                            "paired_with_before": paired}}
    (line, _) = agent_verdict(agent, [0.1, 0.2])
    assert "Pair by pair on the same tasks: difference +0.100" in line
    assert "3 tasks won only after and 1 only before, exact McNemar p = 0.625." in line
