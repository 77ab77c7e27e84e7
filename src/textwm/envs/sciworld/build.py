"""ScienceWorld's dataset-builder hooks (the plumbing is :mod:`textwm.envs.build`).

Per task variation (ScienceWorld's own train/dev/test variation lists decide the split, so no
variation is shared between splits): the gold episode, and exploratory episodes (a random gold
prefix, then valid, navigation, look and rejected actions; :mod:`textwm.envs.sciworld.explore`).
Every step becomes one chat row: system = the WM prompt at that step, user = ``State: <history>
\\n\\nAction: <action>``, assistant = the real next observation. The gold episode also yields an RL
task row and (when it reaches 100) an SFT demo.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import Any, ClassVar

from textwm.config import option
from textwm.envs.build import SPLITS, BuildConfig, Job, JobResult, job_seed
from textwm.envs.sciworld.agent import rl_row, sft_row, start_messages
from textwm.envs.sciworld.env import SciWorldEnv, task_catalog
from textwm.envs.sciworld.explore import episode_actions
from textwm.envs.sciworld.reward import SUCCESS_SCORE, goals_from_gold
from textwm.envs.sciworld.tasks import bake_task, play_gold
from textwm.envs.sciworld.tracker import EpisodeTracker
from textwm.envs.sciworld.wm_prompt import PROMPT_STYLES, wm_messages

#: Task types of scripts/demo.sh (--env sciworld).
DEMO_TASKS = ("boil", "melt", "find-living-thing", "test-conductivity", "lifespan-longest-lived",
              "lifespan-shortest-lived")
#: Task types a small agent can learn from a few gold demos (the demo's and the comparison's agent tasks): gold
#: runs of 1-7 actions, which a tiny agent trained on three demos per type finishes within 8 turns on some held-out
#: variations (it must find the animals and pick the right one); boil, melt and test-conductivity take 14-50.
SMALL_AGENT_TASKS = ("lifespan-longest-lived", "lifespan-shortest-lived")


@dataclass(frozen=True)
class SciWorldBuildConfig(BuildConfig):
    """Build the ScienceWorld world-model dataset (and RL task rows, SFT demos) from the real env."""

    #: WM prompt layout of the rows (and of the RL tasks' simulator).
    prompt_style: str = option("full", "WM prompt layout: full (the paper's sections, condensed), compact (small CPU "
                                       "models) or paper (the paper's query, byte for byte)", choices=PROMPT_STYLES)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.prompt_style not in PROMPT_STYLES:
            raise ValueError(f"prompt style must be one of {', '.join(PROMPT_STYLES)}, got {self.prompt_style!r}")


def _transition(tracker: EpisodeTracker, state: tuple[str, str], action: str, observation: str, job: Job, step: int,
                source: str, episode: str) -> dict[str, Any]:
    """One chat row; ``state`` = the real (room contents, inventory) when the action was taken."""

    messages = [*wm_messages(tracker, action, start_messages=start_messages(tracker.task), room_contents=state[0],
                             inventory=state[1]),
                {"role": "assistant", "content": observation}]
    return {"messages": messages, "task_id": job.task_id, "task": job.family, "variation": job.meta["variation"],
            "split": job.split, "episode": episode, "step": step, "source": source}


class SciWorldBuilder:
    """:class:`~textwm.envs.build.DatasetBuilder` of ScienceWorld."""

    config_class = SciWorldBuildConfig
    #: ScienceWorld's gold path depends on what its JVM loaded before (the same variation walks through the
    #: kitchen in a fresh JVM and the greenhouse after a melt task), so each job gets a JVM of its own (about 3 s).
    fresh_env_per_job = True
    small_agent_tasks: ClassVar[tuple[str, ...]] = SMALL_AGENT_TASKS
    #: scripts/demo.sh: 10 held-out variations of each type (the agent's 20 episodes: a held-out success rate of
    #: ~0.15 shows up as non-zero with ~96% odds), 300 SFT steps on the demos.
    demo_defaults: ClassVar[dict[str, Any]] = {"test_variations": 10, "agent_sft_steps": 300, "agent_episodes": 20}
    #: scripts/demo.sh --smoke: one long and one short task type, the agent on the short one.
    demo_smoke: ClassVar[dict[str, Any]] = {"tasks": ("melt", "lifespan-longest-lived"),
                                            "agent_tasks": ("lifespan-longest-lived",)}
    split_note = ("Splits follow ScienceWorld's own train/dev/test variation lists, so no variation appears in "
                  "two splits.")

    def plan(self, config: BuildConfig) -> list[Job]:
        catalog = task_catalog()
        tasks = config.tasks or tuple(sorted(catalog))
        unknown = sorted(set(tasks) - set(catalog))
        if unknown:
            raise ValueError(f"unknown ScienceWorld task(s): {', '.join(unknown)}")
        jobs = []
        for task in tasks:
            for split in SPLITS:
                for variation in catalog[task][split][: config.variations[split]]:
                    task_id = f"{task}_v{variation}"
                    jobs.append(Job(task_id, task, split, job_seed(config.seed, task_id), {"variation": variation}))
        return jobs

    def demo_config(self, out_dir: Any, demo: Any) -> SciWorldBuildConfig:
        """The demo's build: a few task types, train and test variations, the compact WM prompt."""
        return SciWorldBuildConfig(
            out_dir=str(out_dir), tasks=tuple(demo.tasks) or DEMO_TASKS, train_variations=demo.train_variations,
            dev_variations=0, test_variations=demo.test_variations, explore_episodes=1 if demo.explore_steps else 0,
            explore_steps=demo.explore_steps, workers=demo.workers, seed=demo.seed, max_turns=demo.agent_turns,
            prompt_style=demo.prompt_style)

    def open_env(self) -> SciWorldEnv:
        return SciWorldEnv()

    def run_job(self, env: SciWorldEnv, job: Job, config: BuildConfig) -> JobResult:
        """Play one variation's episodes: its transitions, RL row and SFT demo."""

        prompt_style = getattr(config, "prompt_style", "full")
        rng = random.Random(job.seed)
        task = dataclasses.replace(bake_task(env, job.task_id, gold_path=True), prompt_style=prompt_style)
        gold = env.gold_actions()
        rows: list[dict[str, Any]] = []
        tracker = EpisodeTracker(task)

        def record(i: int, action: str, state: tuple[str, str], result: Any) -> None:
            rows.append(_transition(tracker, state, action, result.observation, job, i, "gold", f"{job.task_id}/gold"))
            tracker.observe(action, result.observation)

        steps = play_gold(env, record)
        score = steps[-1][2] if steps else 0.0
        task = dataclasses.replace(task, goals=goals_from_gold(steps).to_dict())
        for k in range(config.explore_episodes):
            env.reset(job.task_id, gold_path=False)
            tracker = EpisodeTracker(task)
            actions = episode_actions(rng, env, tracker, gold, explore_steps=config.explore_steps)
            for i, (action, kind) in enumerate(actions):
                state = (env.look(), env.inventory())
                result = env.step(action)
                rows.append(_transition(tracker, state, action, result.observation, job, i, kind,
                                        f"{job.task_id}/explore{k}"))
                tracker.observe(action, result.observation)
                if result.done:
                    break
        # Long tasks (boil's gold run is ~100 steps) need more turns than the default allows.
        max_turns = max(config.max_turns, 2 * len(steps))
        return JobResult(job=job, rows=rows, rl=rl_row(task, max_turns=max_turns),
                         sft=sft_row(task, [(a, o) for a, o, _ in steps], score) if score >= SUCCESS_SCORE else None,
                         gold_score=score)
