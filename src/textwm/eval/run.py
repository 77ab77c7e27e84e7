"""The evaluation run of any registered env: one typed config, one :func:`run`, one command line.

    python -m textwm.eval --env sciworld all --rows rl_test.jsonl --agent-url http://127.0.0.1:8000/v1 \\
        --wm-endpoint http://127.0.0.1:30000/ --wm-transitions wm_test.jsonl --wm-url http://127.0.0.1:30001/v1 \\
        --output-dir outputs/eval

Modes:

* ``agent-real`` — the agent in the real env: ``episodes_real.jsonl``, ``summary_real.json``;
* ``agent-wm`` — the agent in the world model (Simulator): ``episodes_wm.jsonl``, ``summary_wm.json``;
* ``fidelity`` — teacher-forced single-step WM scores on held-out real transitions: ``single_step/``
  (the scorer's files, ``eval_summary.json``) and ``fidelity.json``;
* ``all`` — all of the above for one agent, plus W2R replays (``episodes_w2r.jsonl``) and
  ``fidelity.json`` with Real / WM / W2R success rates (with counts) and CR = W2R / Real;
* ``w2r`` — the W2R replays of an earlier ``agent-wm`` run's episodes (``--wm-episodes``), where the world model
  ran on another machine: ``episodes_w2r.jsonl``, ``summary_w2r.json``.

``all`` and ``w2r`` also write ``agreement.json``: per step, the simulated observation against the real env's
after the same action (:func:`textwm.eval.closed_loop.step_agreement`).

Every run writes ``eval_config.json`` (the resolved config, API key left out) and ``eval_<env>.md``
(the summary tables).
"""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from textwm.cli_checks import check_output_dir, json_object
from textwm.clients.wm import WMClient
from textwm.config import ConfigCLI, ConfigError, config_dict, option
from textwm.data.jsonl import DataError, atomic_write, read_jsonl, write_json, write_jsonl
from textwm.envs.blocking import BlockingPool
from textwm.envs.protocol import EnvError
from textwm.envs.registry import env_names, get_env
from textwm.envs.sim_cache import SimTaskCache
from textwm.envs.simulator import Simulator, anchors_enabled, guard_enabled
from textwm.eval import closed_loop as cl
from textwm.eval import fidelity as fid
from textwm.eval.agents import AgentError, ExpertAgent, LocalAgent, OpenAIAgent
from textwm.eval.closed_loop import EvalInputError
from textwm.eval.episodes import EpisodeRecord, summary_markdown
from textwm.eval.fidelity import FidelityError, closed_loop_markdown
from textwm.generation.api import ApiGenerationConfig
from textwm.generation.settings import DecodeSettings
from textwm.metrics.report import markdown_table

log = logging.getLogger(__name__)

MODES = ("agent-real", "agent-wm", "fidelity", "all", "w2r")


