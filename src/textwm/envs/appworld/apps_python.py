"""AppWorld's own interpreter: find it, make it, and talk to ``apps_runner.py`` running under it.

AppWorld 0.1.3 needs pydantic 1; textwm needs pydantic 2. So the apps live in a venv of their own, and
textwm drives them through :class:`AppsRunner`, a subprocess speaking JSON lines (the protocol is in
``apps_runner.py``'s docstring). The interpreter is, in order: the path a session config gives,
``$TEXTWM_APPWORLD_PYTHON``, ``<repo>/.venv-appworld/bin/python``. Make one with
``appworld/setup_appworld.sh`` (or :func:`create_appworld_venv`; about 45 s, needs PyPI).

``api_specs.json`` (every public API's spec, read by the tools and the simulator) is written from the
runner's ``specs`` op::

    python -m textwm.envs.appworld.apps_python --write-specs src/textwm/envs/appworld/api_specs.json
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from textwm.config import ConfigCLI, option
from textwm.envs.protocol import EnvFailed

log = logging.getLogger(__name__)

APPWORLD_VERSION = "0.1.3.post1"
ENV_VAR = "TEXTWM_APPWORLD_PYTHON"
REPO_VENV = ".venv-appworld"
RUNNER = Path(__file__).with_name("apps_runner.py")
API_SPECS = Path(__file__).with_name("api_specs.json")
SETUP_HINT = ("make one with `bash appworld/setup_appworld.sh` (a venv at .venv-appworld with "
              f"appworld=={APPWORLD_VERSION}, ~45 s, needs PyPI) or point ${ENV_VAR} at an interpreter "
              "that has appworld installed and `appworld install` done")
#: Written into a venv once :func:`create_appworld_venv` finished (a half-made venv has none).
READY_MARKER = ".textwm-appworld-ready"
STDERR_TAIL_LINES = 40
STDERR_DRAIN_S = 2.0
#: Seconds a ``specs`` dump or a first import of the apps may take.
SLOW_OP_TIMEOUT_S = 300.0


def repo_root() -> Path:
    return Path(__file__).resolve().parents[4]


def find_appworld_python(explicit: str = "") -> Path:
    """AppWorld's interpreter (see the module docstring); FileNotFoundError saying what to run."""
    for source, value in (("appworld_python", explicit), (f"${ENV_VAR}", os.environ.get(ENV_VAR, ""))):
        if value:
            path = Path(value).expanduser()
            if not path.is_file():
                raise FileNotFoundError(f"{source}={value} is not a file; {SETUP_HINT}")
            return path
    default = repo_root() / REPO_VENV / "bin" / "python"
    if default.is_file():
        return default
    raise FileNotFoundError(f"no AppWorld interpreter: {default} does not exist and ${ENV_VAR} is not set; "
                            f"{SETUP_HINT}")


def create_appworld_venv(path: str | Path, *, python: str = sys.executable) -> Path:
    """``python -m venv PATH`` + ``pip install appworld==0.1.3.post1`` + ``appworld install``; its python."""
    venv = Path(path).expanduser().resolve()
    interpreter = venv / "bin" / "python"
    steps = [[python, "-m", "venv", str(venv)],
             [str(interpreter), "-m", "pip", "install", "--quiet", f"appworld=={APPWORLD_VERSION}"],
             [str(venv / "bin" / "appworld"), "install"]]
    for step in steps:
        log.info("AppWorld venv: %s", " ".join(step))
        done = subprocess.run(step, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"`{' '.join(step)}` failed ({done.returncode}):\n{done.stderr[-2000:]}\n"
                               f"Run it by hand to see why (PyPI must be reachable for pip).")
    (venv / READY_MARKER).write_text(APPWORLD_VERSION + "\n")
    return interpreter


