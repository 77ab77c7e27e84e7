"""Stage 2 of the comparison: the same agent, trained by GRPO inside each family's world model, then
scored in the real env.

1. ``agent/sft``: the agent (a tiny AR model, or ``agent_init``) trained by the one trainer on the gold demos
   (``sft_train.jsonl``), one row per assistant turn (:mod:`textwm.data.agent_turns`), so that it starts with
   some real success; with ``agent_sft_checkpoints`` > 1, ``agent/sft_stop`` picks the kept step to start from on
   the calibration rows (a seeded sample of the held-out rows, kept out of the final runs);
2. ``agent/eval/sft``: that agent in the real env on the held-out task rows (``rl_test.jsonl``);
3. per GRPO run (each world model's, then ``real``'s, one per seed of ``grpo_seeds``): ``grpo/<arm>``, GRPO
   from the SFT agent with the env's plugin (the local responder first, the world model else; ``real``: every
   rollout in a real env server, the upper reference); ``agent/eval/<agent>``, the trained agent in the real
   env; ``calibration/<agent>``, its agents every ``calibration_every`` steps on the calibration rows;
4. ``agent/paired``: every trained agent against the SFT agent on the same held-out tasks, pair by pair (exact
   McNemar test, bootstrap interval on the difference; :mod:`textwm.eval.paired`), also written as
   ``stage2_summary.json`` (``{"env", "arms": {arm: {"episodes", "success_before", "success_after", "p_value",
   "steps", "seeds", "per_seed"}}}``: counts summed over the seeds, the p-value a sign test over tasks);
5. for each world model of ``grpo_families``, served (native server + proxy), last, so that a run cut short has
   its GRPO results first: ``fidelity/<arm>``, the SFT agent as the fixed agent in the real env, in the world
   model and replayed (Real / WM / W2R, CR = W2R / Real); ``probes/<arm>``, the world model on the facts the
   held-out tasks turn on, against the real env (:meth:`EnvSpec.probe_world_model`; ScienceWorld's lifespan
   tasks: does it list the animals outside, refuse a focus on an absent one, accept the right one?).

Every real-env result carries its 95% Wilson interval over episodes. The world models are the scored arms
of one regime: ``convert`` when it ran (the recipe the paper's models come from), else ``scratch``.
"""

from __future__ import annotations

import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from textwm.clients.wm import WMClient
from textwm.data.jsonl import read_jsonl, write_json, write_jsonl
from textwm.envs.local_server import local_env_server
from textwm.envs.registry import get_env
from textwm.envs.task_types import write_agent_files
from textwm.eval.paired import compare, load_episodes, sign_test_over_runs
from textwm.eval.run import EvalConfig, run
from textwm.experiments.common import AGENT_FILES, BLOCKS, ComparisonError
from textwm.experiments.stages import Stage
from textwm.generation.settings import DecodeSettings
from textwm.rl.in_wm import GRPOInWM, grpo_checkpoints, run_grpo_in_wm
from textwm.serving.local_stack import local_wm_stack
from textwm.training.agent_sft import AgentSFT, sft_agent_path, sft_checkpoints, train_agent_on_demos

#: The real-env figures kept per agent (textwm.eval.episodes.summarize): the failures too, so that episodes an
#: agent or env error ended (counted as unsuccessful) are shown, not folded into a plausible 0.
REAL_FIELDS = ("episodes", "successes", "success_rate", "success_ci95", "mean_score", "mean_turns", "reasons",
               "agent_errors", "env_errors", "unparseable_replies")


def wm_arms(comparison: Any) -> list[Any]:
    """The arms whose world models host GRPO: the ``grpo_families`` of the regime Stage 2 uses."""
    c = comparison.config
    regime = "pretrained" if c.init else "convert" if "convert" in c.regimes else "scratch"
    return [a for a in comparison.arms if a.scored and a.regime == regime and a.family in c.grpo_families]


def served_model(comparison: Any, arm: Any) -> Path:
    """The checkpoint an arm's world model is served from: its best epoch in the pretrained regime, else its last."""
    if arm.regime == "pretrained":
        return comparison.path("arms", arm.folder, f"epoch{comparison.done[f'train/{arm.name}']['best_epoch']}")
    return comparison.path("arms", arm.folder, "final")


