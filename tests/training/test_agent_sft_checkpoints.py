"""Agent SFT with ``save_every``: the agent kept every N steps as a runnable agent (the final agent's tokenizer
beside its weights, no optimizer state), for a run that picks the step GRPO starts from."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from tests.conftest import write_lines
from textwm.training.agent_sft import AgentSFT, sft_checkpoints, train_agent_on_demos

SYSTEM = "You are an agent. Each turn, output exactly one action."
ROOMS = ["kitchen", "hallway", "bedroom", "garden"]


def _demo(room: str) -> dict:
    return {"task_id": f"go-{room}_v0", "messages": [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"Task: go to the {room}.\n\nYou are in the hallway."},
        {"role": "assistant", "content": "look around"},
        {"role": "user", "content": f"You see a door to the {room}."},
        {"role": "assistant", "content": f"go to {room}"}]}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """4 steps of a tiny random agent on 4 two-turn demos, kept every 2 steps."""
    root = tmp_path_factory.mktemp("agent_sft")
    demos = write_lines(root / "sft_train.jsonl", [_demo(room) for room in ROOMS])
    tasks = write_lines(root / "rl_train.jsonl", [{"task_id": d["task_id"], "messages": d["messages"][:2]}
                                                  for d in map(_demo, ROOMS)])
    job = AgentSFT(demos=str(demos), tasks=str(tasks), out=str(root / "agent"), steps=4, vocab_size=300,
                   cutoff_len=256, batch_size=2, save_every=2)
    return job, train_agent_on_demos(job)


def test_the_kept_steps_are_listed_in_step_order_each_with_the_tokenizer_and_no_training_state(trained):
    job, figures = trained
    kept = sft_checkpoints(job.out)
    assert [step for step, _ in kept] == figures["checkpoints"] == [2, 4]
    assert [folder.name for _, folder in kept] == ["checkpoint-2", "checkpoint-4"]
    tokenizer_files = {p.name for p in job.final.iterdir() if p.name.startswith("tokenizer")}
    assert "tokenizer.json" in tokenizer_files
    for _, folder in kept:
        names = {p.name for p in folder.iterdir()}
        assert tokenizer_files <= names and "model.safetensors" in names
        assert not names & {"optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json"}


def test_a_kept_step_holds_no_training_args_either(trained):
    job, _ = trained
    assert not any((folder / "training_args.bin").exists() for _, folder in sft_checkpoints(job.out))


def test_a_kept_step_runs_as_an_agent_and_the_last_one_is_the_final_agent(trained):
    from textwm.eval.agents import LocalAgent

    job, _ = trained
    (_, early), (_, last) = sft_checkpoints(job.out)
    final_weights, last_weights = load_file(str(job.final / "model.safetensors")), load_file(
        str(last / "model.safetensors"))
    assert final_weights.keys() == last_weights.keys()
    assert all(torch.equal(final_weights[k], last_weights[k]) for k in final_weights)
    early_weights = load_file(str(early / "model.safetensors"))
    assert any(not torch.equal(final_weights[k], early_weights[k]) for k in final_weights)   # it trained on
    conversation = _demo("garden")["messages"][:2]
    replies = {}
    for name, path in (("final", job.final), ("last", last), ("early", early)):
        agent = LocalAgent(str(path), device="cpu", max_tokens=6, seed=0)     # greedy, as textwm.eval runs it
        (replies[name],) = agent.reply_batch([conversation])
        assert isinstance(replies[name], str), replies[name]
    assert replies["last"] == replies["final"]


def test_without_save_every_no_step_is_made_an_agent_and_a_negative_one_is_refused(tmp_path):
    demos = write_lines(tmp_path / "sft_train.jsonl", [_demo("kitchen")])
    with pytest.raises(ValueError, match="save_every >= 0, got 1 and -1"):
        train_agent_on_demos(AgentSFT(demos=str(demos), tasks=str(demos), out=str(tmp_path / "a"), steps=1,
                                      save_every=-1))
