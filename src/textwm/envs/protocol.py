"""What every real env session, env server and client speaks: reset / step results and the error vocabulary.

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