@dataclass
class EvalConfig:
    """Agent success in the real env and in the world model, W2R and CR, and single-step WM fidelity."""

    mode: str = option("all", "what to evaluate: agent-real | agent-wm | fidelity | all | w2r", positional=True,
                       choices=MODES)
    env: str = option("", "the env (a registered name, e.g. sciworld)")
    output_dir: str = option("", "where episodes, summaries and fidelity.json go")
    rows: str = option("", "RL task rows, e.g. rl_test.jsonl of <env>/build_wm_dataset.py")
    tasks: list[str] = option(help="only rows of these task families (e.g. boil melt)", default_factory=list)
    episodes: int = option(0, "evaluate the first N rows only (0: all)")
    repeats: int = option(1, "episodes per row (use with --temperature > 0)")
    max_turns: int = option(0, "agent turns per episode (0: each row's max_turns)")
    workers: int = option(2, "real-env worker processes (one env session each) = episodes in flight")
    agent_url: str = option("", "agent behind an OpenAI-compatible endpoint (e.g. http://127.0.0.1:8000/v1)")
    agent_model: str = option("", "model id at --agent-url (default: the first one /v1/models lists)")
    agent_api_key: str = option("", "bearer token for --agent-url", env="OPENAI_API_KEY", secret=True)
    agent_path: str = option("", "agent as a local checkpoint folder (AR or SDAR)")
    agent: str = option("", "expert: the env's own expert as the agent (ALFWorld's handcoded expert: real env only; "
                            "AppWorld's reads the conversation, so it plays in the world model too)",
                        choices=("", "expert"))
    temperature: float = option(0.0, "agent sampling temperature (0: greedy)")
    top_p: float = option(1.0, "agent nucleus sampling")
    agent_max_tokens: int = option(256, "agent tokens per reply at most")
    agent_batch_size: int = option(8, "local agent: conversations per decoding batch")
    agent_concurrency: int = option(32, "endpoint agent: requests in flight at most")
    agent_timeout: float = option(120.0, "endpoint agent: seconds per request")
    agent_extra_body: str = option("", "endpoint agent: JSON object merged into each request, e.g. "
                                       "'{\"chat_template_kwargs\": {\"enable_thinking\": false}}'")
    device: str = option("auto", "local agent device: auto, cpu, cuda, cuda:1, ...")
    seed: int = option(0, "local agent sampling seed")
    wm_endpoint: str = option("", "WM proxy for the agent-in-WM episodes", env="WM_ENDPOINT")
    wm_episodes: str = option("", "w2r: the episodes_wm.jsonl of an agent-wm run, replayed in the real env")
    wm_api_key: str = option("", "bearer token of the WM proxy and of --wm-url, when they have one", env="WM_API_KEY",
                             secret=True)
    wm_guard: str = option("", "1: local responder first, 0: every step to the WM (default: $<ENV>_WM_GUARD or 1)")
    wm_on_error: str = option("end", "a failed WM answer: end (the episode ends as wm_error) or fallback (the env's "
                                     "substitute observation, counted; the paper's plugins)", env="WM_ON_ERROR")
    wm_concurrency: int = option(8, "simulated episodes in flight (agent batch size and concurrent WM requests)")
    wm_max_tokens: int = option(256, "WM tokens per observation at most")
    wm_temperature: float = option(0.0, "WM sampling temperature")
    wm_timeout: float = option(120.0, "seconds per WM request")
    wm_transitions: str = option("", "held-out real transitions for single-step fidelity, e.g. wm_test.jsonl")
    wm_url: str = option("", "single-step: the WM behind an OpenAI-compatible endpoint (the server, not the proxy)")
    wm_model: str = option("", "single-step: model id at --wm-url (default: the first one listed)")
    wm_path: str = option("", "single-step: the WM as a local checkpoint folder")
    wm_batch_size: int = option(8, "single-step with --wm-path: rows per decoding batch")
    num_gpus: int = option(1, "single-step with --wm-path: GPUs (0, or no CUDA: CPU)")
    single_step_limit: int = option(0, "single-step: score the first N transitions only (0: all)")
    mauve: bool = option(False, "single-step: also compute MAUVE (offline featuriser; slow on CPU)")

    def __post_init__(self) -> None:
        if self.env not in env_names():
            raise ConfigError(f"must name a registered env ({', '.join(env_names())}), got {self.env!r}", key="--env")
        if not self.output_dir:
            raise ConfigError("is required", key="--output-dir")
        for name in ("workers", "repeats", "agent_batch_size", "agent_concurrency", "wm_concurrency",
                     "agent_max_tokens", "wm_max_tokens", "wm_batch_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"must be >= 1, got {getattr(self, name)}", key=_flag(name))
        for name in ("episodes", "max_turns", "single_step_limit", "num_gpus", "temperature", "wm_temperature"):
            if getattr(self, name) < 0:
                raise ConfigError(f"must be >= 0, got {getattr(self, name)}", key=_flag(name))
        if self.wm_guard not in ("", "0", "1"):
            raise ConfigError(f"must be 0 or 1, got {self.wm_guard!r}", key="--wm-guard")
        if self.wm_on_error not in ("end", "fallback"):
            raise ConfigError(f"must be end or fallback, got {self.wm_on_error!r}", key="--wm-on-error")
        json_object(self.agent_extra_body, "--agent-extra-body")
        if self.mode == "w2r":
            _must_exist("--wm-episodes", self.wm_episodes, "the episodes_wm.jsonl of an agent-wm run")
            _must_exist("--rows", self.rows, "the RL task rows that agent-wm run played")
        if self.needs_agent:
            _must_exist("--rows", self.rows, f"RL task rows (rl_test.jsonl from {self.env}/build_wm_dataset.py)")
            if sum(map(bool, (self.agent_url, self.agent_path, self.agent))) != 1:
                raise ConfigError(f"{self.mode} needs exactly one agent: --agent-url (OpenAI-compatible endpoint), "
                                  "--agent-path (local checkpoint folder) or --agent expert")
            if self.agent == "expert" and self.mode != "agent-real" and not get_env(self.env).conversation_expert:
                raise ConfigError(f"the {self.env} expert plays the real env only: use it with agent-real",
                                  key="--agent")
            if self.agent_path and not Path(self.agent_path).is_dir():
                raise ConfigError(f"{self.agent_path} is not a checkpoint folder", key="--agent-path")
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
                raise ConfigError(f"{self.wm_path} is not a checkpoint folder", key="--wm-path")

    @property
    def needs_agent(self) -> bool:
        return self.mode not in ("fidelity", "w2r")

    @property
    def single_step(self) -> bool:
        return bool(self.wm_transitions) and self.mode in ("fidelity", "all")

    def use_local_responder(self) -> bool:
        """The ``--wm-guard`` switch, else the env's ``<ENV>_WM_GUARD``, else on."""

        return guard_enabled(get_env(self.env).guard_env) if self.wm_guard == "" else self.wm_guard == "1"


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _must_exist(flag: str, path: str, what: str) -> None:
    if not path:
        raise ConfigError(f"is required: {what}", key=flag)
    if not Path(path).is_file():
        raise ConfigError(f"{path}: file not found ({what})", key=flag)


# --- the run -------------------------------------------------------------------------------------------


def make_agent(config: EvalConfig) -> Any:
    """The agent of ``config``; an endpoint agent is checked for reachability here."""

    if config.agent == "expert":
        return ExpertAgent(get_env(config.env))
    if config.agent_url:
        agent = OpenAIAgent(config.agent_url, model=config.agent_model or None, api_key=config.agent_api_key or None,
                            temperature=config.temperature, top_p=config.top_p, max_tokens=config.agent_max_tokens,
                            concurrency=config.agent_concurrency, timeout_s=config.agent_timeout,
                            extra_body=json.loads(config.agent_extra_body) if config.agent_extra_body else None)
        agent.check()
        return agent
    return LocalAgent(config.agent_path, device=config.device, temperature=config.temperature, top_p=config.top_p,
                      max_tokens=config.agent_max_tokens, batch_size=config.agent_batch_size, seed=config.seed)


def check_wm_endpoint(endpoint: str, timeout_s: float = 10.0) -> None:
    """Fail fast when the WM proxy is down or says its upstream is (``GET /health``)."""
    url = httpx.URL(endpoint).join("/health")
    try:
        resp = httpx.get(url, timeout=timeout_s)  # /health needs no API key
    except httpx.HTTPError as exc:
        raise EvalInputError(f"the WM proxy at {endpoint} is not reachable ({type(exc).__name__}: {exc}); start it "
                             "(scripts/wm_stack.py start) or fix --wm-endpoint") from None
    if resp.status_code == 503:
        raise EvalInputError(f"the WM proxy at {endpoint} is up but not ready (its upstream is down): {resp.text[:200]}")
    if resp.status_code != 200:
        log.warning("GET %s answered %d; going on (the endpoint may not be the textwm proxy)", url, resp.status_code)


def _write_episodes(path: Path, records: list[Any]) -> None:
    write_jsonl(path, [r.to_dict() for r in records])


def run(config: EvalConfig) -> dict[str, Any]:
    """Run the evaluation of ``config``; writes the output files and returns everything they hold."""
    spec = get_env(config.env)
    out = check_output_dir(config.output_dir, "--output-dir")
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "eval_config.json", config_dict(config))
    results: dict[str, Any] = {"mode": config.mode, "env": spec.name}
    in_wm, in_real = config.mode in ("agent-wm", "all"), config.mode in ("agent-real", "all")
    if in_wm:  # before the rows: completing them may take minutes
        check_wm_endpoint(config.wm_endpoint)
    # Rows without a start state (the paper's released rows) are completed from the start-state cache
    # ($TEXTWM_SIM_CACHE), baked from the real env once where it has none yet.
    sim_cache = SimTaskCache(spec) if in_wm and spec.builds_sim_tasks else None
    starts = (cl.load_rows(spec, config.rows, need_sim=in_wm, tasks=config.tasks, limit=config.episodes,
                           sim_cache=sim_cache) if config.needs_agent else [])
    wm_client = None
    if in_wm:
        wm_client = WMClient(config.wm_endpoint, timeout_s=config.wm_timeout, max_tokens=config.wm_max_tokens,
                             temperature=config.wm_temperature, api_key=config.wm_api_key or None)
    agent = make_agent(config) if config.needs_agent else None
    pool = None
    if in_real:  # the envs warm up during the WM episodes
        session = spec.prepare_real(config.rows, starts, out / "games")
        pool = BlockingPool(spec, config.workers, session_config=session).launch()
    if config.mode == "w2r":
        return _replay_file(spec, config, out, results)
    try:
        if agent is not None:
            results["agent"] = agent.describe()
        if in_wm:
            wm = cl.evaluate_agent_wm(spec, starts, agent, Simulator(wm_client, use_local=config.use_local_responder(),
                                                                       on_wm_error=config.wm_on_error,
                                                                       anchors=anchors_enabled(spec.anchors_env)),
                                      concurrency=config.wm_concurrency, max_turns=config.max_turns,
                                      repeats=config.repeats)
            _write_episodes(out / "episodes_wm.jsonl", wm.records)
            write_json(out / "summary_wm.json", wm.summary)
            results["wm"] = wm.summary
        if in_real:
            real = cl.evaluate_agent_real(spec, starts, agent, pool=pool, max_turns=config.max_turns,
                                          repeats=config.repeats)
            _write_episodes(out / "episodes_real.jsonl", real.records)
            write_json(out / "summary_real.json", real.summary)
            results["real"] = real.summary
        if config.mode == "all":
            w2r = cl.replay_in_real(spec, wm.records, {s.task_id: s for s in starts}, pool=pool)
            _write_episodes(out / "episodes_w2r.jsonl", w2r.records)
            results["w2r"] = w2r.summary
            results["fidelity"] = fid.closed_loop_fidelity(real.summary, wm.summary, w2r.summary)
            results["agreement"] = cl.step_agreement(wm.records, w2r.records)
            write_json(out / "agreement.json", results["agreement"])
    finally:
        if pool is not None:
            pool.close()
        if agent is not None:
            agent.close()
        if wm_client is not None:
            wm_client.close()
    if config.single_step:
        results["single_step"] = fid.wm_fidelity_single_step(config.wm_transitions, out, _single_step_wm(config),
                                                             mauve=config.mauve,
                                                             limit=config.single_step_limit or None)
    if config.mode in ("fidelity", "all"):
        fidelity = dict(results.get("fidelity") or {})
        fidelity["single_step"] = results.get("single_step")
        if config.mode == "all" and not config.single_step:
            fidelity["single_step_note"] = "not run: no --wm-transitions"
        write_json(out / "fidelity.json", fidelity)
    with atomic_write(out / f"eval_{spec.name}.md") as f:
        f.write(markdown(results, config))
    return results


