"""EnvClient retry rules against scripted HTTP answers (no server, no JVM)."""

import socket

import httpx
import pytest

from textwm.clients.retry import RetryPolicy
from textwm.envs.client import EnvClient, EnvServerError
from textwm.envs.protocol import EnvError

FAST = RetryPolicy(max_retries=2, backoff_s=0.001, max_backoff_s=0.001)
RESET_OK = {"session_id": "s1", "observation": "You are in the hallway.", "task_description": "Boil water.",
            "info": {"worker": 0}}
STEP_OK = {"observation": "You move to the kitchen.", "score": 0, "reward": 0, "done": False, "info": {"moves": 1}}


def err(status, message, kind):
    return httpx.Response(status, json={"error": {"message": message, "type": kind, "code": status}})


def scripted(*answers):
    """A client whose server answers with ``answers`` in turn (an exception is raised as a transport error)."""
    seen = []

    def handler(request: httpx.Request):
        seen.append((request.method, request.url.path))
        answer = answers[min(len(seen), len(answers)) - 1]
        if isinstance(answer, Exception):
            raise answer
        return answer

    http = httpx.Client(transport=httpx.MockTransport(handler))
    return EnvClient("http://env", retry=FAST, http=http), seen


def test_reset_retries_5xx_and_connection_errors_then_succeeds():
    env, seen = scripted(err(503, "full", "server_busy"), httpx.ReadError("reset by peer"),
                         httpx.Response(200, json={**RESET_OK, "valid_actions": ["look around"]}))
    result = env.reset("boil_v0", with_valid_actions=True)
    assert result.observation == "You are in the hallway." and result.info["valid_actions"] == ["look around"]
    assert env.session_id == "s1" and len(seen) == 3


@pytest.mark.parametrize(("answer", "status"), [(err(400, "unknown ScienceWorld task 'x'", "invalid_request_error"), 400),
                                                (err(422, "task_id: Field required", "invalid_request_error"), 422)])
def test_4xx_is_never_retried(answer, status):
    env, seen = scripted(answer)
    with pytest.raises(EnvServerError) as info:
        env.reset("x_v0")
    assert info.value.status == status and len(seen) == 1 and isinstance(info.value, EnvError)
    assert str(info.value).startswith(f"HTTP {status}: ")


def test_step_is_not_replayed_when_it_may_have_run():
    env, seen = scripted(httpx.Response(200, json=RESET_OK), httpx.ReadTimeout("slow"))
    env.reset("boil_v0")
    with pytest.raises(EnvServerError, match="ReadTimeout"):
        env.step("go to kitchen")
    assert len(seen) == 2                                    # one reset, one step: no second attempt

    env, seen = scripted(httpx.Response(200, json=RESET_OK), err(500, "worker bug", "server_error"))
    env.reset("boil_v0")
    with pytest.raises(EnvServerError, match="worker bug"):
        env.step("go to kitchen")
    assert len(seen) == 2


def test_step_retries_what_never_reached_the_env():
    env, seen = scripted(httpx.Response(200, json=RESET_OK), httpx.ConnectError("refused"),
                         err(503, "busy", "server_busy"), httpx.Response(200, json=STEP_OK))
    env.reset("boil_v0")
    result = env.step("go to kitchen")
    assert (result.observation, result.done, result.info["moves"]) == ("You move to the kitchen.", False, 1)
    assert len(seen) == 4


def test_session_lost_is_final_and_the_next_reset_opens_a_new_session():
    lost = err(502, "session s1 (boil_v0) was lost: worker 0 (pid 1) died (killed by SIGKILL)", "session_lost")
    env, seen = scripted(httpx.Response(200, json=RESET_OK), lost, lost,
                         httpx.Response(200, json={**RESET_OK, "session_id": "s2"}))
    env.reset("boil_v0")
    with pytest.raises(EnvServerError, match="killed by SIGKILL") as info:
        env.step("look around")
    assert info.value.kind == "session_lost" and info.value.attempts == 1
    env.reset("boil_v0")                                     # tries the old session, then opens a new one
    assert env.session_id == "s2" and len(seen) == 4


def test_unreachable_server_fails_after_retries():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]                            # nothing listens here once the socket closes
    env = EnvClient(f"http://127.0.0.1:{port}", retry=FAST, timeout_s=2)
    with pytest.raises(EnvServerError, match="unreachable.*after 3 attempts") as info:
        env.reset("boil_v0")
    assert info.value.status is None
    with pytest.raises(EnvError, match="reset"):
        env.step("look around")
    env.close()
