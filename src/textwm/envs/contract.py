"""The env contract: everything generic code (Simulator, RL adapters, evaluation, env server, dataset
plumbing) needs from an environment, in one :class:`EnvSpec` per env.

An env subpackage (``textwm.envs.sciworld``, ...) subclasses :class:`EnvSpec`, fills in its
attributes and hooks, and is named once in :mod:`textwm.envs.registry`. Generic code asks the
registry for a spec by name (``get_env("sciworld")``) and never imports an env subpackage.

What a spec supplies:

* **rows** — :meth:`EnvSpec.load_row` turns a dataset row (an RL task row) into a :class:`TaskStart`
  once: task id, task family, the agent's start conversation, turn limit, the simulator's start
  state (``sim_task``) and the real env's reset options; an env that can bake a missing start state from
  its real env (:attr:`builds_sim_tasks`, :meth:`build_sim_task`) lets :mod:`textwm.envs.sim_cache` complete
  rows that lack one (the paper's ScienceWorld rows), once, cached;
* **agent side** — :meth:`parse_action`, the format hint after an unparseable reply, the streak limit;
* **simulator** — :meth:`start_episode` / :meth:`episode_from_dict`: a :class:`SimEpisode` with the
  env's local responder, WM prompt and trajectory-only outcome (goals, loops, streaks);
* **reward and success** — :meth:`reward` of an :class:`Outcome` (GRPO), :meth:`is_success` of a score;
* **real env** — :meth:`open_session` (an :class:`~textwm.envs.protocol.EnvSession` in a worker
  process), its config class, reset options, :meth:`check_task_id`, :meth:`end_reason`; the env variable
  that switches GRPO's reward to a replay in the real env server (:attr:`replay_url_env`);
* **guard switch** — :attr:`guard_env` (``SCIWORLD_WM_GUARD=0``: every step to the world model);
* **dataset builder** — :meth:`dataset_builder` (optional), the env's hooks for :mod:`textwm.envs.build`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from textwm.data.jsonl import DataError
from textwm.data.schema import parse_messages
from textwm.envs.protocol import EnvError, EnvSession, PaperForm, ResetResult


@dataclass(frozen=True)
class WMQuery:
    """What the world model is asked for one action (the WM proxy's payload fields)."""

    system_prompt: str
    state: str
    action: str


@dataclass(frozen=True)
class Outcome:
    """An episode's state as the env's rules read it: over or not, why, and the score so far."""

    done: bool
    #: Why it ended ("success", "wrong_focus", "repeat", ...), None while it goes on.
    reason: str | None
    score: float
    #: The GRPO reward where the env shapes it apart from the score (ALFWorld's penalties); None: the score.
    reward: float | None = None

    def to_dict(self) -> dict[str, Any]:
        d = {"done": self.done, "reason": self.reason, "score": self.score}
        if self.reward is not None:
            d["reward"] = self.reward
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Outcome:
        reward = d.get("reward")
        return cls(bool(d["done"]), d.get("reason"), float(d["score"]), None if reward is None else float(reward))


class SimEpisode(Protocol):
    """Per-episode state of one env in the simulator: plain data that can travel with a request."""

    def local_answer(self, action: str) -> str | None:
        """The observation tracked state determines (the local responder), or None (ask the WM)."""
        ...

    def wm_query(self, action: str) -> WMQuery: ...

    # Envs with an :attr:`EnvSpec.anchors_env` also give ``known_frame(action) -> list | None``: the part of the
    # observation their state decides when :meth:`local_answer` cannot answer it whole, as a ``response_template``
    # (fixed strings and ``{"fill": N}`` slots, :mod:`textwm.generation.anchors`) for the world model to fill.

    def agent_message(self, observation: str) -> str:
        """The agent's next user message after ``observation`` was recorded (the observation, or more)."""
        ...

    def fallback_observation(self, action: str) -> str:
        """The observation that stands in for a failed world-model answer when the simulator's policy is
        ``fallback`` (the paper's substitute: ALFWorld "Nothing happens.", ...)."""
        ...

    def observe(self, action: str, observation: str, source: str) -> None:
        """Record one answered step (source: ``local``, ``wm`` or ``fallback``)."""
        ...

    def unparseable(self) -> None:
        """The agent's reply held no action (the env's streak rule may end the episode)."""
        ...

    def outcome(self) -> Outcome:
        """Score and termination from the trajectory alone."""
        ...

    def to_dict(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class TaskStart:
    """A dataset row read once: what an episode needs, in the real env and in the simulator."""

    task_id: str
    #: Task family, the unit of per-task summaries (ScienceWorld: ``boil`` for ``boil_v11``).
    family: str
    #: The conversation the agent starts from (system prompt, first user message); empty when the row has none.
    messages: tuple[Mapping[str, str], ...]
    #: The row's own turn limit (None: the caller's).
    max_turns: int | None = None
    #: The simulator's start state (the env's plain data), None when the row has none (the paper's rows).
    sim_task: Any = None
    #: Options of the real env's reset (ScienceWorld: ``{"simplification": "easy"}``).
    reset_options: Mapping[str, Any] = field(default_factory=dict)


class EnvSpec:
    """Base of every env's spec: override the attributes and the hooks marked below.

    A spec instance is pickled into env worker processes, so it keeps no open resources.
    """

    #: Registry name, the prefix of the ms-swift names (``<name>_scheduler``, ``<name>_reward``).
    name: ClassVar[str] = ""
    #: Human name for reports ("ScienceWorld").
    title: ClassVar[str] = ""
    #: ms-swift class names ``<class_prefix>Scheduler`` / ``<class_prefix>Reward`` (logged as rewards/<...>/mean).
    class_prefix: ClassVar[str] = ""
    #: The paper's switch: ``<GUARD>=0`` sends every simulated step to the world model.
    guard_env: ClassVar[str] = ""
    #: ``<ANCHORS>=1`` sends the known part of an observation as a template (its episodes' ``known_frame``); empty:
    #: the env has no such frames.
    anchors_env: ClassVar[str] = ""
    #: Consecutive unparseable agent replies that end an episode.
    unparseable_limit: ClassVar[int] = 3
    #: Told to the agent after a reply without an action (never something that passes for an observation).
    invalid_reply_hint: ClassVar[str] = "Your reply contained no action. Reply with exactly one action."
    #: The agent's system prompt for rows whose messages lack one.
    agent_system_prompt: ClassVar[str] = ""
    #: Turn limit of rows that name none.
    default_max_turns: ClassVar[int] = 50
    #: A score at or above this is a success.
    success_score: ClassVar[float] = 1.0
    #: Options a real-env reset accepts (strings), e.g. ("simplification",).
    reset_options: ClassVar[tuple[str, ...]] = ()
    #: Config dataclass of a real env session (its fields become env-server flags); None: no options.
    session_config: ClassVar[type | None] = None
    #: The paper repository's wire form of this env's server, answered beside ours; None: ours only.
    paper_form: ClassVar[PaperForm | None] = None
    #: The env's expert reads only the conversation (:meth:`expert_reply_to`), so it plays in the world model too.
    conversation_expert: ClassVar[bool] = False
    #: :meth:`build_sim_task` can bake a row's missing simulator start state from the real env.
    builds_sim_tasks: ClassVar[bool] = False
    #: Env variable naming an env server (:mod:`textwm.envs.server`) whose replay of each GRPO episode's actions
    #: gives its reward (ScienceWorld: ``SCIWORLD_ENV_URL``, the paper's name); empty: no replay reward.
    replay_url_env: ClassVar[str] = ""
    #: :meth:`paper_reward` is defined (``reward: paper`` may be chosen).
    has_paper_reward: ClassVar[bool] = False

    # --- anchored steps --------------------------------------------------------------------------------

    def observed_frame(self, observation: str) -> list[tuple[bool, str]] | None:
        """The frame this env's episodes' ``known_frame`` sends for an observation of this shape, read off the
        observation itself: ``(is_slot, text)`` parts in order, fixed text and the text a slot stands for; None
        where none of the env's frames fits (or the env has none). It measures offline how a world model fills
        those frames (``scripts/anchor_experiment.py --placements structured``)."""
        return None

    # --- rows ----------------------------------------------------------------------------------------

    def load_row(self, row: Mapping[str, Any], *, need_sim: bool = False) -> TaskStart:
        """The :class:`TaskStart` of an RL task row; DataError naming the field when the row is unusable.

        ``need_sim``: the row must carry a simulator start state (:meth:`sim_task_of` not None); a row that lacks
        one is refused here, so loaders complete such rows first (:class:`textwm.envs.sim_cache.SimTaskCache`).
        """
        if not isinstance(row, Mapping):
            raise DataError(f"an RL task row must be a JSON object, got {type(row).__name__}")
        task_id = self.task_id_of(row)
        try:
            self.check_task_id(task_id)
        except EnvError as exc:
            raise DataError(str(exc), field="task_id") from None
        # ms-swift hands the scheduler a row's extra columns only, without its messages: they are optional here.
        raw = row.get("messages")
        messages = [{"role": m["role"], "content": m["content"]} for m in parse_messages(raw)] if raw else []
        if messages and messages[0]["role"] != "system":
            messages.insert(0, {"role": "system", "content": self.agent_system_prompt})
        sim_task = self.sim_task_of(row)
        if need_sim:
            if sim_task is None:
                raise DataError(self.missing_sim_task(task_id), field="sim_task")
            self.check_sim_task(sim_task)
        turns = row.get("max_turns")
        if isinstance(turns, str) and turns.strip().isdigit():  # the paper's AppWorld rows write "8"
            turns = int(turns)
        return TaskStart(task_id=task_id, family=self.family_of(task_id), messages=tuple(messages),
                         max_turns=int(turns) if isinstance(turns, (int, float)) and turns > 0 else None,
                         sim_task=sim_task, reset_options=self.reset_options_of(sim_task))

    def task_id_of(self, row: Mapping[str, Any]) -> str:
        """Hook: a row's task id (default: its ``task_id``); DataError naming the field when it has none."""
        task_id = row.get("task_id")
        if not isinstance(task_id, str) or not task_id:
            raise DataError(f"row has no string 'task_id' (e.g. {self.example_task_id()!r})", field="task_id")
        return task_id

    def sim_task_of(self, row: Mapping[str, Any]) -> Any:
        """Hook: the simulator's start state in a row (None if absent); DataError naming the field if malformed."""
        return None

    def check_sim_task(self, sim_task: Any) -> None:
        """Hook: DataError (naming the field) when a start state cannot drive a simulated episode."""

    def missing_sim_task(self, task_id: str) -> str:
        """Hook: the message for a row that has no simulator start state (say how to rebuild it)."""
        return f"row {task_id!r} has no 'sim_task': the simulator needs the start state and goals"

    def reset_options_of(self, sim_task: Any) -> dict[str, Any]:
        """Hook: real-env reset options implied by a row's start state (default: none, the server's)."""
        return {}

    def build_options_of(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """Hook: the real-env reset options a row's missing start state is built with (default: none). They are
        part of the start state's cache key, so they must be plain strings and numbers."""
        return {}

    def build_sim_task(self, session: EnvSession, task_id: str, reset_options: Mapping[str, Any]) -> Any:
        """Hook (with :attr:`builds_sim_tasks`): the simulator start state of ``task_id`` baked in ``session`` (one
        of :meth:`open_session`, reused across tasks), as plain JSON data that :meth:`sim_task_of` reads back
        from a row's ``sim_task``. Raise :class:`~textwm.envs.protocol.EnvError` when the env cannot."""
        raise NotImplementedError(f"env {self.name!r} cannot build simulator start states from its real env")

    def sim_task_version(self) -> str:
        """Hook: what a baked start state depends on (env package version, bake code version); a cached start
        state built under another version is rebuilt (default: none)."""
        return ""

    def check_task_id(self, task_id: str) -> None:
        """Hook: cheap syntax check of a task id; raise :class:`~textwm.envs.protocol.BadRequest`."""

    def validate_task(self, task_id: str, config: Any = None) -> None:
        """Hook: the full check of a task id, run in an env worker before a session is opened for it (so a bad
        id costs no env start); ``config``: the worker's session config. Default: :meth:`check_task_id`."""
        self.check_task_id(task_id)

    def family_of(self, task_id: str) -> str:
        """Hook: the task family of a task id (default: the id itself)."""
        return task_id

    def example_task_id(self) -> str:
        return "task_0"

    # --- agent side --------------------------------------------------------------------------------

    def parse_action(self, reply: str) -> str | None:
        """Hook: the action in an agent's reply, None when there is none to execute."""
        raise NotImplementedError

    def agent_message(self, observation: str, info: Mapping[str, Any]) -> str:
        """Hook: the agent's next user message after a real-env step (default: the observation; ALFWorld adds
        the admissible commands from ``info``)."""
        return observation

    def expert_reply_to(self, conversation: Sequence[Mapping[str, str]]) -> str | None:
        """Hook: the reply of an expert that reads only the conversation so far (so it plays in the world model as
        in the real env); None: the env has none, or it has no move here (default: none)."""
        return None

    def expert_reply(self, info: Mapping[str, Any]) -> str | None:
        """Hook: the reply of the env's own expert given the latest reset / step info (None: the env has no expert,
        or it has no action now)."""
        return None

    # --- simulator ------------------------------------------------------------------------------------

    def start_episode(self, start: TaskStart) -> SimEpisode:
        """Hook: a fresh simulated episode from a row's start (``start.sim_task`` is not None)."""
        raise NotImplementedError

    def episode_from_dict(self, data: Mapping[str, Any]) -> SimEpisode:
        """Hook: the inverse of ``SimEpisode.to_dict``."""
        raise NotImplementedError

    # --- reward and success ---------------------------------------------------------------------------

    def reward(self, outcome: Outcome) -> float:
        """Hook: the GRPO reward of an episode's outcome (default: its shaped reward if any, else the score)."""
        return float(outcome.score if outcome.reward is None else outcome.reward)

    def reward_cases(self) -> list[tuple[str, Outcome, dict[str, Any], str]]:
        """Hook: built episodes, one per kind of outcome (success, partial, nothing, failure, loop, unparseable):
        ``(name, outcome, episode, why its reward leads to the task)``, ``episode`` as :meth:`paper_reward`
        takes it; for ``python -m textwm.rl.rewards``."""
        raise NotImplementedError(f"{self.name}: no reward cases written for this env yet")

    def paper_reward(self, outcome: Outcome, episode: Mapping[str, Any]) -> float:
        """Hook: the paper's GRPO reward of an episode (``reward: paper``), where the env defines one
        (:attr:`has_paper_reward`). ``episode``: the rollout's infos (``actions``, None for an unparseable
        reply; ``observations``; ``last_reply``, the agent's last reply as written; ``reward_context``, what
        :meth:`reward_context` gave)."""
        raise NotImplementedError(f"{self.name}: the paper's reward rule is not written for this env; use ours")

    def reward_context(self, episode: Any) -> dict[str, Any]:
        """Hook: what :meth:`paper_reward` needs of the task beyond the trajectory (plain JSON data, carried in the
        rollout's infos as ``reward_context``; AppWorld: the instruction and the accounts). Default: nothing."""
        return {}

    def probe_world_model(self, rows: Sequence[Mapping[str, Any]], wm: Any, out: Any, *,
                          workers: int = 1) -> dict[str, Any] | None:
        """Hook: probes of the world model behind ``wm`` (a :class:`~textwm.clients.wm.WMClient`) on the facts this
        env's tasks in ``rows`` turn on, each against the real env (``workers`` real envs at once); the rates, with
        per-row records written under ``out``. None: the env has no probes for these rows."""
        return None

    def is_success(self, score: float) -> bool:
        return score >= self.success_score

    # --- real env -------------------------------------------------------------------------------------

    def open_session(self, config: Any = None) -> EnvSession:
        """Hook: a new real env session (in a worker process); ``config``: a :attr:`session_config` instance."""
        raise NotImplementedError

    def prepare_worker(self) -> dict[str, Any]:
        """Hook: one-time work in a new worker process before it reports ready (e.g. a task catalog)."""
        return {}

    def prepare_real(self, rows_path: str, starts: list[TaskStart], work_dir: Any, config: Any = None) -> Any:
        """Hook: the session config the real env needs to play ``starts`` (read from ``rows_path``), given the
        user's ``config`` (None: the default); ``work_dir`` may hold what it prepares (ALFWorld: the games it
        rebuilt from rows). Default: ``config`` unchanged."""
        return config

    def reset_record(self, reset: ResetResult) -> dict[str, Any]:
        """Hook: fields of a real reset kept in the episode's record (ALFWorld: ``init_admissible``)."""
        return {}

    def end_reason(self, score: float) -> str:
        """Hook: why the real env ended an episode with ``score`` (default: success or env_done)."""
        return "success" if self.is_success(score) else "env_done"

    def end_outcome(self, score: float, previous_score: float) -> Outcome:
        """Hook: the outcome of an episode the real env ended at ``score``, its score before the last step being
        ``previous_score`` (default: the end reason and the score; ScienceWorld keeps the progress made before a
        wrong focus for the reward)."""
        return Outcome(True, self.end_reason(score), score)

    def real_start(self, start: TaskStart, reset: ResetResult) -> tuple[list[dict[str, str]], bool]:
        """Hook: the agent's start conversation for a real-env reset, and whether it was rebuilt from it
        (an env whose reset text can differ from the row's baked start replaces the first user message)."""
        return [dict(m) for m in start.messages], False

    # --- dataset builder ----------------------------------------------------------------------------

    def dataset_builder(self) -> Any:
        """Hook: the env's :class:`~textwm.envs.build.DatasetBuilder` (None: this env has no builder)."""
        return None

    def __repr__(self) -> str:
        return f"<env {self.name}>"
