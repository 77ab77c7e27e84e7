"""ms-swift adapters: one multi-turn scheduler and one ORM reward over any registered env.

An env is an :class:`~textwm.envs.contract.EnvSpec` in the registry; :func:`register` builds the two
classes for it and puts them in ms-swift's registries (``swift.rollout.multi_turns`` and
``swift.rewards.orms``) as ``<env>_scheduler`` and ``<env>_reward``, so an env's ``<env>_plugin.py``
is one line. ms-swift is imported only when a class is built.

One agent turn, as ms-swift 4.6 drives it (colocate: ``swift.rollout.agent_loop.run_multi_turn``;
server mode: ``MultiTurnScheduler.run``; both call the same hooks in this order):

1. ``on_turn_end(request, choice, turn)``: the reply goes through the one episode loop
   (:class:`~textwm.envs.episode.Trajectory`, shared with evaluation): an action is answered by the
   :class:`~textwm.envs.simulator.Simulator` (local responder, else the world model over HTTP); the
   env's outcome (goals, loops, streaks) and the turn limits decide ``done``. Returns
   ``{"done": ..., "rollout_infos": ...}``; ``done`` overrides ``check_finished``.
2. ``check_finished``: the episode's own ``done``. A reply cut at ``max_completion_length``
   (``finish_reason == "length"``, which ends the rollout in ms-swift's default) does not end the
   episode: its first line is still an action.
3. ``step`` (only if not done): the observation, or the format hint, becomes the next user message.

Per-episode state is plain JSON kept in ``request.data_dict[STATE_KEY]``, with the request (whose
``data_dict`` holds the dataset row's extra columns); the scheduler keeps no per-request dicts,
only bounded counters. ``rollout_infos`` (ms-swift merges them into the sample and passes them to
every reward as ``kwargs["rollout_infos"]``) carry the trajectory summary (:meth:`EpisodeDriver.infos`);
the reward turns its ``outcome`` into a number and appends one line per finished episode to the
trajectory log.

Failures are visible, never papered over:

- an unparseable reply is counted, the agent is told what a valid action looks like, and the env's
  streak rule ends the episode;
- a world-model failure (after the WM client's retries) ends the episode: ``rollout_infos["wm_error"]``
  is true, the failure is logged and counted, and no observation is made up. Its reward is the
  reward of the trajectory so far, i.e. of the env's outcome over the steps that were answered.
  ``$WM_ON_ERROR=fallback`` substitutes the env's fallback observation instead, as the paper's plugins do:
  the episode goes on, the step's source is ``fallback`` and the counters count it.

``TEXTWM_ROLLOUT_ENV=real`` (:mod:`textwm.rl.real_rollouts`) steps every action in a real env server session
instead (``TEXTWM_REAL_ENV_URL``): the same driver, turn rules, reward and prompt, the real env's observations
and score.

Rows without a simulator start state (the paper's released ScienceWorld rows) are completed on first use
from :mod:`textwm.envs.sim_cache` (the launcher fills the cache before swift starts; a start state not
cached yet is baked from the real env here, once). The env's replay switch (``SCIWORLD_ENV_URL``, the
paper's; :attr:`~textwm.envs.contract.EnvSpec.replay_url_env`) makes the reward replay each episode's actions
in that env server and reward the real outcome (:mod:`textwm.rl.replay`); a replay that fails is counted,
logged and recorded (``replay.error``, ``reward_source``), and that sample keeps its simulated reward; a
batch whose replays all failed raises. ms-swift's ORM has no metric hook, so the counts are in the log
lines and the trajectory log.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from textwm._optional import require
from textwm.clients.retry import RetryPolicy
from textwm.clients.wm import WMClient
from textwm.data.jsonl import DataError
from textwm.envs.contract import EnvSpec, Outcome
from textwm.envs.episode import Step, Trajectory, TurnRules
from textwm.envs.protocol import EnvError
from textwm.envs.registry import get_env
from textwm.envs.sim_cache import SimTaskCache
from textwm.envs.simulator import (
    FALLBACK,
    ON_WM_ERROR_ENV,
    WM,
    WM_ERROR,
    Simulator,
    anchors_enabled,
    guard_enabled,
    on_wm_error_from_env,
)
from textwm.rl.real_rollouts import (
    ROLLOUT_ENV_VAR,
    RealEnvRollouts,
    ongoing,
    real_rollouts_from_env,
    rollout_env,
)
from textwm.rl.replay import EnvReplayer, ReplayEpisode, ReplayResult, replayer_from_env
from textwm.rl.trajectory_log import BATCH_LOG_NAME, TrajectoryLog, batch_record, trajectory_log_path

log = logging.getLogger(__name__)


#: Key of the episode state in ``RolloutInferRequest.data_dict``.
STATE_KEY = "textwm_episode"
#: The world model's temperature in rollouts unless ``WM_TEMPERATURE`` says otherwise.
DEFAULT_WM_TEMPERATURE = 0.7


def _spec(env: str | EnvSpec) -> EnvSpec:
    return get_env(env) if isinstance(env, str) else env


# --- configuration -----------------------------------------------------------------------------------

def _env_number(environ: Mapping[str, str], name: str, default: float, kind: type) -> Any:
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return kind(raw)
    except ValueError:
        raise ValueError(f"${name}={raw!r} is not a valid {kind.__name__}") from None


@dataclass(frozen=True)
class WMSettings:
    """How the scheduler reaches the world model (the WM proxy). Read from env vars by :meth:`from_env`."""

    #: The WM proxy URL (``WM_ENDPOINT``), e.g. ``http://127.0.0.1:30000/``.
    endpoint: str
    #: Retries after the first attempt on connection errors, timeouts and busy answers (``WM_MAX_RETRIES``).
    max_retries: int = 3
    #: Seconds a prediction may take, retries included (``WM_TIMEOUT_S``).
    timeout_s: float = 120.0
    #: Longest observation the WM may generate, in tokens (``WM_MAX_TOKENS``).
    max_tokens: int = 256
    #: Bearer token of the WM proxy, when it was started with one (``WM_API_KEY``).
    api_key: str = field(default="", repr=False)
    #: The world model's sampling in rollouts (``WM_TEMPERATURE``): above 0, so that a group's episodes meet
    #: different plausible worlds (the diffusion models' diversity enters the rollouts); 0 is greedy.
    temperature: float = DEFAULT_WM_TEMPERATURE
    #: Nucleus sampling of the world model (``WM_TOP_P``; None: the server's, 1.0).
    top_p: float | None = None
    #: Denoising steps per block of a diffusion world model (``WM_DIFFUSION_STEPS``; None: the server's).
    diffusion_steps: int | None = None
    #: At most this many world-model requests in flight from the rollouts (``WM_MAX_CONCURRENT``, the paper's knob
    #: for a shared endpoint; None: as many as there are episodes waiting).
    max_concurrent: int | None = None

    def __post_init__(self) -> None:
        if not self.endpoint.startswith(("http://", "https://")):
            raise ValueError(f"WM_ENDPOINT={self.endpoint!r}: give the WM proxy's URL, e.g. http://127.0.0.1:30000/")
        if self.max_retries < 0:
            raise ValueError(f"WM_MAX_RETRIES={self.max_retries}: use 0 or more")
        if self.timeout_s <= 0 or self.max_tokens <= 0:
            raise ValueError(f"WM_TIMEOUT_S={self.timeout_s} and WM_MAX_TOKENS={self.max_tokens} must be positive")
        if self.temperature < 0:
            raise ValueError(f"WM_TEMPERATURE={self.temperature}: use 0 (greedy) or more")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ValueError(f"WM_TOP_P={self.top_p}: use a value in (0, 1]")
        if self.diffusion_steps is not None and self.diffusion_steps < 1:
            raise ValueError(f"WM_DIFFUSION_STEPS={self.diffusion_steps}: use 1 or more")
        if self.max_concurrent is not None and self.max_concurrent < 1:
            raise ValueError(f"WM_MAX_CONCURRENT={self.max_concurrent}: use 1 or more (unset: no cap)")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> WMSettings:
        environ = os.environ if environ is None else environ
        endpoint = environ.get("WM_ENDPOINT", "").strip()
        if not endpoint:
            raise ValueError("WM_ENDPOINT is not set: point it at the WM proxy (start one with "
                             "`python scripts/wm_stack.py start --model-path <WM checkpoint>`), "
                             "e.g. WM_ENDPOINT=http://127.0.0.1:30000/")
        return cls(endpoint, max_retries=_env_number(environ, "WM_MAX_RETRIES", 3, int),
                   timeout_s=_env_number(environ, "WM_TIMEOUT_S", 120.0, float),
                   max_tokens=_env_number(environ, "WM_MAX_TOKENS", 256, int),
                   api_key=environ.get("WM_API_KEY", "").strip(),
                   temperature=_env_number(environ, "WM_TEMPERATURE", DEFAULT_WM_TEMPERATURE, float),
                   top_p=_env_number(environ, "WM_TOP_P", None, float),
                   diffusion_steps=_env_number(environ, "WM_DIFFUSION_STEPS", None, int),
                   max_concurrent=_env_number(environ, "WM_MAX_CONCURRENT", None, int))

    def sampling(self) -> dict[str, Any]:
        """What the run records of the world model's decoding."""
        return {"temperature": self.temperature, "top_p": self.top_p, "diffusion_steps": self.diffusion_steps,
                "max_tokens": self.max_tokens, "max_concurrent": self.max_concurrent}

    def client(self) -> WMClient:
        return WMClient(self.endpoint, timeout_s=self.timeout_s, retry=RetryPolicy(max_retries=self.max_retries),
                        max_tokens=self.max_tokens, api_key=self.api_key or None, temperature=self.temperature,
                        top_p=self.top_p, num_diffusion_steps=self.diffusion_steps, max_concurrent=self.max_concurrent)


