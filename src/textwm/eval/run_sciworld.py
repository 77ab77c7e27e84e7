"""The ScienceWorld evaluation run behind ``sciworld/eval_sciworld.py``: one typed config, one ``run``.

Modes:

* ``agent-real`` — the agent in the real env: ``episodes_real.jsonl``, ``summary_real.json``;
* ``agent-wm`` — the agent in the world model (Simulator): ``episodes_wm.jsonl``, ``summary_wm.json``;
* ``fidelity`` — teacher-forced single-step WM scores on held-out real transitions: ``single_step/``
  (the scorer's files, ``eval_summary.json``) and ``fidelity.json``;
* ``all`` — all of the above for one agent, plus W2R replays (``episodes_w2r.jsonl``) and
  ``fidelity.json`` with Real / WM / W2R success rates (with counts) and CR = W2R / Real.

Every run writes ``eval_config.json`` (the resolved config, API key left out) and
``eval_sciworld.md`` (the summary tables).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

MODES = ("agent-real", "agent-wm", "fidelity", "all")
#: Fields never written to ``eval_config.json``.
SECRET_FIELDS = ("agent_api_key",)


class ConfigError(ValueError):
    """A bad config value; the message names the flag and what to do."""


def _f(default: Any, help: str) -> Any:
    return field(default=default, metadata={"help": help})


@dataclass
class SciWorldEvalConfig:
    """Agent success in the real env and in the world model, W2R and CR, and single-step WM fidelity."""

    mode: str = _f("all", "agent-real | agent-wm | fidelity | all")
    output_dir: str = _f("", "where episodes, summaries and fidelity.json go")
    rows: str = _f("", "RL task rows, e.g. rl_test.jsonl of sciworld/build_wm_dataset.py")
    tasks: list[str] = field(default_factory=list, metadata={"help": "only rows of these task names (e.g. boil melt)"})
    episodes: int = _f(0, "evaluate the first N rows only (0: all)")
    repeats: int = _f(1, "episodes per row (use with --temperature > 0)")
    max_turns: int = _f(0, "agent turns per episode (0: each row's max_turns)")
    workers: int = _f(2, "real-env worker processes, one ScienceWorld JVM (~400 MB) each = episodes in flight")
    agent_url: str = _f("", "agent behind an OpenAI-compatible endpoint (e.g. http://127.0.0.1:8000/v1)")
    agent_model: str = _f("", "model id at --agent-url (default: the first one /v1/models lists)")
    agent_api_key: str = _f("", "bearer token for --agent-url (default: $OPENAI_API_KEY)")
    agent_path: str = _f("", "agent as a local checkpoint folder (AR or SDAR)")
    temperature: float = _f(0.0, "agent sampling temperature (0: greedy)")
    top_p: float = _f(1.0, "agent nucleus sampling")
    agent_max_tokens: int = _f(256, "agent tokens per reply at most")
    agent_batch_size: int = _f(8, "local agent: conversations per decoding batch")
    agent_concurrency: int = _f(32, "endpoint agent: requests in flight at most")
    agent_timeout: float = _f(120.0, "endpoint agent: seconds per request")
    agent_extra_body: str = _f("", "endpoint agent: JSON object merged into each request, e.g. "
                                   "'{\"chat_template_kwargs\": {\"enable_thinking\": false}}'")
    device: str = _f("auto", "local agent device: auto, cpu, cuda, cuda:1, ...")
    seed: int = _f(0, "local agent sampling seed")
    wm_endpoint: str = _f("", "WM proxy for the agent-in-WM episodes (default: $WM_ENDPOINT)")
    wm_guard: str = _f("", "1: local responder first, 0: every step to the WM (default: $SCIWORLD_WM_GUARD or 1)")
    wm_concurrency: int = _f(8, "simulated episodes in flight (agent batch size and concurrent WM requests)")
    wm_max_tokens: int = _f(256, "WM tokens per observation at most")
    wm_temperature: float = _f(0.0, "WM sampling temperature")
    wm_timeout: float = _f(120.0, "seconds per WM request")
    wm_transitions: str = _f("", "held-out real transitions for single-step fidelity, e.g. wm_test.jsonl")
    wm_url: str = _f("", "single-step: the WM behind an OpenAI-compatible endpoint (the server, not the proxy)")
    wm_model: str = _f("", "single-step: model id at --wm-url (default: the first one listed)")
    wm_path: str = _f("", "single-step: the WM as a local checkpoint folder")
    wm_batch_size: int = _f(8, "single-step with --wm-path: rows per decoding batch")
    num_gpus: int = _f(1, "single-step with --wm-path: GPUs (0, or no CUDA: CPU)")
    single_step_limit: int = _f(0, "single-step: score the first N transitions only (0: all)")
    mauve: bool = _f(False, "single-step: also compute MAUVE (offline featuriser; slow on CPU)")

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if not self.output_dir:
            raise ConfigError("--output-dir is required")
        for name in ("workers", "repeats", "agent_batch_size", "agent_concurrency", "wm_concurrency",
                     "agent_max_tokens", "wm_max_tokens", "wm_batch_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{_flag(name)} must be >= 1, got {getattr(self, name)}")
        for name in ("episodes", "max_turns", "single_step_limit", "num_gpus", "temperature", "wm_temperature"):
            if getattr(self, name) < 0:
                raise ConfigError(f"--{_flag(name)} must be >= 0, got {getattr(self, name)}")
        if self.agent_extra_body:
            try:
                extra = json.loads(self.agent_extra_body)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"--agent-extra-body is not JSON: {exc}") from None
            if not isinstance(extra, dict):
                raise ConfigError("--agent-extra-body must be a JSON object")
        if self.wm_guard not in ("", "0", "1"):
            raise ConfigError(f"--wm-guard must be 0 or 1, got {self.wm_guard!r}")
        if self.needs_agent:
            _must_exist("--rows", self.rows, "RL task rows (rl_test.jsonl from sciworld/build_wm_dataset.py)")
            if bool(self.agent_url) == bool(self.agent_path):
                raise ConfigError(f"{self.mode} needs exactly one agent: --agent-url (OpenAI-compatible endpoint) "
                                  "or --agent-path (local checkpoint folder)")
            if self.agent_path and not Path(self.agent_path).is_dir():
                raise ConfigError(f"--agent-path {self.agent_path} is not a checkpoint folder")
        if self.mode in ("agent-wm", "all") and not self.wm_endpoint:
            raise ConfigError(f"{self.mode} runs the agent in the world model: give the WM proxy with --wm-endpoint "
                              "(e.g. http://127.0.0.1:30000/) or $WM_ENDPOINT")
        single = bool(self.wm_transitions or self.wm_url or self.wm_path)
        if self.mode == "fidelity" or (self.mode == "all" and single):
            _must_exist("--wm-transitions", self.wm_transitions, "held-out WM transitions (wm_test.jsonl)")
            if bool(self.wm_url) == bool(self.wm_path):
                raise ConfigError("single-step fidelity needs exactly one WM: --wm-url (OpenAI-compatible endpoint "
                                  "of the WM server) or --wm-path (local checkpoint folder)")
            if self.wm_path and not Path(self.wm_path).is_dir():
                raise ConfigError(f"--wm-path {self.wm_path} is not a checkpoint folder")

    @property
    def needs_agent(self) -> bool:
        return self.mode != "fidelity"

    @property
    def single_step(self) -> bool:
        return bool(self.wm_transitions) and self.mode in ("fidelity", "all")

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in SECRET_FIELDS}


def _flag(name: str) -> str:
    return name.replace("_", "-")


def _must_exist(flag: str, path: str, what: str) -> None:
    if not path:
        raise ConfigError(f"{flag} is required: {what}")
    if not Path(path).is_file():
        raise ConfigError(f"{flag} {path}: file not found ({what})")


# --- the run --------------------------------------------------------------------------------------


def make_agent(config: SciWorldEvalConfig) -> Any:
    """The agent of ``config``; an endpoint agent is checked for reachability here."""
    from textwm.eval.agents import LocalAgent, OpenAIAgent

    if config.agent_url:
        agent = OpenAIAgent(config.agent_url, model=config.agent_model or None,
                            api_key=config.agent_api_key or os.environ.get("OPENAI_API_KEY") or None,
                            temperature=config.temperature, top_p=config.top_p, max_tokens=config.agent_max_tokens,
                            concurrency=config.agent_concurrency, timeout_s=config.agent_timeout,
                            extra_body=json.loads(config.agent_extra_body) if config.agent_extra_body else None)
        agent.check()
        return agent
    return LocalAgent(config.agent_path, device=config.device, temperature=config.temperature, top_p=config.top_p,
                      max_tokens=config.agent_max_tokens, batch_size=config.agent_batch_size, seed=config.seed)


def check_wm_endpoint(endpoint: str, timeout_s: float = 10.0) -> None:
    """Fail fast when the WM proxy is down or says its upstream is (``GET /health``)."""
    import httpx

    from textwm.eval.sciworld import EvalInputError

    url = httpx.URL(endpoint).join("/health")
    try:
        resp = httpx.get(url, timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise EvalInputError(f"the WM proxy at {endpoint} is not reachable ({type(exc).__name__}: {exc}); start it "
                             "(scripts/ WM-stack launcher) or fix --wm-endpoint") from None
    if resp.status_code == 503:
        raise EvalInputError(f"the WM proxy at {endpoint} is up but not ready (its upstream is down): {resp.text[:200]}")
    if resp.status_code != 200:
        log.warning("GET %s answered %d; going on (the endpoint may not be the textwm proxy)", url, resp.status_code)


def _write_episodes(path: Path, records: list[Any]) -> None:
    from textwm.data.jsonl import write_jsonl

    write_jsonl(path, [r.to_dict() for r in records])


def run(config: SciWorldEvalConfig) -> dict[str, Any]:
    """Run the evaluation of ``config``; writes the output files and returns everything they hold."""
    from textwm.clients.wm import WMClient
    from textwm.data.jsonl import atomic_write, write_json
    from textwm.envs.sciworld.sim import GUARD_ENV
    from textwm.envs.simulator import Simulator, guard_enabled
    from textwm.eval import fidelity as fid
    from textwm.eval.sciworld import (
        RealEnvFleet,
        evaluate_agent_real,
        evaluate_agent_wm,
        load_rows,
        replay_in_real,
    )
    from textwm.generation.api import ApiGenerationConfig

    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "eval_config.json", config.to_dict())
    results: dict[str, Any] = {"mode": config.mode}
    in_wm, in_real = config.mode in ("agent-wm", "all"), config.mode in ("agent-real", "all")
    rows = (load_rows(config.rows, need_sim_task=in_wm, tasks=config.tasks, limit=config.episodes)
            if config.needs_agent else [])
    wm_client = None
    if in_wm:
        check_wm_endpoint(config.wm_endpoint)
        wm_client = WMClient(config.wm_endpoint, timeout_s=config.wm_timeout, max_tokens=config.wm_max_tokens,
                             temperature=config.wm_temperature)
    agent = make_agent(config) if config.needs_agent else None
    fleet = RealEnvFleet(config.workers).launch() if in_real else None  # JVMs warm up during the WM episodes
    try:
        if agent is not None:
            results["agent"] = agent.describe()
        if in_wm:
            use_local = guard_enabled(GUARD_ENV) if config.wm_guard == "" else config.wm_guard == "1"
            wm = evaluate_agent_wm(rows, agent, Simulator(wm_client, use_local=use_local),
                                   concurrency=config.wm_concurrency, max_turns=config.max_turns,
                                   repeats=config.repeats)
            _write_episodes(out / "episodes_wm.jsonl", wm.records)
            write_json(out / "summary_wm.json", wm.summary)
            results["wm"] = wm.summary
        if in_real:
            real = evaluate_agent_real(rows, agent, fleet=fleet, max_turns=config.max_turns, repeats=config.repeats)
            _write_episodes(out / "episodes_real.jsonl", real.records)
            write_json(out / "summary_real.json", real.summary)
            results["real"] = real.summary
        if config.mode == "all":
            w2r = replay_in_real(wm.records, {r["task_id"]: r for r in rows}, fleet=fleet)
            _write_episodes(out / "episodes_w2r.jsonl", w2r.records)
            results["w2r"] = w2r.summary
            results["fidelity"] = fid.closed_loop_fidelity(real.summary, wm.summary, w2r.summary)
    finally:
        if fleet is not None:
            fleet.close()
        if agent is not None:
            agent.close()
        if wm_client is not None:
            wm_client.close()
    if config.single_step:
        wm_spec: ApiGenerationConfig | fid.CheckpointWM
        if config.wm_url:
            wm_spec = ApiGenerationConfig(config.wm_url, model=config.wm_model or None, max_tokens=config.wm_max_tokens,
                                     temperature=config.wm_temperature, timeout_s=config.wm_timeout)
        else:
            wm_spec = fid.CheckpointWM(config.wm_path, max_tokens=config.wm_max_tokens,
                                       temperature=config.wm_temperature, per_batch=config.wm_batch_size,
                                       num_gpus=config.num_gpus)
        results["single_step"] = fid.wm_fidelity_single_step(config.wm_transitions, out, wm_spec, mauve=config.mauve,
                                                             limit=config.single_step_limit or None)
    if config.mode in ("fidelity", "all"):
        fidelity = dict(results.get("fidelity") or {})
        fidelity["single_step"] = results.get("single_step")
        if config.mode == "all" and not config.single_step:
            fidelity["single_step_note"] = "not run: no --wm-transitions"
        write_json(out / "fidelity.json", fidelity)
    with atomic_write(out / "eval_sciworld.md") as f:
        f.write(markdown(results, config))
    return results


def markdown(results: dict[str, Any], config: SciWorldEvalConfig) -> str:
    from textwm.eval.episodes import summary_markdown
    from textwm.eval.fidelity import closed_loop_markdown
    from textwm.metrics.report import markdown_table

    lines = [f"# ScienceWorld evaluation ({config.mode})", ""]
    if "agent" in results:
        lines += [f"- agent: `{results['agent']}`", f"- rows: {config.rows} (repeats {config.repeats})", ""]
    if "real" in results:
        lines += ["## Agent in the real env", "", summary_markdown(results["real"])]
    if "wm" in results:
        wm = results["wm"]
        lines += ["## Agent in the world model", "", summary_markdown(wm),
                  f"- steps answered by the local responder: {wm['local_steps']}, by the WM: {wm['wm_steps']}, "
                  f"WM failures: {wm['wm_step_errors']} (responder {'on' if wm['responder'] else 'off'})", ""]
    if "fidelity" in results:
        lines += ["## Fidelity: Real / WM / W2R (Word2World)", "", closed_loop_markdown(results["fidelity"])]
    if results.get("single_step"):
        ss = results["single_step"]
        lines += ["## Single-step fidelity (teacher-forced, held-out real transitions)", "",
                  f"- transitions: {ss['transitions']} ({ss['rows']} rows, {ss['failed_requests']} failed requests); "
                  f"generator: `{ss['generator']}`", "", markdown_table({ss["dataset"]: ss["summary"]})]
        if ss.get("exact_match_by_source"):
            lines += ["EM by transition source: " + ", ".join(
                f"{k} {v['exact_match']:.3f} (n={v['num_samples']})" for k, v in ss["exact_match_by_source"].items()), ""]
    return "\n".join(lines) + "\n"


# --- command line ---------------------------------------------------------------------------------

_TYPES = {"str": str, "int": int, "float": float}


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=SciWorldEvalConfig.__doc__,
                                epilog="Flags may also come from --config FILE.yaml (keys = flag names with "
                                       "underscores); flags on the command line win.")
    p.add_argument("mode", choices=MODES, help="what to evaluate")
    p.add_argument("--config", help="YAML file of defaults for the flags below")
    for f in dataclasses.fields(SciWorldEvalConfig):
        if f.name == "mode":
            continue
        flag, help_text = f"--{_flag(f.name)}", f.metadata["help"]
        if f.type == "bool":
            p.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default, help=help_text)
        elif f.type == "list[str]":
            p.add_argument(flag, nargs="*", default=[], help=help_text)
        else:
            p.add_argument(flag, type=_TYPES[f.type], default=f.default, help=help_text)
    return p


def _yaml_defaults(path: str) -> dict[str, Any]:
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"--config {path}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: expected a mapping of flag names to values")
    names = [f.name for f in dataclasses.fields(SciWorldEvalConfig)]
    for key in data:
        if key.replace("-", "_") not in names:
            close = difflib.get_close_matches(key, names, n=1)
            raise ConfigError(f"--config {path}: unknown key {key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return {k.replace("-", "_"): v for k, v in data.items()}


def parse_config(argv: list[str] | None = None, prog: str | None = None) -> SciWorldEvalConfig:
    p = build_parser(prog)
    pre, _ = p.parse_known_args(argv)
    if pre.config:
        p.set_defaults(**{k: v for k, v in _yaml_defaults(pre.config).items() if k != "mode"})
    args = vars(p.parse_args(argv))
    args.pop("config")
    args["wm_endpoint"] = args["wm_endpoint"] or os.environ.get("WM_ENDPOINT", "")
    return SciWorldEvalConfig(**args)


def _input_errors() -> tuple[type[BaseException], ...]:
    """Errors that mean bad input (files, rows, endpoints, checkpoints): exit 2 with the message."""
    from textwm.data.jsonl import DataError
    from textwm.envs.protocol import EnvError
    from textwm.eval.agents import AgentError
    from textwm.eval.fidelity import FidelityError
    from textwm.eval.sciworld import EvalInputError

    errors: tuple[type[BaseException], ...] = (DataError, EvalInputError, AgentError, FidelityError, EnvError)
    if "textwm.models.checkpoint" in sys.modules:  # only a local agent or WM can raise it (torch is loaded then)
        errors += (sys.modules["textwm.models.checkpoint"].CheckpointError,)
    return errors


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    try:
        config = parse_config(argv, prog)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for name in ("py4j", "scienceworld", "httpx"):
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        results = run(config)
    except _input_errors() as exc:  # evaluated only when an exception arrives
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(markdown(results, config))
    print(f"wrote {config.output_dir}/ (eval_sciworld.md, eval_config.json"
          + "".join(f", {n}" for n in ("episodes_real.jsonl", "episodes_wm.jsonl", "episodes_w2r.jsonl",
                                       "fidelity.json", "single_step/") if (Path(config.output_dir) / n).exists())
          + ")")
    return 0
