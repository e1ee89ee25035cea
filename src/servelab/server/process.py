"""One process servelab starts (a server, a ``docker run`` client, a Ray node, an ssh session):
its own process group, its output in a log file, readiness over HTTP, and a clean stop.

Processes are started from argument lists (``subprocess.Popen`` without a shell), in a new
session, so a stop reaches every child (``os.killpg``) and the user's Ctrl-C reaches servelab
alone, which then stops them in order.

Each one also gets a lifeline (:data:`WATCHER`): a small process in its own session that waits on
a pipe only servelab holds. When servelab ends in any way, SIGKILL and a crash included, the kernel
closes the pipe; unless servelab said it stopped the process itself, the watcher then runs the
stop command (``docker stop``: a container outlives its client) and SIGTERM, then SIGKILL, to the
process group. (``PR_SET_PDEATHSIG`` would miss the container and fires when the starting thread
ends.) Nothing stays behind holding a GPU.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Sequence
from pathlib import Path

from servelab.errors import ServelabError

STOP_TIMEOUT_S = 30.0  # SIGTERM, then SIGKILL after this long (vLLM needs a few seconds to free the GPU)
LOG_TAIL_LINES = 15
POLL_S = 0.2  # readiness polling interval (not synchronisation: readiness is the HTTP answer)


WATCHER = """
import os, signal, subprocess, sys, time
pgid, timeout, stop = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
if sys.stdin.buffer.read():  # EOF: servelab has ended; b"stopped" first: it stopped the process itself
    sys.exit(0)
if stop:
    try:
        subprocess.run(stop, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)
    except Exception:
        pass
def alive():
    try:
        os.killpg(pgid, 0)
        return True
    except OSError:
        return False
if alive():
    os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    if alive():
        os.killpg(pgid, signal.SIGKILL)
"""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a log file, or "(no log)"."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "\n".join(line.rstrip() for line in deque(f, maxlen=lines))
    except OSError:
        return "(no log)"


class Proc:
    """A started process with its log.

    Args:
        name: what it is, for messages ("llama-server", "ray head on spark-2").
        argv: the argument list; ``argv[0]`` is looked up on PATH.
        log_path: receives stdout and stderr (appended).
        env: variables added to servelab's environment.
        stop_argv: a command that stops it gracefully before the signals (``docker stop NAME``,
            ``ssh host ray stop``); run with a timeout, its failure ignored.
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        env: dict[str, str] | None = None,
        stop_argv: Sequence[str] | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.env = env or {}
        self.stop_argv = list(stop_argv) if stop_argv else None
        self.process: subprocess.Popen | None = None
        self.watcher: subprocess.Popen | None = None

    def start(self) -> Proc:
        """Start it.

        Raises:
            ServelabError: the program does not exist or cannot be run.
        """
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(self.log_path, "ab") as log:
                self.process = subprocess.Popen(
                    self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    env={**os.environ, **self.env} if self.env else None, start_new_session=True,
                )  # fmt: skip
        except OSError as exc:
            raise ServelabError(f"cannot start {self.name} ({self.argv[0]}): {exc.strerror}") from None
        self.watcher = subprocess.Popen(
            [sys.executable, "-c", WATCHER, str(self.process.pid), str(STOP_TIMEOUT_S), *(self.stop_argv or [])],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        return self

    def alive(self) -> bool:
        """True while the process runs."""
        return self.process is not None and self.process.poll() is None

    def exited(self) -> str:
        """Why it is gone, with the last lines of its log (for errors)."""
        code = self.process.returncode if self.process else None
        return f"{self.name} exited with code {code}; the last lines of {self.log_path}:\n{tail(self.log_path)}"

    def stop(self) -> None:
        """Stop it: ``stop_argv`` first; then SIGTERM to the process itself, so it shuts its children
        down in order (vLLM's engine cores, a Ray head's GCS and raylet); then SIGKILL to whatever is
        left in its process group, at once if it exited or after ``STOP_TIMEOUT_S`` if not."""
        if self.process is None:
            return
        if self.stop_argv:
            try:
                subprocess.run(self.stop_argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=STOP_TIMEOUT_S, check=False)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.process.wait()
        self._release_watcher()

    def _release_watcher(self) -> None:
        """Tell the lifeline the process was stopped here, so it exits without acting."""
        if self.watcher is not None and self.watcher.stdin is not None:
            try:
                self.watcher.stdin.write(b"stopped")
                self.watcher.stdin.close()
            except OSError:
                pass
            self.watcher.wait()
            self.watcher = None


def http_ok(url: str, timeout_s: float = 2.0) -> bool:
    """True when ``GET url`` answers 200."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return resp.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError, ValueError):
        return False


def wait_ready(url: str, timeout_s: float, procs: Sequence[Proc], what: str) -> None:
    """Wait until ``GET url`` answers 200 while every process in ``procs`` keeps running.

    Raises:
        ServelabError: a process exited (its last log lines in the message), or ``timeout_s``
            passed (the last lines of the first process's log in the message).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        for p in procs:
            if not p.alive():
                raise ServelabError(f"{what} did not start: {p.exited()}")
        if http_ok(url):
            return
        if time.monotonic() > deadline:
            log = procs[0].log_path if procs else None
            lines = f"; the last lines of {log}:\n{tail(log)}" if log else ""
            raise ServelabError(f"{what} was not ready at {url} after {timeout_s:.0f} s{lines}")
        time.sleep(POLL_S)