# --- the pure core: one episode, turn by turn ----------------------------------------------------------

@dataclass
class RolloutCounters:
    """Totals over this process's rollouts (bounded: a fixed set of numbers, not per request)."""

    episodes: int = 0
    turns: int = 0
    unparseable: int = 0
    wm_errors: int = 0
    #: Steps answered by the fallback observation after a WM failure (``$WM_ON_ERROR=fallback``).
    wm_fallbacks: int = 0
    #: WM steps sent with a template of what the responder knew (anchored requests).
    wm_anchored: int = 0
    #: Real rollouts whose env server failed (the episode ends as ``env_error``).
    env_errors: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **counts: int) -> None:
        with self._lock:
            for name, n in counts.items():
                setattr(self, name, getattr(self, name) + n)

    def as_dict(self) -> dict[str, int]:
        return {"episodes": self.episodes, "turns": self.turns, "unparseable": self.unparseable,
                "wm_errors": self.wm_errors, "wm_fallbacks": self.wm_fallbacks, "wm_anchored": self.wm_anchored,
                "env_errors": self.env_errors}


@dataclass
class TurnResult:
    done: bool
    #: The next user message (observation or format hint); None once the episode is over.
    next_message: str | None
    #: The trajectory summary so far (:meth:`EpisodeDriver.infos`).
    infos: dict[str, Any]