def _replay_file(spec: Any, config: EvalConfig, out: Path, results: dict[str, Any]) -> dict[str, Any]:
    """The ``w2r`` mode: an agent-wm run's episodes replayed in the real env, and the per-step agreement."""
    records = [EpisodeRecord.from_dict(r) for r in read_jsonl(config.wm_episodes).rows]
    starts = {s.task_id: s for s in cl.load_rows(spec, config.rows, need_sim=False, tasks=config.tasks)}
    missing = sorted({r.task_id for r in records} - set(starts))
    if missing:
        raise cl.EvalInputError(f"--wm-episodes {config.wm_episodes}: {len(missing)} task(s) not in --rows "
                                f"{config.rows}, e.g. {missing[0]!r}; give the rows the agent-wm run played")
    wanted = [starts[t] for t in dict.fromkeys(r.task_id for r in records)]
    session = spec.prepare_real(config.rows, wanted, out / "games")
    pool = BlockingPool(spec, config.workers, session_config=session).launch()
    try:
        w2r = cl.replay_in_real(spec, records, starts, pool=pool)
    finally:
        pool.close()
    _write_episodes(out / "episodes_w2r.jsonl", w2r.records)
    write_json(out / "summary_w2r.json", w2r.summary)
    results["w2r"] = w2r.summary
    results["agreement"] = cl.step_agreement(records, w2r.records)
    write_json(out / "agreement.json", results["agreement"])
    with atomic_write(out / f"eval_{spec.name}.md") as f:
        f.write(markdown(results, config))
    return results


