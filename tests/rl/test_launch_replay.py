"""The GRPO launcher's switches for the paper's rows: the replay URL and start-state cache reach swift's
environment; the prepass refuses a row it cannot complete by file and line, before swift starts (no env)."""

import json

import pytest

from textwm.config import ConfigError
from textwm.envs import get_env
from textwm.envs.sciworld.agent import rl_row
from textwm.envs.sciworld.tracker import Task
from textwm.rl import launch
from textwm.rl.launch import GRPOConfig
from textwm.rl.replay import replayer_from_env

ROOM = "This room is called the kitchen. In it, you see: \n\tthe agent\nYou also see:\n\tA door to the hallway (that is open)"
TASK = Task(task_id="boil_v0", task_description="Boil water.", initial_observation=ROOM, initial_inventory="",
            room_map={"kitchen": ROOM}, goals={"milestones": [["you focus on the water.", 100.0]]})


def test_replay_url_and_cache_reach_swift(tmp_path, monkeypatch):
    data = tmp_path / "rl.jsonl"
    data.write_text(json.dumps(rl_row(TASK)) + "\n")
    monkeypatch.delenv("SCIWORLD_ENV_URL", raising=False)
    config = GRPOConfig(env="sciworld", data=str(data), num_gpus=0, swift="swift")
    assert "SCIWORLD_ENV_URL" not in config.environ()                     # off by default
    monkeypatch.setenv("SCIWORLD_ENV_URL", "http://127.0.0.1:30003")      # the paper's switch
    assert config.environ()["SCIWORLD_ENV_URL"] == "http://127.0.0.1:30003"
    flagged = GRPOConfig(env="sciworld", data=str(data), num_gpus=0, swift="swift", env_url="http://h:1",
                         sim_cache=str(tmp_path / "c"))
    env = flagged.environ()
    assert (env["SCIWORLD_ENV_URL"], env["TEXTWM_SIM_CACHE"]) == ("http://h:1", str(tmp_path / "c"))
    with pytest.raises(ConfigError, match="--env-url env 'appworld' has no replay reward"):
        GRPOConfig(env="appworld", data=str(data), env_url="http://h:1")
    launch.prepare_rows(flagged)                       # rows with their start state: nothing to build
    assert not (tmp_path / "c").exists()
    spec = get_env("sciworld")
    assert replayer_from_env(spec, {}) is None
    assert replayer_from_env(spec, {"SCIWORLD_ENV_URL": "http://h:1", "TEXTWM_REPLAY_SESSIONS": "2"}).sessions == 2
    with pytest.raises(ValueError, match="TEXTWM_REPLAY_SESSIONS"):
        replayer_from_env(spec, {"SCIWORLD_ENV_URL": "http://h:1", "TEXTWM_REPLAY_SESSIONS": "0"})
    with pytest.raises(ValueError, match="SCIWORLD_ENV_URL='localhost:30003'"):
        replayer_from_env(spec, {"SCIWORLD_ENV_URL": "localhost:30003"})


def test_prepass_names_a_row_it_cannot_complete_before_swift(tmp_path, capsys):
    row = {k: v for k, v in rl_row(TASK).items() if k != "sim_task"}
    data = tmp_path / "rl.jsonl"
    data.write_text(json.dumps(row) + "\n" + json.dumps({**row, "task_id": "boil_v9999"}) + "\n")
    config = GRPOConfig(env="sciworld", data=str(data), num_gpus=0, swift="/nonexistent/swift",
                        sim_cache=str(tmp_path / "c"))
    assert launch.run(config) == 2   # swift (absent here) was never started
    assert "rl.jsonl:2: task_id: task 'boil_v9999' has no start state to build" in capsys.readouterr().err
