"""Build the bundled scorer sample from the real ScienceWorld env (needs the ``envs`` extra and Java).

Plays the gold action sequence of a few tasks; every step becomes a chat transition
(system = WM instruction + task, user = ``State: <previous observation>\\n\\nAction: <action>``,
assistant = the real next observation). Train/test are split by variation. Then writes the
predictions of the two floor baselines for the test rows.

    python scripts/build_scorer_sample.py --out-dir data/samples
"""

from dataclasses import dataclass
from pathlib import Path

from textwm.config import ConfigCLI, option
from textwm.data.jsonl import write_jsonl
from textwm.data.wm_message import wm_user_message
from textwm.generation.baselines import action_lookup, copy_state

SYSTEM = ("You are the world model of ScienceWorld, a text environment of science experiments. Given the "
          "current state and the agent's action, reply with exactly the observation the environment returns.\n"
          "Task: {task}")


def play(env, task: str, variation: int) -> list[dict]:
    env.load(task, variation, "", generateGoldPath=True)
    obs, _ = env.reset()
    system = SYSTEM.format(task=env.get_task_description())
    rows = []
    for step, action in enumerate(env.get_gold_action_sequence()):
        nxt, _, done, _ = env.step(action)
        rows.append({"messages": [{"role": "system", "content": system},
                                  {"role": "user", "content": wm_user_message(obs, action)},
                                  {"role": "assistant", "content": nxt}],
                     "task_id": f"{task}_v{variation}", "step": step})
        obs = nxt
        if done:
            break
    return rows


@dataclass
class ScorerSampleConfig:
    out_dir: str = option("data/samples", "where the sample files go")
    tasks: list[str] = option(help="ScienceWorld task names",
                              default_factory=lambda: ["boil", "find-living-thing", "test-conductivity", "grow-plant"])
    train_variations: int = option(2, "train variations per task")


def main(argv: list[str] | None = None) -> int:
    parsed = ConfigCLI(ScorerSampleConfig, prog="scripts/build_scorer_sample.py", description=__doc__, key_values=False).parse_or_report(argv)
    if parsed is None:
        return 2
    args = parsed[0]
    from scienceworld import ScienceWorldEnv

    env = ScienceWorldEnv("", envStepLimit=500)
    train, test = [], []
    for task in args.tasks:
        env.load(task, 0, "")
        train_vars = env.get_variations_train()[: args.train_variations]
        test_var = env.get_variations_test()[0]
        for v in train_vars:
            train += play(env, task, v)
        test += play(env, task, test_var)
    env.close()
    out = Path(args.out_dir)
    write_jsonl(out / "sciworld_wm_train.jsonl", train)
    write_jsonl(out / "sciworld_wm_test.jsonl", test)
    refs = [r["messages"][-1]["content"] for r in test]
    for name, preds in (("copy_state", copy_state(test)), ("action_lookup", action_lookup(train, test))):
        write_jsonl(out / "predictions" / f"{name}_outputs.jsonl",
                    [{"index": i, "config": {"baseline": name}, "prediction_raw": p, "reference": ref,
                      "generated": p, "ground_truth": ref} for i, (p, ref) in enumerate(zip(preds, refs))])
    print(f"{len(train)} train and {len(test)} test transitions -> {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
