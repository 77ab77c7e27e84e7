"""An ASGI app served for real on a free loopback port, for tests that talk to it over HTTP."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

import uvicorn


@contextlib.contextmanager
def serving(app, *, start_timeout: float = 60.0):
    """``app`` served by uvicorn in a thread (its lifespan runs: engines, worker pools); yields its base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(60)
        sock.close()


@contextlib.contextmanager
def native_stack(model_dir, *, max_model_len: int = 512, gen_length: int = 16):
    """A tiny checkpoint on the native server behind the WM proxy, both on loopback; yields (server URL, proxy URL,
    the loaded model)."""
    from textwm.generation.settings import DecodeSettings
    from textwm.models.checkpoint import load_model
    from textwm.serving.app import create_app
    from textwm.serving.engine import Engine, EngineConfig
    from textwm.serving.proxy import ProxyConfig, create_proxy_app

    loaded = load_model(model_dir, device="cpu", dtype="float32")
    engine = Engine(loaded, EngineConfig(served_model_name="tiny-wm", max_model_len=max_model_len, max_batch_size=4,
                                         defaults=DecodeSettings(gen_length=gen_length, temperature=0)))
    with serving(create_app(engine, host="127.0.0.1")) as upstream, \
            serving(create_proxy_app(ProxyConfig(upstream=upstream, timeout_s=60), host="127.0.0.1")) as proxy:
        yield upstream, proxy, loaded
