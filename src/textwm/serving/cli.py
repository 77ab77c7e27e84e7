"""Command lines of the WM server, the WM proxy and the stack launcher: ``python -m textwm.serving {server,proxy,stack}``.

``scripts/wm_server.py``, ``scripts/wm_proxy.py`` and ``scripts/wm_stack.py`` call the same functions.
The paper's environment switches still work: ``WM_PORT`` (proxy port, default 30000) and
``WM_BACKEND_PORT`` (server port, default 30001) are the defaults of ``--port``/``--upstream``
(``--backend-port`` in the stack launcher).
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import uvicorn

from textwm.config import ConfigCLI, config_dict, option
from textwm.generation.settings import DecodeSettings
from textwm.serving.launch import (
    BACKENDS,
    BackendSpec,
    DllmFlags,
    ManagedProcess,
    health_url,
    proxy_command,
    server_command,
    server_decode_defaults,
    with_dllm_flags,
)
from textwm.serving.proxy import ProxyConfig, create_proxy_app
from textwm.web import SERVER_KEEPALIVE_S, ServerSecurity, check_bind

if TYPE_CHECKING:
    from textwm.serving.engine import EngineConfig

log = logging.getLogger(__name__)

STACK_ACTIONS = ("start", "stop", "status", "print-command")


def _logging(fmt: str = "%(asctime)s %(levelname)s %(name)s: %(message)s") -> None:
    logging.basicConfig(level=logging.INFO, format=fmt)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per HTTP request otherwise


def _default_upstream() -> str:
    port = os.environ.get("WM_BACKEND_PORT", "").strip() or "30001"
    return f"http://127.0.0.1:{port}"


@dataclass
class ServerConfig:
    """OpenAI-compatible server for AR, SDAR and WeDLM world-model checkpoints."""

    model_path: str = option(help="checkpoint folder (AR, SDAR or WeDLM)")
    host: str = option("127.0.0.1", "address to listen on")
    port: int = option(30001, "port", env="WM_BACKEND_PORT")
    served_model_name: str | None = option(None, "model id in /v1/models (default: the folder name)")
    device: str = option("auto", "auto, cpu, cuda, cuda:1, ...")
    dtype: str = option("auto", "auto (bf16 on GPU, fp32 on CPU), bfloat16, float16, float32")
    max_batch_size: int = option(32, "rows decoded together")
    max_queue: int = option(256, "requests waiting at most; more get 503")
    batch_wait_ms: float = option(5.0, "--scheduler batch: how long a batch waits for company")
    join_min_rows: int = option(0, "--scheduler continuous: queued requests join the running rows once this many "
                                   "wait (0: max-batch-size / 8; 1: at every step)")
    join_wait_ms: float = option(20.0, "--scheduler continuous: ... or once the oldest has waited this long")
    scheduler: str = option("auto", "continuous (requests join and leave the running rows at every block/step: "
                                    "the decode engine), batch (whole batches through the reference decoders), "
                                    "auto (continuous where the engine runs the architecture)",
                            choices=("auto", "continuous", "batch"))
    max_model_len: int = option(8192, "prompt + max_tokens limit")
    prefix_cache: bool = option(True, "--scheduler continuous: keep the K/V of prompt prefixes for the prompts that "
                                      "start the same way (--no-prefix-cache: prefill every prompt whole)")
    prefill_graph_tokens: int | None = option(None, "--scheduler continuous on CUDA: prefills of at most this many "
                                                    "tokens (rows and width bucketed) replay a CUDA graph (default: "
                                                    "2048 with the limited-attention kernel; 0: eager prefills)")
    warm_every_shape: bool = option(True, "--scheduler continuous on CUDA: capture the graph of every row bucket and "
                                          "kv bucket before /health answers (--no-warm-every-shape: the smallest "
                                          "only, the rest while the first requests wait)")
    engine_process: bool | None = option(None, "--scheduler continuous: run the decode engine and the model in a "
                                               "process of their own, so that the decode steps and the HTTP event "
                                               "loop do not share one GIL (default: on with CUDA, off on the CPU)")
    max_stop_strings: int = option(32, "stop strings per request at most (more: 400)")
    max_stop_chars: int = option(4096, "characters of a request's stop strings together at most (more: 400)")
    max_messages: int = option(1024, "messages per chat request at most (more: 400)")
    mask_token_id: int | None = option(None, "for SDAR/WeDLM checkpoints whose config.json lacks mask_token_id")
    decode: DecodeSettings = option(help="decoding defaults (requests may override them)",
                                    default_factory=server_decode_defaults, rename={"gen_length": "max_tokens"})
    dllm: DllmFlags = option(help="lmdeploy's spellings of the SDAR flags", default_factory=DllmFlags)
    allow_client_chat_template: bool = option(False, "accept a chat_template in chat_template_kwargs (rendered in "
                                                     "a sandboxed process with time and size limits)")
    security: ServerSecurity = option(help="access and limits", default_factory=ServerSecurity)

    def __post_init__(self) -> None:
        check_bind(self.host, self.security)
        self.decode = with_dllm_flags(self.decode, self.dllm)

    def engine_config(self) -> EngineConfig:
        """The serving engine's config (its decoding defaults: ``decode`` with the lmdeploy spellings applied)."""
        from textwm.serving.engine import EngineConfig  # heavy: serving.engine loads torch and transformers

        return EngineConfig(
            served_model_name=self.served_model_name or Path(self.model_path.rstrip("/")).name,
            defaults=self.decode, max_batch_size=self.max_batch_size, max_queue=self.max_queue,
            batch_wait_ms=self.batch_wait_ms, join_min_rows=self.join_min_rows, join_wait_ms=self.join_wait_ms,
            max_model_len=self.max_model_len, scheduler=self.scheduler, prefix_cache=self.prefix_cache,
            prefill_graph_tokens=self.prefill_graph_tokens, warm_every_shape=self.warm_every_shape,
            max_stop_strings=self.max_stop_strings, max_stop_chars=self.max_stop_chars, max_messages=self.max_messages,
            allow_client_chat_template=self.allow_client_chat_template,
            engine_process=bool(self.engine_process))

    def resolve_engine_process(self) -> None:
        """``engine_process`` None -> on where the model runs on CUDA and the scheduler may be continuous."""
        if self.engine_process and self.scheduler == "batch":
            raise ValueError("--engine-process runs the continuous scheduler; leave out --scheduler batch or "
                             "--engine-process")
        if self.engine_process is None:
            from textwm.models.checkpoint import resolve_device  # heavy: loads torch

            self.engine_process = self.scheduler != "batch" and resolve_device(self.device).type == "cuda"