def _single_step_wm(config: EvalConfig) -> Any:
    if config.wm_url:
        return ApiGenerationConfig(config.wm_url, model=config.wm_model or None, max_tokens=config.wm_max_tokens,
                                   temperature=config.wm_temperature, timeout_s=config.wm_timeout,
                                   api_key=config.wm_api_key or None)
    return fid.CheckpointWM(config.wm_path, decode=DecodeSettings(gen_length=config.wm_max_tokens,
                                                                  temperature=config.wm_temperature),
                            per_batch=config.wm_batch_size, num_gpus=config.num_gpus)


def markdown(results: dict[str, Any], config: EvalConfig) -> str:
    title = get_env(config.env).title or config.env
    lines = [f"# {title} evaluation ({config.mode})", ""]
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
    if "w2r" in results and "fidelity" not in results:
        lines += ["## W2R: the WM episodes' actions replayed in the real env", "", summary_markdown(results["w2r"])]
    if "agreement" in results:
        agreement = results["agreement"]
        lines += ["## Per-step agreement with the real env (same actions, exact observation)", "",
                  f"- episodes compared: {agreement['episodes']}"]
        lines += [f"- {k}: {v['agree']} of {v['steps']} steps ({v['rate']:.3f})"
                  for k, v in agreement.items() if k != "episodes"]
        lines.append("")
    if results.get("single_step"):
        ss = results["single_step"]
        lines += ["## Single-step fidelity (teacher-forced, held-out real transitions)", "",
                  f"- transitions: {ss['transitions']} ({ss['rows']} rows, {ss['failed_requests']} failed requests); "
                  f"generator: `{ss['generator']}`", "", markdown_table({ss["dataset"]: ss["summary"]})]
        if ss.get("exact_match_by_source"):
            lines += ["EM by transition source: " + ", ".join(
                f"{k} {v['exact_match']:.3f} (n={v['num_samples']})" for k, v in ss["exact_match_by_source"].items()), ""]
    return "\n".join(lines) + "\n"