def sft_agent(comparison: Any) -> Path:
    """The agent Stage 2 starts from: the SFT stop chosen on the calibration rows, else the last SFT step."""
    stop = comparison.done.get("agent/sft_stop")
    return Path(stop["agent"]) if stop else sft_agent_path(comparison.path("agent"))


def run_stage2(comparison: Any) -> None:
    """Every Stage-2 stage of ``comparison`` not done yet, each recorded in its ``state.json``."""
    c = comparison.config
    for name in AGENT_FILES:      # a run folder whose data stage ran with Stage 2 off has not copied them
        target = comparison.path("data", name)
        if not target.is_file():
            if not (c.data_dir and (Path(c.data_dir) / name).is_file()):
                raise ComparisonError(f"Stage 2 needs {target}: it is not in the run folder"
                                      + (f" nor in --data-dir {c.data_dir}" if c.data_dir else ""))
            shutil.copyfile(Path(c.data_dir) / name, target)
    _write_agent_data(comparison)
    comparison.runner.run(stage2_plan(comparison))


#: The held-out task rows the calibration set takes (``calibration_episodes``), beside Stage 2's other files.
CALIBRATION_FILE = "rl_calibration.jsonl"


def agent_data(comparison: Any, name: str) -> Path:
    """Stage 2's copy of ``data/<name>`` (one of :data:`AGENT_FILES`, or :data:`CALIBRATION_FILE`): the file
    itself, or with ``agent_tasks`` or a calibration set ``stage2_data/<name>`` (written by :func:`run_stage2`):
    those task types' rows, the held-out rows less the calibration rows."""
    c = comparison.config
    return comparison.path("stage2_data" if c.agent_tasks or c.calibration_episodes else "data", name)


def _write_agent_data(comparison: Any) -> None:
    """With ``agent_tasks``: keep those task types' rows of the task rows and demos (the world models still learned
    every type); a type with no row is refused, naming the types the file has. With ``calibration_episodes``: the
    N held-out rows (a seeded sample) become the calibration set, the rest stay the held-out rows of the final runs."""

    c = comparison.config
    data, out = comparison.path("data"), comparison.path("stage2_data")
    if c.agent_tasks:
        write_agent_files(get_env(c.env), data, out, c.agent_tasks)
    elif c.calibration_episodes:
        out.mkdir(exist_ok=True)
        for name in AGENT_FILES:
            shutil.copyfile(data / name, out / name)
    if c.calibration_episodes:      # the same seeded split on every (re)run: the files are written anew each time
        held_out = read_jsonl(out / "rl_test.jsonl").rows
        if len(held_out) <= c.calibration_episodes:
            raise ComparisonError(f"{out / 'rl_test.jsonl'} has {len(held_out)} held-out task rows: the calibration "
                                  f"set takes {c.calibration_episodes} and the final runs need the rest; build more "
                                  "held-out variations or lower --calibration-episodes")
        # A seeded sample, not the first rows: held-out files are often grouped by task type.
        chosen = set(random.Random(c.seed).sample(range(len(held_out)), c.calibration_episodes))
        write_jsonl(out / CALIBRATION_FILE, [r for i, r in enumerate(held_out) if i in chosen])
        write_jsonl(out / "rl_test.jsonl", [r for i, r in enumerate(held_out) if i not in chosen])