def _positive_int(value: Any) -> int | None:
    try:
        n = int(value)
    except (TypeError, ValueError):
        return None
    return n if n > 0 else None


class EpisodeDriver:
    """Plays episodes of one env turn by turn over plain-JSON state; knows nothing about ms-swift.

    Args:
        spec: the env.
        simulator: answers actions (local responder and/or world model).
        max_turns: the trainer's turn limit (``--max_turns``); a row's own ``max_turns`` column,
            if smaller, wins.
        sim_cache: completes rows that lack a simulator start state (None: such a row is refused).
    """

    def __init__(self, spec: EnvSpec, simulator: Simulator | None, *, max_turns: int | None = None,
                 sim_cache: SimTaskCache | None = None, real: RealEnvRollouts | None = None):
        if (simulator is None) == (real is None):
            raise ValueError("EpisodeDriver: give a simulator or a real env backend, one of them")
        self.spec = spec
        self.rules = TurnRules.of(spec)
        self.simulator = simulator
        self.real = real
        self.max_turns = _positive_int(max_turns)
        self.sim_cache = sim_cache
        self.counters = RolloutCounters()

    def begin(self, row: Mapping[str, Any], messages: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
        """State of a new episode (JSON-serialisable) for a dataset row; ValueError naming the row if impossible."""
        try:
            if self.sim_cache is not None:
                row = self.sim_cache.complete_row(row)
            start = self.spec.load_row(row, need_sim=True)
        except DataError as exc:
            raise ValueError(f"{self.spec.name} RL row {row.get('task_id', '?')!r}: {exc}") from None
        if messages:
            # The agent's conversation comes with the request (ms-swift keeps ``messages`` apart from the row's other
            # columns): a real reset may have to rebuild it, and the paper's WM layout sends it as the WM's state.
            start = dataclasses.replace(start, messages=tuple(dict(m) for m in messages))
        episode = self.spec.start_episode(start)
        limits = [n for n in (self.max_turns, start.max_turns) if n]
        trajectory = Trajectory(start.task_id, max_turns=min(limits) if limits else None, outcome=episode.outcome())
        state = {"episode": episode.to_dict(), "trajectory": trajectory.to_dict(),
                 "reset_options": dict(start.reset_options), "key": uuid.uuid4().hex,
                 # What the paper's rule reads of the task (fixed for the episode: taken once, here).
                 "reward_context": self.spec.reward_context(episode)}
        if self.real is not None:
            self._start_real(state, start)
        return state

    def _start_real(self, state: dict[str, Any], start: Any) -> None:
        """Reset the episode's real session; the agent's first message rebuilt from the reset where the env says
        so (``state["messages"]``). A failed reset is kept (``state["real_error"]``): the first turn fails on it."""
        try:
            reset = self.real.start(state["key"], start.task_id, start.reset_options)
        except EnvError as exc:
            state["real_error"] = f"{type(exc).__name__}: {exc}"
            return
        if not start.messages:
            return
        messages, rebuilt = self.spec.real_start(start, reset)
        if rebuilt:
            state["messages"] = messages

    def turn(self, state: dict[str, Any], reply: str) -> TurnResult:
        """Advance ``state`` (in place) by one agent reply."""
        trajectory = Trajectory.from_dict(state["trajectory"])
        episode = self.spec.episode_from_dict(state["episode"])
        action = trajectory.reply(reply, self.rules)
        # Where a rollout's time goes besides the agent's generation (the env's or the simulator's answers).
        timing, started = state.setdefault("timing", {}), time.perf_counter()
        if action is None:
            episode.unparseable()
            outcome = episode.outcome() if self.real is None else ongoing(episode, trajectory.outcome.score)
            trajectory.skipped(self.rules, outcome)
            self.counters.add(unparseable=1)
        elif self.real is not None and state.get("real_error"):
            trajectory.stepped(action, Step(None, trajectory.outcome, error=state["real_error"], failure="env_error"))
        elif self.real is not None:
            trajectory.stepped(action, self.real.step(state["key"], episode, action,
                                                      previous_score=trajectory.outcome.score))
        else:
            step = self.simulator.step(episode, action)
            if step.source == FALLBACK:
                self.counters.add(wm_fallbacks=1)
            if step.anchored:
                self.counters.add(wm_anchored=1)
            if step.source == WM:
                timing["wm_steps"] = timing.get("wm_steps", 0) + 1
                timing["wm_seconds"] = timing.get("wm_seconds", 0.0) + time.perf_counter() - started
            trajectory.stepped(action, step)
        timing["answer_seconds"] = timing.get("answer_seconds", 0.0) + time.perf_counter() - started
        state["episode"], state["trajectory"] = episode.to_dict(), trajectory.to_dict()
        self.counters.add(turns=1)
        if trajectory.finished:
            self._finished(trajectory)
            if self.real is not None:
                self.real.end(state["key"])
        return TurnResult(trajectory.finished, trajectory.pending, self.infos(state))

    def _finished(self, trajectory: Trajectory) -> None:
        failed = trajectory.end_reason == WM_ERROR
        self.counters.add(episodes=1, wm_errors=int(failed), env_errors=int(trajectory.end_reason == "env_error"))
        if failed:
            c = self.counters
            log.warning("%s: world model failed on task %s at turn %d; episode ended with wm_error "
                        "(%d WM failures in %d episodes so far): %s", self.spec.name, trajectory.task_id,
                        trajectory.turns, c.wm_errors, c.episodes, trajectory.error)

    def pending(self, state: Mapping[str, Any]) -> str | None:
        return state["trajectory"]["pending"]

    def finished(self, state: Mapping[str, Any]) -> bool:
        return bool(state["trajectory"]["finished"])

    def infos(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """The ``rollout_infos`` of an episode: everything the reward and the trajectory log need."""
        t = state["trajectory"]
        failed = t["end_reason"] == WM_ERROR
        return {"env": self.spec.name, "task_id": t["task_id"], "turns": len(t["replies"]),
                "actions": list(t["actions"]), "observations": list(t["observations"]), "sources": list(t["sources"]),
                "done": t["finished"], "end_reason": t["end_reason"], "outcome": dict(t["outcome"]),
                "wm_error": failed, "wm_error_message": t["error"] if failed else None,
                "unparseable": t["unparseable"], "reset_options": dict(state.get("reset_options") or {}),
                "last_reply": t["replies"][-1] if t["replies"] else None,
                "reward_context": state["reward_context"],
                "timing": {k: round(v, 4) if isinstance(v, float) else v for k, v in state.get("timing", {}).items()}}


# --- reward rule ---------------------------------------------------------------------------------------

#: ``ours`` (default: :meth:`EnvSpec.reward`) or ``paper`` (:meth:`EnvSpec.paper_reward`).
REWARD_RULE_VAR = "TEXTWM_REWARD"
REWARD_RULES = ("ours", "paper")


def reward_rule(spec: EnvSpec, environ: Mapping[str, str] | None = None) -> str:
    """The reward rule ``$TEXTWM_REWARD`` names, checked against what the env defines."""
    environ = os.environ if environ is None else environ
    rule = environ.get(REWARD_RULE_VAR, "").strip().lower() or "ours"
    if rule not in REWARD_RULES:
        raise ValueError(f"${REWARD_RULE_VAR}={rule!r}: use {' or '.join(REWARD_RULES)}")
    if rule == "paper" and not spec.has_paper_reward:
        raise ValueError(f"${REWARD_RULE_VAR}=paper: the paper's reward rule is not written for {spec.name} yet; "
                         "use ours")
    return rule


def _at(values: Any, i: int) -> Any:
    return values[i] if isinstance(values, (list, tuple)) and i < len(values) else None


# --- ms-swift classes ----------------------------------------------------------------------------------

def _announce_logs() -> None:
    """Show this package's INFO lines inside ms-swift runs, unless the application configured logging."""
    root = logging.getLogger("textwm")
    if not root.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("[%(levelname)s:%(name)s] %(message)s"))
        root.addHandler(handler)
        root.setLevel(logging.INFO)


def make_scheduler_class(env: str | EnvSpec) -> type:
    """A ``swift.rollout.MultiTurnScheduler`` subclass, ``<class_prefix>Scheduler``, playing ``env`` in the simulator.

    ms-swift builds it once per trainer process as ``cls(max_turns=..., tokenizer=..., template=...)``
    (colocate) or ``cls(infer_engine=..., max_turns=..., [tokenizer=...])`` (``swift rollout``); every
    argument is forwarded. The world model comes from ``WM_ENDPOINT`` (:class:`WMSettings`) and
    ``<ENV>_WM_GUARD=0`` turns the local responder off.
    """
    spec = _spec(env)
    class_name = f"{spec.class_prefix}Scheduler"
    rollout = require("swift.rollout", extra="rl", package="ms-swift")
    _announce_logs()

    class EnvScheduler(rollout.MultiTurnScheduler):
        def __init__(self, infer_engine: Any = None, max_turns: int | None = None, *args: Any, **kwargs: Any):
            super().__init__(infer_engine, max_turns, *args, **kwargs)
            sim_cache = SimTaskCache(spec) if spec.builds_sim_tasks else None
            real = real_rollouts_from_env(spec)
            if real is not None:
                self.driver = EpisodeDriver(spec, None, real=real, max_turns=max_turns, sim_cache=sim_cache)
                log.info("%s: rollouts in the real env at %s (%s=real; up to %d sessions); max_turns %s", class_name,
                         real.url, ROLLOUT_ENV_VAR, real.max_sessions, max_turns)
                return
            wm = WMSettings.from_env()
            use_local = guard_enabled(spec.guard_env)
            on_error = on_wm_error_from_env()
            simulator = Simulator(wm.client(), use_local=use_local, on_wm_error=on_error,
                                  anchors=anchors_enabled(spec.anchors_env))
            self.driver = EpisodeDriver(spec, simulator, max_turns=max_turns, sim_cache=sim_cache)
            log.info("%s: world model at %s (retries %d, timeout %.0f s; sampling %s); local responder %s (%s); "
                     "a failed answer: %s ($%s); max_turns %s", class_name, wm.endpoint, wm.max_retries, wm.timeout_s,
                     wm.sampling(), "on" if use_local else "off", spec.guard_env, on_error, ON_WM_ERROR_ENV,
                     max_turns)

        @property
        def counters(self) -> RolloutCounters:
            return self.driver.counters

        def episode_state(self, infer_request: Any) -> dict[str, Any]:
            """The request's episode state, started from its row on first use."""
            data = infer_request.data_dict
            if data is None:
                data = infer_request.data_dict = {}
            state = data.get(STATE_KEY)
            if state is None:
                state = data[STATE_KEY] = self.driver.begin(data, infer_request.messages or ())
            return state

        async def on_trajectory_start(self, requests: list[Any]) -> None:
            # Every episode starts at once (a real reset or a baked start takes ~0.1-1 s; a step's batch holds tasks
            # x generations episodes), and a row that cannot start fails the batch before any generation.
            states = await asyncio.gather(*(asyncio.to_thread(self.episode_state, r) for r in requests))
            for request, state in zip(requests, states):
                if state.get("messages"):      # a real reset the row's baked start does not describe
                    request.messages[:] = [dict(m) for m in state.pop("messages")]

        async def on_turn_end(self, infer_request: Any, response_choice: Any, current_turn: int) -> dict[str, Any]:
            state = self.episode_state(infer_request)
            reply = response_choice.message.content
            result = await asyncio.to_thread(self.driver.turn, state, reply if isinstance(reply, str) else "")
            return {"done": result.done, "rollout_infos": result.infos}

        def check_finished(self, infer_request: Any, response_choice: Any, current_turn: int) -> bool:
            return self.driver.finished(self.episode_state(infer_request))

        def step(self, infer_request: Any, response_choice: Any, current_turn: int) -> dict[str, Any]:
            trajectory = self.episode_state(infer_request)["trajectory"]
            message, trajectory["pending"] = trajectory["pending"], None
            if message is not None:
                infer_request.messages.append({"role": "user", "content": message})
            return {"infer_request": infer_request}

    EnvScheduler.__name__ = EnvScheduler.__qualname__ = class_name
    return EnvScheduler


def make_reward_class(env: str | EnvSpec) -> type:
    """A ``swift.rewards.ORM`` subclass, ``<class_prefix>Reward``: the env's reward of each finished episode's outcome.

    It reads ``kwargs["rollout_infos"]`` written by the scheduler from :func:`make_scheduler_class`
    (a missing one is an error, not a zero reward), and appends one line per episode to the
    trajectory log (:func:`trajectory_log_path`). ms-swift logs the rewards as
    ``rewards/<class name>/mean``.
    """
    spec = _spec(env)
    class_name = f"{spec.class_prefix}Reward"
    rewards_mod = require("swift.rewards", extra="rl", package="ms-swift")
    _announce_logs()

    class EnvReward(rewards_mod.ORM):
        def __init__(self, args: Any = None, **kwargs: Any):
            super().__init__(args, **kwargs)
            self.spec = spec
            self.trajectory_log = TrajectoryLog(trajectory_log_path(args))
            self.batch_log = TrajectoryLog(self.trajectory_log.path.with_name(BATCH_LOG_NAME))
            self.replayer: EnvReplayer | None = replayer_from_env(spec)
            self.rule = reward_rule(spec)
            self.real_rollouts = rollout_env() == "real"
            if self.replayer is not None and self.real_rollouts:
                raise ValueError(f"{class_name}: ${spec.replay_url_env} replays each episode in a real env, but "
                                 f"${ROLLOUT_ENV_VAR}=real already plays it there; unset one of them")
            log.info("%s: trajectories -> %s; %s reward rule; reward from %s", class_name, self.trajectory_log.path,
                     self.rule,
                     f"replays in the real env server at {self.replayer.url} (${spec.replay_url_env})"
                     if self.replayer else "the simulated trajectory")

        def __call__(self, completions: list[Any], **kwargs: Any) -> list[float]:
            infos = kwargs.get("rollout_infos") or [None] * len(completions)
            step = getattr(kwargs.get("trainer_state"), "global_step", None)
            for i, info in enumerate(infos):
                if not isinstance(info, Mapping) or "outcome" not in info:
                    raise ValueError(f"{class_name}: sample {i} has no episode in its rollout_infos; this reward "
                                     f"needs the {spec.name} multi-turn scheduler (--multi_turn_scheduler "
                                     f"{spec.name}_scheduler)")
            replays = (self.replayer.replay_all([ReplayEpisode.from_infos(info) for info in infos])
                       if self.replayer else [None] * len(infos))
            values, records = [], []
            for i, (info, replay) in enumerate(zip(infos, replays)):
                value, source = self._value(info, replay)
                values.append(value)
                extra = {} if replay is None else {"replay": replay.to_dict()}
                records.append({"time": round(time.time(), 3), "step": step,
                                "prompt_id": _at(kwargs.get("prompt_id"), i),
                                "request_id": _at(kwargs.get("request_id"), i),
                                # reward_context stays out: the task's accounts are not a trajectory's to log.
                                **{k: v for k, v in info.items() if k not in ("num_turns", "reward_context")},
                                **extra,
                                "reward_source": source, "reward": value})
            self.trajectory_log.append(records)
            errors = sum(bool(r["wm_error"]) for r in records)
            batch = batch_record(step, records)
            log.info("%s: %d episodes in %d groups (%d without reward spread), mean reward %.3f, %d ended by a WM "
                     "failure, %d unparseable replies; answering took %.0f ms a turn (%d world-model steps, %.0f ms "
                     "each)", class_name, len(values), batch["groups"], batch["zero_spread_groups"], batch["mean_reward"],
                     errors, sum(int(r["unparseable"]) for r in records), 1000 * batch["answer_s_per_turn"],
                     batch["wm_steps"], 1000 * batch["wm_s_per_step"])
            self.batch_log.append([batch])
            if self.replayer is not None:
                self._report_replays(replays)
            return values

        def _value(self, info: Mapping[str, Any], replay: ReplayResult | None) -> tuple[float, str]:
            """The sample's reward and where it comes from: the real replay, else the simulated outcome."""
            if replay is not None and replay.outcome is not None:
                return self._rewarded(replay.outcome, info), "replay"
            source = ("real env" if self.real_rollouts else "simulator") if replay is None \
                else "simulator (replay failed)"
            return self._rewarded(Outcome.from_dict(info["outcome"]), info), source

        def _rewarded(self, outcome: Outcome, info: Mapping[str, Any]) -> float:
            if self.rule == "paper":
                return float(spec.paper_reward(outcome, info))
            return float(spec.reward(outcome))

        def _report_replays(self, replays: list[ReplayResult | None]) -> None:
            """Log this batch's replay failures with the running totals; raise when every replay failed."""
            failed = [r for r in replays if r is not None and r.error]
            r = self.replayer
            if failed:
                log.warning("%s: %d of %d replays in %s failed (%d of %d so far); those samples keep their "
                            "simulated reward. First: %s", class_name, len(failed), len(replays), r.url, r.errors,
                            r.replays, failed[0].error)
            if failed and len(failed) == len(replays):
                raise RuntimeError(f"{class_name}: every replay of this batch in the env server at {r.url} "
                                   f"(${spec.replay_url_env}) failed ({r.errors} of {r.replays} so far): "
                                   f"{failed[0].error}. Start the server (python {spec.name}/{spec.name}_env_server.py "
                                   f"--port 30003) or unset {spec.replay_url_env} to reward the simulated trajectory")

    EnvReward.__name__ = EnvReward.__qualname__ = class_name
    return EnvReward


def register(env: str | EnvSpec) -> tuple[type, type]:
    """Build both classes of ``env`` and register them as ``multi_turns["<env>_scheduler"]`` and
    ``orms["<env>_reward"]`` (what ``--multi_turn_scheduler`` and ``--reward_funcs`` name)."""
    spec = _spec(env)
    scheduler_cls, reward_cls = make_scheduler_class(spec), make_reward_class(spec)
    require("swift.rollout", extra="rl", package="ms-swift").multi_turns[f"{spec.name}_scheduler"] = scheduler_cls
    require("swift.rewards", extra="rl", package="ms-swift").orms[f"{spec.name}_reward"] = reward_cls
    return scheduler_cls, reward_cls
