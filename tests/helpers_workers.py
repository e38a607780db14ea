"""Helpers for the worker tests: real ``wam serve`` processes, test venvs, leak checks.

The tests put ``tests/`` on ``sys.path`` to import this module and ``wamtest_scripted``;
workers get it through ``PYTHONPATH`` and load the scripted models through
``WAMCORE_PLUGIN_MODULES``.

Venvs for the cross-environment tests (built on first use when the variables are unset,
then reused; ``.ci/run`` can build them once and export the variables):

* ``WAMCORE_TEST_WORKER_PYTHON``: a Python with wamcore, torch and (when the plugin is
  in the checkout) ``wam-pointmass[model]``; default ``.venv-test-worker/bin/python``;
* ``WAMCORE_TEST_CLIENT_PYTHON``: a Python with wamcore (and ``wam-pointmass`` without
  its model extra), numpy 1.x and **no torch**; default ``.venv-test-client/bin/python``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, List, Optional, Sequence

import pytest

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
PLUGIN_MODULE = "wamtest_scripted"
TAG_ENV = "WAMCORE_TEST_TAG"
POINTMASS = REPO / "plugins" / "pointmass"
WORKER_PYTHON_ENV = "WAMCORE_TEST_WORKER_PYTHON"
CLIENT_PYTHON_ENV = "WAMCORE_TEST_CLIENT_PYTHON"
TORCH_REQUIREMENT = "torch==2.13.0"  # the CPU build on this machine's local wheel mirror


def worker_env(base: Optional[dict] = None, **extra: str) -> dict:
    """This process's environment plus what a worker needs to find the scripted models."""
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH")]))
    env["WAMCORE_PLUGIN_MODULES"] = PLUGIN_MODULE
    env["WAMCORE_LOAD_PLUGINS"] = ""  # only the scripted module: installed plugins cannot interfere
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


@pytest.fixture
def scripted_env(monkeypatch):
    """Make this process (and what it spawns) see the scripted plugin module."""
    for key, value in worker_env().items():
        if os.environ.get(key) != value:
            monkeypatch.setenv(key, value)
    if str(TESTS) not in sys.path:
        monkeypatch.syspath_prepend(str(TESTS))


# ----------------------------------------------------------------------------- processes


def like_a_terminal() -> None:
    """``preexec_fn`` for a process a test sends SIGINT: a shell that starts the test run in
    the background ignores SIGINT, and children inherit that; a user's terminal does not."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def tagged_pids(tag: str) -> List[int]:
    """Processes whose environment carries ``TAG_ENV=tag`` (children, orphans included)."""
    needle = f"{TAG_ENV}={tag}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                if needle in fh.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            continue
    return [p for p in found if not _is_zombie(p)]


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return _is_zombie(pid)


def wait_for(predicate, timeout: float = 60.0, what: str = "condition"):
    """Wait on a state itself (not a sleep): ``predicate()``'s first true value, or a failure
    naming ``what`` after ``timeout`` seconds (a margin for a loaded machine, not a requirement)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def wait_gone(pid: int, timeout: float) -> Optional[float]:
    """Seconds until ``pid`` exited, or None if it is still there after ``timeout``."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if pid_gone(pid):
            return time.monotonic() - t0
        time.sleep(0.01)
    return None


@pytest.fixture(autouse=False)
def no_leaks(monkeypatch):
    """Fail the test if any process it started (tagged through the environment) survives it."""
    tag = uuid.uuid4().hex
    monkeypatch.setenv(TAG_ENV, tag)
    yield tag
    deadline = time.monotonic() + 5.0
    left = tagged_pids(tag)
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = tagged_pids(tag)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not left, f"processes left running by this test: {left}"


class ServedWorker:
    """A ``wam serve`` subprocess started by a test (not owned by any client)."""

    def __init__(self, args: Sequence[str], tmp: Path, *, python: str = sys.executable,
                 env: Optional[dict] = None, stdin=subprocess.DEVNULL):
        self.ready_file = tmp / f"ready-{uuid.uuid4().hex[:8]}.json"
        self.log = tmp / f"{self.ready_file.stem}.log"
        argv = [python, "-m", "wamcore", "serve", *args, "--ready-file", str(self.ready_file)]
        self._log = open(self.log, "wb")
        self.proc = subprocess.Popen(argv, env=env or worker_env(), stdout=self._log, stderr=subprocess.STDOUT, stdin=stdin)
        self.ready = self._wait_ready()
        self.endpoint = self.ready["endpoint"]
        self.port = self.ready["port"]

    def _wait_ready(self, timeout: float = 60.0) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.ready_file.exists():
                return json.loads(self.ready_file.read_text())
            if self.proc.poll() is not None:
                raise AssertionError(f"worker exited with {self.proc.returncode}:\n{self.log.read_text()}")
            time.sleep(0.02)
        self.stop()
        raise AssertionError(f"worker not ready in {timeout} s:\n{self.log.read_text()}")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.log.read_text()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log.close()


@contextmanager
def served(tmp: Path, *extra: str, backend: str = "scripted-wam", platform: str = "toy", **kw) -> Iterator[ServedWorker]:
    worker = ServedWorker(["--am-backend", backend, "--platform", platform, *extra], tmp, **kw)
    try:
        yield worker
    finally:
        worker.stop()


# ----------------------------------------------------------------------------- venvs


def _ensure_venv(path: Path, requirements: List[str]) -> str:
    """``path``'s python; the venv is built with ``requirements`` only when it does not exist
    (``.ci/install`` builds the same two venvs; the tests check what they need in them)."""
    python = path / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *requirements], check=True,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return str(python)


def worker_python() -> str:
    """A Python with wamcore + torch (+ wam-pointmass[model] when it is in the checkout)."""
    given = os.environ.get(WORKER_PYTHON_ENV)
    if given:
        return given
    reqs = ["-e", str(REPO), TORCH_REQUIREMENT]
    if (POINTMASS / "pyproject.toml").exists():
        reqs += ["-e", f"{POINTMASS}[model]"]
    return _ensure_venv(REPO / ".venv-test-worker", reqs)


def client_python() -> str:
    """A Python with wamcore (+ wam-pointmass without its model extra) and no torch."""
    given = os.environ.get(CLIENT_PYTHON_ENV)
    if given:
        return given
    reqs = ["-e", str(REPO), "numpy<2"]  # the wire format must not care about numpy's major version
    if (POINTMASS / "pyproject.toml").exists():
        reqs += ["-e", str(POINTMASS)]
    return _ensure_venv(REPO / ".venv-test-client", reqs)


def has_module(python: str, module: str) -> bool:
    probe = f"import importlib.util, sys; sys.exit(0 if importlib.util.find_spec({module!r}) else 1)"
    return subprocess.run([python, "-c", probe]).returncode == 0