def stage2_plan(comparison: Any) -> list[Stage]:
    """Stage 2's stages in order (module docstring), each after the stages whose results or files it uses."""
    c = comparison.config
    plan = [Stage("agent/sft", lambda: train_agent(comparison), after=("data",))]
    start = ("agent/sft", "agent/sft_stop") if c.agent_sft_checkpoints > 1 else ("agent/sft",)
    if c.agent_sft_checkpoints > 1:
        plan.append(Stage("agent/sft_stop", lambda: choose_sft_stop(comparison), after=("agent/sft",)))
    plan.append(Stage("agent/eval/sft", lambda: eval_agent(comparison, sft_agent(comparison), "sft"), after=start))
    arms = {arm.name: arm for arm in wm_arms(comparison)}
    if c.calibration_episodes and c.agent_sft_checkpoints <= 1:    # the start's point of every calibration curve
        plan.append(Stage("calibration/sft", lambda: _calibration_run(comparison, sft_agent(comparison), "sft"),
                          after=start))
    curve_start = ("calibration/sft",) if c.agent_sft_checkpoints <= 1 else ()
    for agent in grpo_agents(comparison):
        arm = arms.get(agent.label)
        work = ((lambda a=agent: grpo_in_real(comparison, a)) if arm is None else
                (lambda a=agent, arm=arm: grpo_in_arm(comparison, arm, a)))
        plan += [Stage(agent.grpo_key, work, after=(*start, *((f"train/{arm.name}",) if arm else ()))),
                 Stage(f"agent/eval/{agent.name}", lambda a=agent: eval_agent(comparison, comparison.path("agent", a.name),
                                                                              a.name), after=(agent.grpo_key,))]
        if c.calibration_episodes:
            plan.append(Stage(f"calibration/{agent.name}", lambda a=agent: calibration_curve(comparison, a),
                              after=(agent.grpo_key, *curve_start)))
    plan.append(Stage("agent/paired", lambda: paired_results(comparison),
                      after=("agent/eval/sft", *(f"agent/eval/{a.name}" for a in grpo_agents(comparison)))))
    # The world models' diagnostics last: a run cut short (a GPU lease) has its GRPO results first; the probes (the
    # task's facts, a minute) before the fixed agent's fidelity (its episodes in the world model and replayed).
    for arm in arms.values():
        plan += [Stage(f"probes/{arm.name}", lambda arm=arm: probe_world_model(comparison, arm),
                       after=(f"train/{arm.name}",)),
                 Stage(f"fidelity/{arm.name}", lambda arm=arm: fixed_agent_fidelity(comparison, arm),
                       after=(f"train/{arm.name}", *start))]
    return plan


@dataclass(frozen=True)
class GRPOAgent:
    """One GRPO run of Stage 2 and the agent it trains."""

    #: The agent's name (its folder under ``agent/``): ``grpo_<arm folder>``, ``grpo_real``; ``_seed<N>`` after
    #: the first seed.
    name: str
    #: Where it was trained: a world model's family, or ``real``.
    inside: str
    #: That arm's name (``the real env`` for real).
    label: str
    #: Its GRPO stage's name.
    grpo_key: str
    seed: int


def grpo_agents(comparison: Any) -> list[GRPOAgent]:
    """Every GRPO run of Stage 2 (one regime's world models, then the real env), one per seed."""
    c = comparison.config
    where = [(f"grpo_{arm.folder}", arm.family, arm.name, f"grpo/{arm.name}") for arm in wm_arms(comparison)]
    if "real" in c.grpo_families:
        where.append(("grpo_real", "real", "the real env", "grpo/real"))
    first = c.grpo_seeds[0]
    return [GRPOAgent(name if seed == first else f"{name}_seed{seed}", inside, label,
                      key if seed == first else f"{key}/seed{seed}", seed)
            for name, inside, label, key in where for seed in c.grpo_seeds]


