"""Agents: an OpenAI-compatible endpoint (scripted, on loopback) and a tiny local checkpoint."""

import pytest

from tests.eval.helpers import ChatServer, free_port
from textwm.eval.agents import Agent, AgentError, LocalAgent, OpenAIAgent, reply

CONVERSATION = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "You see a door."}]


def test_endpoint_agent_batches_concurrently_and_keeps_failures_in_place():
    server = ChatServer(lambda messages: 400 if "fail" in messages[-1]["content"] else
                        f"open door ({messages[-1]['content']})")
    agent = OpenAIAgent(server.url, temperature=0.7, top_p=0.9, max_tokens=12)
    try:
        assert isinstance(agent, Agent) and agent.check() == "scripted"
        convs = [[*CONVERSATION[:1], {"role": "user", "content": text}] for text in ("a", "fail", "b")]
        out = agent.reply_batch(convs)
        assert out[0] == "open door (a)" and out[2] == "open door (b)"
        assert isinstance(out[1], AgentError) and "400" in str(out[1])
        assert reply(agent, CONVERSATION) == "open door (You see a door.)"
        body = next(b for m, p, b in server.requests if m == "POST")
        assert (body["model"], body["temperature"], body["top_p"], body["max_tokens"]) == ("scripted", 0.7, 0.9, 12)
        assert agent.describe()["model"] == "scripted"
    finally:
        agent.close()
        server.close()


def test_unreachable_endpoint_fails_fast():
    agent = OpenAIAgent(f"http://127.0.0.1:{free_port()}/v1")
    with pytest.raises(AgentError, match="not reachable"):
        agent.check()
    agent.close()


def test_local_agent_decodes_a_batch(tiny_ar_dir):
    agent = LocalAgent(str(tiny_ar_dir), device="cpu", max_tokens=6, batch_size=2, max_prompt_tokens=24)
    convs = [CONVERSATION, [CONVERSATION[0], {"role": "user", "content": "The door is now open. " * 8}],
             [CONVERSATION[0], {"role": "user", "content": "x"}]]
    out = agent.reply_batch(convs)
    assert len(out) == 3 and all(isinstance(t, str) for t in out)
    assert out == agent.reply_batch(convs)          # greedy: the batch composition does not change replies
    assert agent.truncated >= 2 and agent.describe()["family"] == "ar"
