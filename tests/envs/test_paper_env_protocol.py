"""The paper's env-server wire form against our real env server on a loopback port.

The clients below are written here from the paper's protocol (``sciworld/sciworld_env_server.py``,
``alfworld/alfworld_env_server.py`` of patronus-ai/mdlm_world_modeling and the plugins and eval scripts that
call them): ``requests`` calls with the bodies those clients send, sessions named by their own ``task_id``
key. ALFWorld (a game built in code, ~2 s to start) is in the fast tier; ScienceWorld (a JVM per session) is
slow. Where the paper's servers answered 200 ``{"error"}``, ours answer a non-2xx JSON error: asserted below.
"""

from __future__ import annotations

import shutil
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

uvicorn = pytest.importorskip("uvicorn")

from tests.loopback import serving as _serving  # noqa: E402
from textwm.envs import get_env  # noqa: E402
from textwm.envs.pool import PoolConfig  # noqa: E402
from textwm.envs.server import create_env_app  # noqa: E402


def serving(app):
    """The env app on a loopback port: its worker pool starts real envs (a JVM: up to minutes)."""
    return _serving(app, start_timeout=180)




def error_of(r) -> str:
    return r.json()["error"]["message"]


# --- the paper's clients, written from its protocol ------------------------------------------------


def sciworld_post(url: str, key: str, action: str | None = None):
    """``sciworld_plugin.call_real_env`` / ``eval_sciworld.call_env``: POST the base URL."""
    body = {"task_id": key} if action is None else {"task_id": key, "action": action}
    return requests.post(url, json=body, timeout=60)


def sciworld_close(url: str, key: str):
    return requests.delete(url, json={"task_id": key}, timeout=10)


def alfworld_reset(url: str, key: str, game_file: str, split: str = "eval_in_distribution"):
    """``alfworld/eval*.py``'s ``env_reset``."""
    return requests.post(f"{url}/reset", json={"task_id": key, "game_file": game_file, "split": split}, timeout=120)


def alfworld_step(url: str, key: str, action: str):
    return requests.post(f"{url}/step", json={"task_id": key, "action": action}, timeout=60)


def alfworld_close(url: str, key: str):
    return requests.delete(f"{url}/close", json={"task_id": key}, timeout=10)


# --- ALFWorld: /reset, /step, /close --------------------------------------------------------------------

HEAT = "pick_heat_then_place_in_recep"
#: What the handcoded expert plays on the heat game of ``make_scene`` (info.expert_action, step by step).
EXPERT_HEAT = ["go to fridge 1", "open fridge 1", "take apple 1 from fridge 1", "go to microwave 1",
               "heat apple 1 with microwave 1", "go to cabinet 1", "open cabinet 1", "move apple 1 to cabinet 1"]


@pytest.fixture(scope="module")
def alf(tmp_path_factory):
    pytest.importorskip("alfworld", reason="ALFWorld is in the [envs] extra")
    from tests.envs.alfworld.conftest import make_scene
    from textwm.envs.alfworld.env import AlfWorldSessionConfig
    from textwm.envs.alfworld.games import write_game

    root = tmp_path_factory.mktemp("alfworld_games")
    game_file = write_game(make_scene(HEAT), root / "train" / HEAT / "trial_0")
    app = create_env_app(get_env("alfworld"), PoolConfig(workers=1, max_sessions_per_worker=3),
                         AlfWorldSessionConfig(games_dir=[str(root)]), host="127.0.0.1")
    with serving(app) as url:
        yield {"url": url, "game_file": str(game_file), "task_id": f"train/{HEAT}/trial_0", "app": app}


@pytest.fixture
def alf_url(alf):
    yield alf["url"]
    pool = alf["app"].state.pool
    for sid in pool.session_ids():  # a failed test must not fill the next one's capacity
        requests.delete(f"{alf['url']}/session/{sid}", timeout=10)


