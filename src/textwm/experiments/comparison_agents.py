"""Stage 2 of the comparison: the same agent, trained by GRPO inside each family's world model, then
scored in the real env.

1. ``agent/sft``: a small AR agent (one tokenizer of the task and demo rows) trained by the one trainer on the
   gold demos (``sft_train.jsonl``), one row per assistant turn (:mod:`textwm.data.agent_turns`), so that it
   starts with some real success;
2. ``agent/eval/sft``: that agent in the real env on the held-out task rows (``rl_test.jsonl``);
3. for each family in ``grpo_families``, with the arm's world model served (native server + proxy):
   ``fidelity/<arm>``, the SFT agent as the fixed agent in the real env, in the world model and replayed
   (Real / WM / W2R, CR = W2R / Real); ``grpo/<arm>``, ``grpo_steps`` GRPO steps from the SFT agent with the
   env's plugin (the deterministic local responder first, the world model else); then
   ``agent/eval/grpo_<arm>``, the trained agent in the real env.

4. with ``real`` among ``grpo_families``: ``grpo/real``, the same GRPO with every rollout in a real env server
   (the upper reference: what GRPO gets from the true environment), then ``agent/eval/grpo_real``;
5. ``agent/paired``: every trained agent against the SFT agent on the same held-out tasks, pair by pair (exact
   McNemar test, bootstrap interval on the difference; :mod:`textwm.eval.paired`), also written as
   ``stage2_summary.json`` (``{"env", "arms": {arm: {"episodes", "success_before", "success_after", "p_value",
   "steps", "seeds"}}}``).

Every real-env result carries its 95% Wilson interval over episodes. The world models are the scored arms
of one regime: ``convert`` when it ran (the recipe the paper's models come from), else ``scratch``.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from textwm.experiments.common import AGENT_FILES, BLOCKS, ComparisonError
from textwm.training.agent_sft import sft_agent_path

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
        return comparison.path("arms", arm.folder, f"epoch{comparison.state['done'][f'train/{arm.name}']['best_epoch']}")
    return comparison.path("arms", arm.folder, "final")


def sft_agent(comparison: Any) -> Path:
    return sft_agent_path(comparison.path("agent"))


def run_stage2(comparison: Any) -> None:
    """Every Stage-2 step of ``comparison`` not done yet, each recorded in its state."""
    c = comparison.config
    for name in AGENT_FILES:      # a run folder whose data stage ran with Stage 2 off has not copied them
        target = comparison.path("data", name)
        if not target.is_file():
            if not (c.data_dir and (Path(c.data_dir) / name).is_file()):
                raise ComparisonError(f"Stage 2 needs {target}: it is not in the run folder"
                                      + (f" nor in --data-dir {c.data_dir}" if c.data_dir else ""))
            shutil.copyfile(Path(c.data_dir) / name, target)
    _write_agent_data(comparison)
    for key, work in stage2_plan(comparison):
        comparison._step(key, work)


def agent_data(comparison: Any, name: str) -> Path:
    """Stage 2's copy of ``data/<name>`` (one of :data:`AGENT_FILES`): the file itself, or with ``agent_tasks``
    the rows of those task types alone (``stage2_data/<name>``, written by :func:`run_stage2`)."""
    return comparison.path("stage2_data" if comparison.config.agent_tasks else "data", name)


def _write_agent_data(comparison: Any) -> None:
    """With ``agent_tasks``: keep those task types' rows of the task rows and demos (the world models still learned
    every type). A type with no row is refused, naming the types the file has."""
    from textwm.envs.registry import get_env
    from textwm.envs.task_types import write_agent_files

    c = comparison.config
    if c.agent_tasks:
        write_agent_files(get_env(c.env), comparison.path("data"), comparison.path("stage2_data"), c.agent_tasks)


def stage2_plan(comparison: Any) -> list[tuple[str, Callable[[], dict[str, Any]]]]:
    """Stage 2's steps in order: each one's state key and its work."""
    sft = sft_agent(comparison)
    plan = [("agent/sft", lambda: train_agent(comparison)),
            ("agent/eval/sft", lambda: eval_agent(comparison, sft, "sft"))]
    for arm in wm_arms(comparison):
        name = f"grpo_{arm.folder}"
        plan += [(f"fidelity/{arm.name}", lambda arm=arm: fixed_agent_fidelity(comparison, arm)),
                 (f"grpo/{arm.name}", lambda arm=arm, name=name: grpo_in_arm(comparison, arm, name)),
                 (f"agent/eval/{name}", lambda name=name: eval_agent(comparison, comparison.path("agent", name), name))]
    if "real" in comparison.config.grpo_families:
        plan += [("grpo/real", lambda: grpo_in_real(comparison)),
                 ("agent/eval/grpo_real", lambda: eval_agent(comparison, comparison.path("agent", "grpo_real"),
                                                             "grpo_real"))]
    plan.append(("agent/paired", lambda: paired_results(comparison)))
    return plan


def grpo_agents(comparison: Any) -> list[tuple[str, str, str, str]]:
    """(agent name, where it was trained: a world model's family or ``real``, that arm's name, its GRPO step's key)
    of every GRPO agent of Stage 2 (one regime's world models), the real env last."""
    agents = [(f"grpo_{arm.folder}", arm.family, arm.name, f"grpo/{arm.name}") for arm in wm_arms(comparison)]
    real = [("grpo_real", "real", "the real env", "grpo/real")] if "real" in comparison.config.grpo_families else []
    return agents + real


def train_agent(comparison: Any) -> dict[str, Any]:
    from textwm.training.agent_sft import AgentSFT, train_agent_on_demos

    c = comparison.config
    return train_agent_on_demos(AgentSFT(
        demos=str(agent_data(comparison, "sft_train.jsonl")), tasks=str(agent_data(comparison, "rl_train.jsonl")),
        out=str(comparison.path("agent")), steps=c.agent_sft_steps, size=c.agent_size, vocab_size=c.agent_vocab_size,
        cutoff_len=c.agent_cutoff_len, learning_rate=c.agent_learning_rate, batch_size=c.batch_size, seed=c.seed,
        init=c.agent_init))


def _evaluate(comparison: Any, agent_path: Any, name: str, **wm: Any) -> dict[str, Any]:
    """``textwm.eval.run`` of an agent on the held-out task rows: the real env alone, or with ``wm`` (the
    endpoint and its settings) also in the world model and replayed."""
    from textwm.eval.run import EvalConfig, run

    c = comparison.config
    return run(EvalConfig(mode="all" if wm else "agent-real", env=c.env, output_dir=str(comparison.path("agent_eval", name)),
                          rows=str(agent_data(comparison, "rl_test.jsonl")), episodes=c.agent_episodes,
                          max_turns=c.agent_turns, workers=c.workers, device="auto", agent_path=str(agent_path), **wm))


def eval_agent(comparison: Any, agent_path: Any, name: str) -> dict[str, Any]:
    out = _evaluate(comparison, agent_path, name)
    return {k: out["real"].get(k) for k in REAL_FIELDS}


def _served(comparison: Any, arm: Any) -> Any:
    """The arm's world model behind the proxy (greedy, the comparison's decoding settings)."""
    import torch

    from textwm.generation.settings import DecodeSettings
    from textwm.serving.local_stack import local_wm_stack

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


def grpo_in_arm(comparison: Any, arm: Any, name: str) -> dict[str, Any]:
    from textwm.rl.in_wm import run_grpo_in_wm

    run = _grpo_run(comparison, name)
    with _served(comparison, arm) as endpoint:
        figures = run_grpo_in_wm(run, endpoint, comparison.path("grpo", arm.folder), comparison.path("agent", name),
                                 comparison.path(f"grpo_{arm.folder}.log"))
    return {"world_model": arm.name, **figures}


def _grpo_run(comparison: Any, name: str, **where: Any) -> Any:
    """The Stage-2 GRPO run of the SFT agent (the same settings in every arm); ``where``: real-env rollouts."""
    import torch

    from textwm.rl.in_wm import GRPOInWM

    c = comparison.config
    return GRPOInWM(env=c.env, rows=str(agent_data(comparison, "rl_train.jsonl")), agent_path=str(sft_agent(comparison)),
                    steps=c.grpo_steps, turns=c.grpo_turns, wm_max_tokens=c.gen_length,
                    num_gpus=1 if torch.cuda.is_available() else 0, num_generations=c.grpo_generations,
                    batch_size=c.grpo_generations, max_completion_length=c.grpo_completion_length,
                    learning_rate=c.grpo_learning_rate, run_name=name, launcher="wm_comparison", **where)


def grpo_in_real(comparison: Any) -> dict[str, Any]:
    """GRPO with every rollout in a real env server (started for the step, ``env_port``): the upper reference."""
    from textwm.envs.local_server import local_env_server
    from textwm.rl.in_wm import run_grpo_in_wm

    c = comparison.config
    with local_env_server(c.env, port=c.env_port, workers=c.workers, log_dir=comparison.path("stack", "env")) as url:
        run = _grpo_run(comparison, "grpo_real", rollout_env="real", real_env_url=url)
        figures = run_grpo_in_wm(run, "", comparison.path("grpo", "real"), comparison.path("agent", "grpo_real"),
                                 comparison.path("grpo_real.log"))
    return {"world_model": "real env", **figures}


def paired_results(comparison: Any) -> dict[str, Any]:
    """Every GRPO agent against the SFT agent on the same held-out tasks; ``stage2_summary.json`` beside the report."""
    from textwm.data.jsonl import write_json
    from textwm.eval.paired import compare, load_episodes

    c, done = comparison.config, comparison.state["done"]
    before = load_episodes(comparison.path("agent_eval", "sft"))
    arms, summary = {}, {}
    for name, inside, label, grpo_key in grpo_agents(comparison):
        result = compare(before, load_episodes(comparison.path("agent_eval", name)), seed=c.seed).to_dict()
        arms[name] = {"inside": label, **result}
        summary[inside] = {"episodes": result["episodes"], "success_before": result["successes_before"],
                           "success_after": result["successes_after"], "p_value": result["p_value"],
                           "steps": len((done.get(grpo_key) or {}).get("reward_per_step") or []), "seeds": [c.seed]}
    write_json(comparison.path("stage2_summary.json"), {"env": c.env, "arms": summary})
    return {"agents": arms}