def train_agent(comparison: Any) -> dict[str, Any]:
    c = comparison.config
    every = max(1, c.agent_sft_steps // c.agent_sft_checkpoints) if c.agent_sft_checkpoints > 1 else 0
    return train_agent_on_demos(AgentSFT(
        demos=str(agent_data(comparison, "sft_train.jsonl")), tasks=str(agent_data(comparison, "rl_train.jsonl")),
        out=str(comparison.path("agent")), steps=c.agent_sft_steps, size=c.agent_size, vocab_size=c.agent_vocab_size,
        cutoff_len=c.agent_cutoff_len, learning_rate=c.agent_learning_rate, batch_size=c.batch_size, seed=c.seed,
        init=c.agent_init, save_every=every))


def choose_sft_stop(comparison: Any) -> dict[str, Any]:
    """The SFT agent Stage 2 starts from: each kept SFT step on the calibration rows, in step order, up to the
    first whose success reaches ``agent_target_success`` (an agent with real success that leaves room to
    improve); when none does, the most successful (the earliest of equals)."""

    c = comparison.config
    tried = []
    for step, folder in sft_checkpoints(comparison.path("agent")):
        real = _calibration_run(comparison, folder, f"sft_step{step}")
        tried.append({"step": step, "agent": str(folder), **real})
        if real["success_rate"] >= c.agent_target_success:
            break
    if not tried:
        raise ComparisonError(f"agent SFT kept no checkpoint under {comparison.path('agent', 'sft')}")
    chosen = next((t for t in tried if t["success_rate"] >= c.agent_target_success),
                  max(tried, key=lambda t: (t["success_rate"], -t["step"])))
    return {"agent": chosen["agent"], "step": chosen["step"], "target_success": c.agent_target_success,
            "tried": [{k: t[k] for k in ("step", "episodes", "successes", "success_rate")} for t in tried]}


def _evaluate(comparison: Any, agent_path: Any, name: str, *, rows: str = "rl_test.jsonl", out: str = "agent_eval",
              episodes: int | None = None, **wm: Any) -> dict[str, Any]:
    """``textwm.eval.run`` of an agent on the held-out task ``rows`` (Stage 2's copy, the first ``agent_episodes``
    of them): the real env alone, or with ``wm`` (the endpoint and its settings) also in the world model and
    replayed."""

    c = comparison.config
    return run(EvalConfig(mode="all" if wm else "agent-real", env=c.env, output_dir=str(comparison.path(out, name)),
                          rows=str(agent_data(comparison, rows)), episodes=episodes or c.agent_episodes,
                          max_turns=c.agent_turns, workers=c.workers, device="auto", agent_path=str(agent_path), **wm))


def eval_agent(comparison: Any, agent_path: Any, name: str) -> dict[str, Any]:
    out = _evaluate(comparison, agent_path, name)
    return {k: out["real"].get(k) for k in REAL_FIELDS}


def _calibration_run(comparison: Any, agent_path: Any, name: str) -> dict[str, Any]:
    """An agent on every calibration row (``calibration/<name>``)."""
    out = _evaluate(comparison, agent_path, name, rows=CALIBRATION_FILE, out="calibration",
                    episodes=comparison.config.calibration_episodes)
    return {k: out["real"].get(k) for k in ("episodes", "successes", "success_rate", "success_ci95")}


def calibration_curve(comparison: Any, agent: GRPOAgent) -> dict[str, Any]:
    """Real success on the calibration rows of the agent Stage 2 started from (step 0) and of every agent the GRPO
    run kept (every ``calibration_every`` steps)."""

    done = comparison.done
    start = done.get("agent/sft_stop") or {}
    chosen = next((t for t in start.get("tried", ()) if t["step"] == start["step"]), None)
    points = [{**(chosen or done["calibration/sft"]), "step": 0}]
    for step, folder in grpo_checkpoints(Path(done[agent.grpo_key]["run_dir"])):
        points.append({"step": step, **_calibration_run(comparison, folder, f"{agent.name}_step{step}")})
    return {"agent": agent.name, "points": [{k: p[k] for k in ("step", "episodes", "successes", "success_rate")}
                                           for p in points]}


def _served(comparison: Any, arm: Any) -> Any:
    """The arm's world model behind the proxy (greedy, the comparison's decoding settings)."""
    # heavy: loads torch
    import torch

    c = comparison.config
    decode = DecodeSettings(gen_length=c.gen_length, temperature=0.0, denoising_steps=c.denoising_steps,
                            block_length=BLOCKS["sdar"])
    return local_wm_stack(served_model(comparison, arm), log_dir=comparison.path("stack", arm.folder),
                          wm_port=c.wm_port, proxy_port=c.proxy_port, decode=decode,
                          device="cuda" if torch.cuda.is_available() else "cpu", served_model_name=f"{arm.folder}-wm")


def fixed_agent_fidelity(comparison: Any, arm: Any) -> dict[str, Any]:
    """Real / WM / W2R / CR of the SFT agent with the arm's world model (textwm.eval.run, mode ``all``)."""
    with _served(comparison, arm) as endpoint:
        out = _evaluate(comparison, sft_agent(comparison), f"fidelity_{arm.folder}", wm_endpoint=endpoint,
                        wm_max_tokens=comparison.config.gen_length)
    fidelity = out["fidelity"]
    return {"world_model": arm.name, **{k: fidelity[k] for k in ("real", "wm", "w2r", "cr", "cr_note")}}


def probe_world_model(comparison: Any, arm: Any) -> dict[str, Any]:
    """The env's probes of the arm's world model on the facts its held-out tasks turn on (``probes/<arm>/``;
    :meth:`EnvSpec.probe_world_model`), or a note that the env has none for these tasks."""

    c = comparison.config
    rows = read_jsonl(agent_data(comparison, "rl_test.jsonl")).rows
    with _served(comparison, arm) as endpoint, WMClient(endpoint, max_tokens=c.gen_length) as wm:
        figures = get_env(c.env).probe_world_model(rows, wm, comparison.path("probes", arm.folder),
                                                          workers=c.workers)
    return {"world_model": arm.name, **(figures or {"skipped": f"{c.env} has no probes for these task rows"})}


def grpo_in_arm(comparison: Any, arm: Any, agent: GRPOAgent) -> dict[str, Any]:
    run = _grpo_run(comparison, agent)
    with _served(comparison, arm) as endpoint:
        figures = run_grpo_in_wm(run, endpoint, comparison.path("grpo", agent.name), comparison.path("agent", agent.name),
                                 comparison.path(f"{agent.name}.log"))
    return {"world_model": arm.name, "seed": agent.seed, **figures}


def _grpo_run(comparison: Any, agent: GRPOAgent, **where: Any) -> Any:
    """The Stage-2 GRPO run of the SFT agent (the same settings in every arm); ``where``: real-env rollouts."""
    # heavy: loads torch
    import torch

    c = comparison.config
    return GRPOInWM(env=c.env, rows=str(agent_data(comparison, "rl_train.jsonl")), agent_path=str(sft_agent(comparison)),
                    steps=c.grpo_steps, turns=c.grpo_turns, wm_max_tokens=c.gen_length,
                    num_gpus=1 if torch.cuda.is_available() else 0, num_generations=c.grpo_generations,
                    batch_size=c.grpo_generations * c.grpo_tasks_per_step, tasks_per_step=c.grpo_tasks_per_step,
                    dynamic_sample=c.grpo_dynamic_sample, max_completion_length=c.grpo_completion_length,
                    learning_rate=c.grpo_learning_rate, run_name=agent.name, launcher="wm_comparison",
                    save_every=c.calibration_every if c.calibration_episodes else 0, seed=agent.seed, **where)


def grpo_in_real(comparison: Any, agent: GRPOAgent) -> dict[str, Any]:
    """GRPO with every rollout in a real env server (started for the step, ``env_port``): the upper reference."""

    c = comparison.config
    with local_env_server(c.env, port=c.env_port, workers=c.workers, log_dir=comparison.path("stack", "env")) as url:
        run = _grpo_run(comparison, agent, rollout_env="real", real_env_url=url)
        figures = run_grpo_in_wm(run, "", comparison.path("grpo", agent.name), comparison.path("agent", agent.name),
                                 comparison.path(f"{agent.name}.log"))
    return {"world_model": "real env", "seed": agent.seed, **figures}


def paired_results(comparison: Any) -> dict[str, Any]:
    """Every GRPO agent against the SFT agent on the same held-out tasks; ``stage2_summary.json`` beside the report."""

    c, done = comparison.config, comparison.done
    before = load_episodes(comparison.path("agent_eval", "sft"))
    agents, by_arm = {}, {}
    for agent in grpo_agents(comparison):
        after = load_episodes(comparison.path("agent_eval", agent.name))
        agents[agent.name] = {"inside": agent.label, "seed": agent.seed, **compare(before, after, seed=c.seed).to_dict()}
        by_arm.setdefault(agent.inside, []).append((agent, after))
    summary = {}
    for inside, runs in by_arm.items():
        # Episodes and successes summed over the seeds (the one SFT run counted once per seed); the p-value is
        # a sign test over tasks of the seeds' mean against the SFT run, each task once (the SFT run is one run).
        summary[inside] = {"episodes": sum(agents[a.name]["episodes"] for a, _ in runs),
                           "success_before": sum(agents[a.name]["successes_before"] for a, _ in runs),
                           "success_after": sum(agents[a.name]["successes_after"] for a, _ in runs),
                           "p_value": sign_test_over_runs(before, [after for _, after in runs]),
                           "steps": len((done.get(runs[0][0].grpo_key) or {}).get("reward_per_step") or []),
                           "seeds": [a.seed for a, _ in runs],
                           "per_seed": [{"seed": a.seed, "success_after": agents[a.name]["successes_after"],
                                         "p_value": agents[a.name]["p_value"]} for a, _ in runs]}
    write_json(comparison.path("stage2_summary.json"), {"env": c.env, "arms": summary})
    return {"agents": agents, "arms": summary}