def test_alfworld_paper_episode_to_a_win(alf, alf_url):
    """An eval-script episode by key: reset, the handcoded expert's actions on this game, won, closed."""
    key = f"eval-{uuid.uuid4().hex[:8]}"
    r = alfworld_reset(alf_url, key, alf["game_file"])
    assert r.status_code == 200, r.text
    reset = r.json()
    assert set(reset) == {"obs", "admissible", "goal", "gamefile"}             # no internal session id
    assert reset["obs"].startswith("-= Welcome to TextWorld, ALFRED! =-")
    assert reset["goal"] == "heat some apple and put it in cabinet."          # the paper's cut: period kept
    assert reset["gamefile"] == alf["game_file"]
    admissible = reset["admissible"]
    for action in EXPERT_HEAT:
        assert action in admissible
        r = alfworld_step(alf_url, key, action)
        assert r.status_code == 200, r.text
        step = r.json()
        assert set(step) == {"obs", "admissible", "won", "done", "score"}
        admissible = step["admissible"]
        if step["won"] or step["done"]:
            break
    assert (step["won"], step["done"], step["score"], action) == (True, True, 1.0, EXPERT_HEAT[-1])

    r = alfworld_step(alf_url, key, "look")                                 # paper: 200 and play on; ours: 409
    assert r.status_code == 409 and r.json()["error"]["type"] == "episode_over"
    r = alfworld_close(alf_url, key)
    assert r.status_code == 200 and r.json() == {"status": "closed"}
    assert alfworld_close(alf_url, key).json() == {"status": "closed"}      # closing again is fine, as in the paper
    r = alfworld_step(alf_url, key, "look")                                 # paper: 200 {"error": "no env ..."}
    assert r.status_code == 404 and f"no session for task_id {key!r}" in error_of(r)
    assert requests.get(f"{alf_url}/health", timeout=10).json()["sessions"] == 0


def test_alfworld_reset_of_a_key_again_replays_in_its_session(alf, alf_url):
    key = f"par-{uuid.uuid4().hex[:10]}"
    keyed = alf["app"].state.keyed_sessions
    first = alfworld_reset(alf_url, key, alf["game_file"]).json()
    first_session = keyed.session_of(table_key(key))
    moved = alfworld_step(alf_url, key, "go to countertop 1").json()
    assert moved["obs"].startswith("You arrive at countertop 1.")
    again = alfworld_reset(alf_url, key, alf["game_file"], split="train").json()
    assert keyed.session_of(table_key(key)) == first_session and again["obs"] == first["obs"]   # the env reused
    assert alfworld_step(alf_url, key, "go to countertop 1").json()["obs"] == moved["obs"]

    # A session closed by its id (or expired, or lost) leaves the key: its next step is a 404 that names the key,
    # and its next reset opens a new session; the table forgets keys whose sessions ended.
    assert requests.delete(f"{alf_url}/session/{first_session}", timeout=10).status_code == 200
    r = alfworld_step(alf_url, key, "look")
    assert r.status_code == 404 and f"task_id {key!r}" in error_of(r) and "closed" in error_of(r)
    alfworld_reset(alf_url, key, alf["game_file"])
    assert len(keyed) == 1 and keyed.session_of(table_key(key)) not in (None, first_session)
    alfworld_close(alf_url, key)


def table_key(task_id: str) -> str:
    """The server's key of a paper-form task id sent from loopback without an API key (textwm.envs.server.owner_key)."""
    return f"addr:127.0.0.1\x00{task_id}"


def test_alfworld_a_task_id_is_its_owners_alone(alf, alf_url):
    """Another client (another API key, or another address) that sends the same task id reaches no session of
    the first: it cannot step or close it by guessing the key."""
    key = f"mine-{uuid.uuid4().hex[:6]}"
    assert alfworld_reset(alf_url, key, alf["game_file"]).status_code == 200
    other = {"Authorization": "Bearer someone-else"}
    r = requests.post(f"{alf_url}/step", json={"task_id": key, "action": "look"}, headers=other, timeout=30)
    assert r.status_code == 404 and f"no session for task_id {key!r}" in error_of(r)
    assert requests.delete(f"{alf_url}/close", json={"task_id": key}, headers=other, timeout=30).status_code == 200
    assert alfworld_step(alf_url, key, "look").status_code == 200            # still the owner's, still open
    alfworld_close(alf_url, key)


def test_alfworld_concurrent_resets_of_one_key_share_one_session(alf, alf_url):
    key = f"par-{uuid.uuid4().hex[:10]}"
    with ThreadPoolExecutor(3) as ex:
        replies = list(ex.map(lambda _: alfworld_reset(alf_url, key, alf["game_file"]), range(3)))
    assert [r.status_code for r in replies] == [200] * 3
    assert requests.get(f"{alf_url}/health", timeout=10).json()["sessions"] == 1          # one session for the key
    alfworld_close(alf_url, key)


