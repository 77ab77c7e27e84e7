"""The env tests' toy environment, registered for this test session (``textwm.envs.env_names()`` lists it then)."""

from tests.envs.toy.spec import ToySpec
from textwm.envs.registry import register

register(ToySpec(), replace=True)