@dataclass
class ProxyServeConfig:
    """The WM proxy: the paper's {input: {system_prompt, state, action}} payload to an OpenAI-compatible server."""

    host: str = option("127.0.0.1", "address to listen on")
    port: int = option(30000, "port", env="WM_PORT")
    proxy: ProxyConfig = option(help="upstream", default_factory=lambda: ProxyConfig(upstream=_default_upstream()))
    security: ServerSecurity = option(help="access and limits", default_factory=ServerSecurity)

    def __post_init__(self) -> None:
        check_bind(self.host, self.security)


@dataclass
class StackConfig:
    """Start/stop the WM stack: the WM server (native | lmdeploy | vllm) and the proxy, each with a pid file and a log."""

    action: str = option(help="start (waits for /health), stop, status, print-command (the launch lines)",
                         positional=True, choices=STACK_ACTIONS)
    run_dir: str = option("runs/wm_stack", "pid files and logs")
    port: int = option(30000, "proxy port", env="WM_PORT")
    timeout: float = option(600.0, "seconds to wait for the server's /health")
    api_key: str = option("", "bearer token of both processes (the proxy sends it upstream too); clients then need "
                              "it (WM_API_KEY)", env="TEXTWM_API_KEY", secret=True)
    server: BackendSpec = option(help="the WM server", default_factory=BackendSpec, rename={"port": "backend_port"})


