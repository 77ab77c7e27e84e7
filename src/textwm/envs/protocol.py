"""What every real env session, env server and client speaks: reset / step results and the error vocabulary.

The paper's env servers spoke another wire form per env (sessions named by the client's ``task_id``);
:class:`PaperForm` describes it, and the env server answers it too.

A real env is played through an :class:`EnvSession` (one task at a time, inside an env worker
process, or in-process). Its failures are :class:`EnvError` subclasses, each with the HTTP status and
error type the env server answers with, so the worker pool, the server and the client agree on one
list: 400 bad request, 404 unknown / closed / expired session, 409 episode over, 502 session lost
(the env behind it died), 503 no capacity, 500 anything else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass
class ResetResult:
    observation: str
    task_description: str
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class StepResult:
    observation: str
    #: Change of score caused by this step.
    reward: float
    #: Task score after this step (ScienceWorld: -100 or 0..100).
    score: float
    done: bool
    info: dict[str, Any] = field(default_factory=dict)


class EnvSession(Protocol):
    """One real env playing one task at a time (reset again for the next task)."""

    def reset(self, task_id: str, **options: Any) -> ResetResult:
        """Start ``task_id``; ``options`` are the env's reset options (ScienceWorld: ``simplification``).
        Raises :class:`BadRequest` for an unknown task or option, :class:`EnvFailed` if the env died."""
        ...

    def step(self, action: str) -> StepResult:
        """Apply one action. Raises :class:`EnvFailed` if the env died."""
        ...

    def valid_actions(self) -> list[str]:
        """The actions the env accepts now (:class:`BadRequest` if the env cannot list them)."""
        ...

    def close(self) -> None: ...


# --- errors ----------------------------------------------------------------------------------------


class EnvError(RuntimeError):
    """The environment failed (process died, session unknown or expired, bad task id)."""

    #: HTTP status and error type of the env server's answer.
    status = 500
    http_type = "server_error"
    #: Name of the error between a worker process and the pool.
    kind = "internal"


class BadRequest(EnvError):
    """Unknown task id, variation out of range, unknown reset option (400)."""

    status, http_type, kind = 400, "invalid_request_error", "bad_request"


class UnknownSession(EnvError):
    """No such session, or it was closed (404)."""

    status, http_type, kind = 404, "session_not_found", "unknown_session"


class SessionExpired(UnknownSession):
    """The session was idle for longer than the idle timeout and was closed (404)."""


class EpisodeOver(EnvError):
    """Step after the episode ended (409)."""

    status, http_type, kind = 409, "episode_over", "episode_over"


class NoCapacity(EnvError):
    """Every worker holds its maximum of sessions, or none is ready (503)."""

    status, http_type, kind = 503, "server_busy", "no_capacity"


class SessionLost(EnvError):
    """The session's worker process died or its env failed; the session is gone (502)."""

    status, http_type, kind = 502, "session_lost", "session_lost"


class EnvFailed(SessionLost):
    """Raised by a session whose env (a JVM, a subprocess) failed: the worker drops that session only."""

    kind = "env_failed"


class WorkerFailure(EnvError):
    """The worker raised an unexpected error while serving the request (500)."""


#: Worker-side error kinds -> the parent-side exception types.
ERROR_KINDS: dict[str, type[EnvError]] = {
    cls.kind: cls for cls in (BadRequest, UnknownSession, EpisodeOver, NoCapacity, SessionLost, EnvFailed)}
ERROR_KINDS["internal"] = WorkerFailure


# --- the paper's wire form ---------------------------------------------------------------------------


class PaperForm:
    """How the paper's env server of one env spoke (``<env>/<env>_env_server.py`` of
    patronus-ai/mdlm_world_modeling), so that its clients run unchanged against ours.

    Those servers name a session by a key the client picks and sends as ``task_id`` (``boil_v3_gen1a2b3c``,
    ``eval-1f2e3d4c``); the env server (:mod:`textwm.envs.server`) keeps a table from such keys to its own
    sessions and answers these routes beside its own. A subclass in the env's subpackage says where the routes
    are and maps the bodies and replies; the spec names it as ``paper_form``.

    One difference stays on purpose: the paper's servers answered every failure with status 200 and a body
    ``{"error": "..."}`` (a client then read an empty observation); ours answer the statuses and error body
    of the env server's own routes.
    """

    #: POST paths of a step body ``{"task_id": <key>, "action"?}``.
    step_paths: tuple[str, ...] = ()
    #: POST paths of a (re)start body ``{"task_id": <key>, <reset_fields>...}``.
    reset_paths: tuple[str, ...] = ()
    #: The reset body's fields besides ``task_id`` (optional strings). On a path the server's own routes share
    #: (``/reset``), a body with one of them is this form's.
    reset_fields: tuple[str, ...] = ()
    #: DELETE paths of ``{"task_id": <key>}`` (closing a key that has no session is not an error).
    close_paths: tuple[str, ...] = ()
    #: The action of a step body that names none.
    default_action: str = ""
    #: A step of a key that has no session opens one first (:meth:`start_of_key`) and then steps.
    open_on_step: bool = False

    def start_of_key(self, key: str) -> tuple[str, dict[str, Any]]:
        """Hook (with :attr:`open_on_step`): the task id and reset options of the session a step of ``key`` opens;
        BadRequest when the key names no task."""
        raise NotImplementedError

    def start_of_reset(self, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """Hook (with :attr:`reset_paths`): the task id and reset options of a reset body (its ``task_id`` and
        :attr:`reset_fields`); BadRequest when it names no task."""
        raise NotImplementedError

    def reset_reply(self, reply: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
        """The paper's answer to a reset, from the pool's reply (``observation``, ``task_description``, ``info``)."""
        raise NotImplementedError

    def step_reply(self, reply: dict[str, Any]) -> dict[str, Any]:
        """The paper's answer to a step, from the pool's reply (``observation``, ``score``, ``reward``, ``done``,
        ``info``)."""
        raise NotImplementedError