class AppsRunner:
    """``apps_runner.py`` as a subprocess: one request, one answer, each within a timeout.

    A runner that dies, answers garbage or takes longer than the timeout is killed, and the request
    raises :class:`EnvFailed` with the tail of its stderr. Its stderr is also logged (debug).
    """

    def __init__(self, python: str | Path, *, timeout_s: float = 30.0, env: dict[str, str] | None = None):
        self.python, self.timeout_s = str(python), timeout_s
        self._stderr: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self._answers: queue.Queue[str | None] = queue.Queue()
        self._proc = subprocess.Popen([self.python, "-u", str(RUNNER)], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1, env=env,
                                      start_new_session=True)  # its own process group: kill() ends its children too
        threading.Thread(target=self._read_stdout, daemon=True).start()
        self._stderr_reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._stderr_reader.start()

    def _read_stdout(self) -> None:
        for line in self._proc.stdout:
            self._answers.put(line)
        self._answers.put(None)

    def _read_stderr(self) -> None:
        for line in self._proc.stderr:
            self._stderr.append(line.rstrip("\n"))
            log.debug("apps_runner: %s", line.rstrip("\n"))

    @property
    def alive(self) -> bool:
        return self._proc.poll() is None

    def stderr_tail(self) -> str:
        return "\n".join(self._stderr)

    def request(self, op: str, *, timeout_s: float | None = None, **fields: Any) -> dict[str, Any]:
        """The runner's answer ``{"result": ...}`` or ``{"error": ...}`` to ``{"op": op, **fields}``."""
        if not self.alive:
            raise self._failed(f"the AppWorld runner is not running (exit code {self._proc.returncode})")
        try:
            self._proc.stdin.write(json.dumps({"op": op, **fields}) + "\n")
            self._proc.stdin.flush()
        except OSError as exc:
            raise self._failed(f"could not send {op!r} to the AppWorld runner ({exc})") from None
        wait = self.timeout_s if timeout_s is None else timeout_s
        try:
            line = self._answers.get(timeout=wait)
        except queue.Empty:
            self.kill()
            raise self._failed(f"the AppWorld runner took longer than {wait:g} s to answer {op!r}") from None
        if line is None:
            self._proc.wait()
            raise self._failed(f"the AppWorld runner exited (code {self._proc.returncode}) during {op!r}")
        try:
            answer = json.loads(line)
        except json.JSONDecodeError:
            self.kill()
            raise self._failed(f"the AppWorld runner answered {op!r} with non-JSON: {line[:200]!r}") from None
        if not isinstance(answer, dict) or not ({"result", "error"} & answer.keys()):
            self.kill()
            raise self._failed(f"the AppWorld runner answered {op!r} without result/error: {line[:200]!r}")
        return answer

    def result(self, op: str, **fields: Any) -> Any:
        """The ``result`` of an op that must succeed; RuntimeError with the runner's error otherwise."""
        answer = self.request(op, **fields)
        if "error" in answer:
            raise RuntimeError(f"AppWorld runner: {op} failed: {answer['error']}")
        return answer["result"]

    def _failed(self, message: str) -> EnvFailed:
        if not self.alive:
            self._stderr_reader.join(timeout=STDERR_DRAIN_S)  # the last lines of a runner that just died
        tail = self.stderr_tail()
        return EnvFailed(f"{message}; runner stderr (last lines):\n{tail}" if tail else message)

    def kill(self) -> None:
        if self.alive:
            with contextlib.suppress(ProcessLookupError):  # it exited in between
                os.killpg(self._proc.pid, signal.SIGKILL)  # the group this runner leads (start_new_session)
        self._proc.wait()

    def close(self) -> None:
        if self.alive:
            try:
                self.request("close", timeout_s=10)
            except EnvFailed as exc:
                log.warning("AppWorld runner did not close cleanly: %s", exc)
        self.kill()


def write_api_specs(python: str | Path, path: str | Path = API_SPECS) -> int:
    """Write every public API's spec (the runner's ``specs`` op) to ``path`` as compact JSON; the count."""
    runner = AppsRunner(python, timeout_s=SLOW_OP_TIMEOUT_S)
    try:
        specs = runner.result("specs")
    finally:
        runner.close()
    text = json.dumps(specs, separators=(",", ":"), ensure_ascii=False, default=str)
    Path(path).write_text(text, encoding="utf-8")
    log.info("wrote %d API specs to %s", len(specs), path)
    return len(specs)


def read_api_specs(path: str | Path = API_SPECS) -> list[dict[str, Any]]:
    """The specs :func:`write_api_specs` wrote."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


@dataclass
class AppsPythonConfig:
    python: str = option("", "AppWorld's interpreter (default: see above)")
    write_specs: str = option("", "write api_specs.json to this path", metavar="PATH")
    create_venv: str = option("", "create an AppWorld venv at this folder", metavar="DIR")


def main(argv: list[str] | None = None, prog: str = "python -m textwm.envs.appworld.apps_python") -> int:
    parsed = ConfigCLI(AppsPythonConfig, prog=prog, description=__doc__, key_values=False).parse_or_report(argv)
    if parsed is None:
        return 2
    args = parsed[0]
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    if args.create_venv:
        log.info("AppWorld interpreter: %s", create_appworld_venv(args.create_venv))
    if args.write_specs:
        python = Path(args.create_venv) / "bin" / "python" if args.create_venv and not args.python else None
        write_api_specs(python or find_appworld_python(args.python), args.write_specs)
    if not (args.create_venv or args.write_specs):
        log.info("AppWorld interpreter: %s", find_appworld_python(args.python))
    return 0


if __name__ == "__main__":
    sys.exit(main())
