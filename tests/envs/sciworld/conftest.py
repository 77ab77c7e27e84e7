import pytest


@pytest.fixture(scope="session")
def real_env():
    """One real ScienceWorld env (one JVM) shared by the session's tests."""
    from textwm.envs.sciworld.env import SciWorldEnv

    env = SciWorldEnv()
    yield env
    env.close()