def test_alfworld_paper_errors_are_non_2xx_json(alf, alf_url):
    """Each of these was a 200 ``{"error": ...}`` (or a traceback) from the paper's server."""
    url = alf_url
    r = requests.post(f"{url}/reset", json={"task_id": "k", "split": "train"}, timeout=30)   # paper: a random game
    assert r.status_code == 400 and "game_file is required" in error_of(r)
    r = alfworld_reset(url, "k", alf["game_file"].replace(HEAT, "pick_and_place_simple"))
    assert r.status_code == 400 and "no game 'train/pick_and_place_simple/trial_0'" in error_of(r)
    r = requests.post(f"{url}/reset", json={"task_id": "k", "game_file": alf["game_file"], "seed": 1}, timeout=30)
    assert r.status_code == 422 and "seed: Extra inputs" in error_of(r)
    r = requests.post(f"{url}/step", json={"task_id": "", "action": "look"}, timeout=30)
    assert r.status_code == 422 and "task_id" in error_of(r)
    r = requests.delete(f"{url}/close", json={}, timeout=30)
    assert r.status_code == 422 and "task_id: Field required" in error_of(r)
    assert requests.get(f"{url}/health", timeout=10).json()["sessions"] == 0

    # Our own bodies on the shared paths are still ours.
    r = requests.post(f"{url}/reset", json={"task_id": alf["task_id"]}, timeout=60)
    assert r.status_code == 200 and {"session_id", "observation", "task_description", "info"} <= set(r.json())
    r = requests.post(f"{url}/step", json={"session_id": r.json()["session_id"], "action": "look"}, timeout=60)
    assert r.status_code == 200 and {"observation", "score", "reward", "done", "info"} <= set(r.json())


# --- ScienceWorld: POST / and DELETE / -----------------------------------------------------------------


@pytest.fixture(scope="module")
def sci():
    pytest.importorskip("scienceworld", reason="ScienceWorld is in the [envs] extra")
    if shutil.which("java") is None:
        pytest.skip("ScienceWorld needs a Java runtime (java on PATH)")
    app = create_env_app(get_env("sciworld"), PoolConfig(workers=1, max_sessions_per_worker=3), host="127.0.0.1")
    with serving(app) as url:
        yield {"url": url, "app": app}


@pytest.mark.slow
def test_sciworld_paper_reward_replay_and_eval_loop(sci):
    """The GRPO reward's replay (a fresh ``_gen<hex>`` key per completion) and the eval script's episode."""
    url = sci["url"]
    key = f"boil_v0_gen{uuid.uuid4().hex[:6]}"                              # hex: not our task-id syntax
    assert sciworld_close(url, key).json() == {"status": "closed"}          # eval closes before it starts
    r = sciworld_post(url, key, "look around")                              # opens boil_v0, then steps
    assert r.status_code == 200, r.text
    first = r.json()
    assert set(first) == {"observation", "score", "reward", "done"}
    session = sci["app"].state.keyed_sessions.session_of(table_key(key))
    assert "called the hallway" in first["observation"] and (first["score"], first["done"]) == (0, False)
    looked = sciworld_post(url, key).json()                                  # no action: "look around", no reset
    assert sci["app"].state.keyed_sessions.session_of(table_key(key)) == session
    assert looked["observation"] == first["observation"]
    end = sciworld_post(url, key, "focus on picture").json()                 # the wrong focus fails the task
    assert (end["done"], end["score"], end["reward"]) == (True, -100, -100)
    r = sciworld_post(url, key, "look around")                               # paper: 200 and the env goes on
    assert r.status_code == 409 and r.json()["error"]["type"] == "episode_over"

    assert sciworld_close(url, key).json() == {"status": "closed"}
    again = sciworld_post(url, key, "go to kitchen").json()                  # after DELETE: a fresh episode
    assert sci["app"].state.keyed_sessions.session_of(table_key(key)) not in (None, session)
    assert "kitchen" in again["observation"]
    assert again["score"] >= 0 and again["done"] is False
    sciworld_close(url, key)
    assert requests.get(f"{url}/health", timeout=10).json()["sessions"] == 0


@pytest.mark.slow
def test_sciworld_parallel_first_posts_of_one_key_open_one_session(sci):
    url, key = sci["url"], f"melt_v1_gen{uuid.uuid4().hex[:6]}"
    with ThreadPoolExecutor(2) as ex:
        replies = list(ex.map(lambda a: sciworld_post(url, key, a), ["look around", "inventory"]))
    assert [r.status_code for r in replies] == [200, 200]
    assert requests.get(f"{url}/health", timeout=10).json()["sessions"] == 1
    sciworld_close(url, key)


@pytest.mark.slow
@pytest.mark.parametrize(("body", "status", "needle"), [
    ({"task_id": "boyl_v0_gen1a2b3c", "action": "look around"}, 400, "known: boil"),  # paper: 200 "Server error"
    ({"task_id": "boil_gen1a2b3c"}, 400, "'<task>_v<variation>'"),
    ({"action": "look around"}, 422, "task_id: Field required"),                   # paper: 200 "need task_id"
    ({"task_id": "boil_v0", "action": 3}, 422, "action must be a string"),
])
def test_sciworld_paper_errors_are_non_2xx_json(sci, body, status, needle):
    r = requests.post(sci["url"], json=body, timeout=60)
    assert r.status_code == status and needle in error_of(r), r.text
    assert requests.get(f"{sci['url']}/health", timeout=10).json()["sessions"] == 0