def server_main(argv: list[str] | None = None, prog: str = "python -m textwm.serving server") -> int:
    parsed = ConfigCLI(ServerConfig, prog=prog, description=ServerConfig.__doc__).parse_or_report(argv)
    if parsed is None:
        return 2
    config = parsed[0]
    _logging()

    # heavy: these load torch and transformers, which the proxy and stack commands of this module don't need
    from textwm.models.checkpoint import CheckpointError, load_model, load_tokenizer
    from textwm.serving.app import create_app
    from textwm.serving.engine import Engine, ModelSource

    try:
        config.resolve_engine_process()
        engine_config = config.engine_config()
        if engine_config.engine_process:   # the engine process loads the weights; this one, the tokenizer
            source = ModelSource(config.model_path, device=config.device, dtype=config.dtype,
                                 mask_token_id=config.mask_token_id)
            engine = Engine(load_tokenizer(config.model_path, mask_token_id=config.mask_token_id), engine_config,
                            source=source)
        else:
            loaded = load_model(config.model_path, device=config.device, dtype=config.dtype,
                                mask_token_id=config.mask_token_id)
            engine = Engine(loaded, engine_config)
    except (CheckpointError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    log.info("engine: %s", config_dict(engine_config))
    uvicorn.run(create_app(engine, config.security, host=config.host), host=config.host, port=config.port,
                log_level="warning", timeout_keep_alive=SERVER_KEEPALIVE_S)
    return 0


#: The repetition penalty the paper's WM proxies (``alfworld/wm_proxy.py``, ``appworld/wm_proxy.py``,
#: ``WMHandler.do_POST``) fill in for requests that carry none.
PAPER_PROXY_REPETITION_PENALTY = 1.3


def paper_proxy_main(argv: list[str], prog: str, *, sglang_port: bool) -> int:
    """The WM proxy with the paper's defaults, for the env folders' ``wm_proxy.py``: repetition penalty 1.3
    for requests without one and, with ``sglang_port``, ``$SGLANG_PORT`` as the WM server's port (the paper's
    AppWorld proxy). They go before the user's flags, so the user's win (the last value of a flag wins)."""
    defaults = ["--repetition-penalty", str(PAPER_PROXY_REPETITION_PENALTY)]
    port = os.environ.get("SGLANG_PORT", "").strip() if sglang_port else ""
    if port:
        defaults += ["--upstream", f"http://127.0.0.1:{port}"]
    return proxy_main([*defaults, *argv], prog=prog)


def proxy_main(argv: list[str] | None = None, prog: str = "python -m textwm.serving proxy") -> int:
    parsed = ConfigCLI(ProxyServeConfig, prog=prog, description=ProxyServeConfig.__doc__).parse_or_report(argv)
    if parsed is None:
        return 2
    config = parsed[0]
    _logging()

    log.info("WM proxy on %s:%d -> %s", config.host, config.port, config.proxy.upstream)
    uvicorn.run(create_proxy_app(config.proxy, config.security, host=config.host), host=config.host,
                port=config.port, log_level="warning", timeout_keep_alive=SERVER_KEEPALIVE_S)
    return 0


def stack_main(argv: list[str] | None = None, prog: str = "python -m textwm.serving stack") -> int:
    parsed = ConfigCLI(StackConfig, prog=prog, description=StackConfig.__doc__).parse_or_report(argv)
    if parsed is None:
        return 2
    config = parsed[0]
    _logging("%(levelname)s %(message)s")

    run_dir = Path(config.run_dir)
    server, proxy = ManagedProcess("wm_server", run_dir), ManagedProcess("wm_proxy", run_dir)
    spec = config.server
    if config.action in ("start", "print-command"):
        if not spec.model_path:
            print("error: --model-path is required", file=sys.stderr)
            return 2
        upstream = f"http://{spec.host}:{spec.port}"
        try:
            commands = [server_command(spec), proxy_command(config.port, upstream, upstream_kind=spec.backend,
                                                            host=spec.host)]
        except ValueError as exc:  # the checkpoint cannot be served so (CheckpointError is one too)
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if config.action == "print-command":
            for argv_ in commands:
                print(" ".join(argv_))
            return 0
        # The key travels in the environment, not on a command line that `ps` shows.
        keys = {"TEXTWM_API_KEY": config.api_key, "TEXTWM_UPSTREAM_API_KEY": config.api_key} if config.api_key else {}
        try:
            server.start(commands[0], env=keys)
            server.wait_healthy(health_url(spec.backend, spec.host, spec.port), config.timeout)
            proxy.start(commands[1], env=keys)
            proxy.wait_healthy(f"http://{spec.host}:{config.port}/health", 60)
        except (RuntimeError, TimeoutError) as exc:
            proxy.stop()
            server.stop()
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(f"WM stack up: proxy http://{spec.host}:{config.port}/ -> {spec.backend} server {upstream} "
              f"(logs in {run_dir})")
        return 0
    if config.action == "stop":
        stopped = [name for name, proc in (("proxy", proxy), ("server", server)) if proc.stop()]
        print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
        return 0
    for name, proc in (("server", server), ("proxy", proxy)):
        pid = proc.pid()
        print(f"{name}: " + (f"running (pid {pid}), log {proc.log_file}" if pid else "not running"))
    return 0


COMMANDS = {"server": server_main, "proxy": proxy_main, "stack": stack_main}


def main(argv: list[str] | None = None, *, prog: str = "python -m textwm.serving") -> int:
    """``python -m textwm.serving {server,proxy,stack} ...``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        asked = bool(argv) and argv[0] in ("-h", "--help")
        print(f"usage: {prog} {{{','.join(COMMANDS)}}} [--help | flags]\n"
              f"  server  the native OpenAI-compatible WM server ({', '.join(BACKENDS[:1])})\n"
              "  proxy   the WM proxy (the paper's payload -> an OpenAI-compatible server)\n"
              "  stack   start/stop/status of server + proxy (native | lmdeploy | vllm)",
              file=sys.stdout if asked else sys.stderr)
        return 0 if asked else 2
    name = argv.pop(0)
    return COMMANDS[name](argv, prog=f"{prog} {name}")
