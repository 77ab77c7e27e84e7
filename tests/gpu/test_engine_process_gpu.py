"""The engine process on CUDA: a spawned child that loads the checkpoint, warms up (graph captures included) and
answers what the worker thread answers on the same device (run with `pytest -m gpu`)."""

import pytest
import torch
from fastapi.testclient import TestClient

from textwm.generation.settings import DecodeSettings
from textwm.models.checkpoint import load_model, load_tokenizer
from textwm.serving.app import create_app
from textwm.serving.engine import Engine, EngineConfig, ModelSource

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

PROMPTS = ["State: You are in the kitchen.\n\nAction: open door", "State: A hallway.\n\nAction: go north",
           "State: You see a table 1.\n\nAction: take apple 1 from table 1"]


@pytest.mark.parametrize("family", ["sdar", "ar"])
def test_an_engine_process_on_cuda_answers_as_the_worker_thread(family, tiny_sdar_dir, tiny_ar_dir):
    path = {"sdar": tiny_sdar_dir, "ar": tiny_ar_dir}[family]
    config = EngineConfig(served_model_name="tiny-wm", defaults=DecodeSettings(gen_length=24, temperature=0),
                          max_model_len=512, max_batch_size=8)
    thread = Engine(load_model(path, device="cuda", dtype="float32"), config)
    process = Engine(load_tokenizer(path), EngineConfig(**{**config.__dict__, "engine_process": True}),
                     source=ModelSource(str(path), device="cuda", dtype="float32"))
    texts = []
    for engine in (thread, process):
        with TestClient(create_app(engine)) as client:
            answers = [client.post("/v1/chat/completions", json={
                "messages": [{"role": "user", "content": p}], "max_tokens": 24, "n": 2}) for p in PROMPTS]
            assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
            texts.append([c["message"]["content"] for a in answers for c in a.json()["choices"]])
            graphs = next(x for x in client.get("/metrics").text.splitlines() if x.startswith("textwm_cuda_graphs{"))
            assert float(graphs.rsplit(" ", 1)[1]) > 0   # the child warmed up: its graphs are counted here
    assert texts[1] == texts[0]