# --- command line --------------------------------------------------------------------------------------


def parse_config(argv: list[str] | None = None, prog: str | None = None, *, env: str | None = None) -> EvalConfig:
    argv = list(sys.argv[1:] if argv is None else argv)
    if env is not None:
        argv = ["--env", env, *argv]
    return ConfigCLI(EvalConfig, prog=prog or "python -m textwm.eval", description=EvalConfig.__doc__,
                     key_values=False).parse(argv)[0]


def setup_logging() -> None:
    """The evaluation commands' log: INFO, the env libraries' and HTTP client's chatter at WARNING."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for name in ("py4j", "scienceworld", "httpx"):
        logging.getLogger(name).setLevel(logging.WARNING)


def input_errors() -> tuple[type[BaseException], ...]:
    """Errors that mean bad input (files, rows, endpoints, checkpoints): exit 2 with the message."""

    errors: tuple[type[BaseException], ...] = (DataError, EvalInputError, AgentError, FidelityError, EnvError,
                                               ConfigError)
    if "textwm.models.checkpoint" in sys.modules:  # only a local agent or WM can raise it (torch is loaded then)
        errors += (sys.modules["textwm.models.checkpoint"].CheckpointError,)
    return errors


def main(argv: list[str] | None = None, prog: str | None = None, *, env: str | None = None) -> int:
    """``python -m textwm.eval --env NAME MODE ...`` (``sciworld/eval_sciworld.py`` fixes ``env``)."""
    try:
        config = parse_config(argv, prog, env=env)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    setup_logging()
    try:
        results = run(config)
    except input_errors() as exc:  # evaluated only when an exception arrives
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(markdown(results, config))
    written = [f"eval_{config.env}.md", "eval_config.json",
               *(n for n in ("episodes_real.jsonl", "episodes_wm.jsonl", "episodes_w2r.jsonl", "fidelity.json",
                             "single_step/") if (Path(config.output_dir) / n).exists())]
    print(f"wrote {config.output_dir}/ ({', '.join(written)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
