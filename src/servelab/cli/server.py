"""``servelab serve-local`` and ``servelab bootlog``: the embedded server, and what a server's startup log says."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated

import typer

from servelab.cli.bind import EMBEDDED, bind
from servelab.cli.common import console, fail, serve_until_ctrl_c, sigterm_as_sigint
from servelab.server.local import LocalServer
from servelab.metrics.bootlog import parse_bootlog
from servelab.guards.redaction import dump
from servelab.report.bootlog_table import bootlog_table
from servelab.settings import Target
from servelab.guards.files import head_text


@bind(target=(Target, EMBEDDED))
def serve_local(
    target: Target,
    port: Annotated[int | None, typer.Option(help="Port on 127.0.0.1 (default a free one).")] = None,
    log: Annotated[Path | None, typer.Option(help="Server log file (default a temporary file).")] = None,
) -> None:
    """Start the embedded llama.cpp server with Gemma 3 270M and print its URL until Ctrl-C."""
    sigterm_as_sigint()
    log_path = log or Path(tempfile.mkdtemp(prefix="servelab-")) / "server.log"
    try:
        server = LocalServer(log_path, parallel=target.parallel, ctx_size=target.ctx_size, port=port, llama_server=target.llama_server)
        with console.status(f"starting the embedded server (Gemma 3 270M, {server.backend})…"):
            server.start()
    except KeyboardInterrupt:
        fail("interrupted while the server started; it was stopped", 130)

    def wait() -> str:
        server.proc.process.wait()
        return f"llama-server exited with code {server.proc.process.returncode}; see {log_path}"

    serve_until_ctrl_c(server.url, f"with {server.backend} (log: {log_path})", wait, server.stop)


def bootlog(
    path: Annotated[str, typer.Argument(help="A vLLM, SGLang or llama.cpp startup log, or - for standard input.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """What a server decided while it booted: KV cache, concurrency, graphs, backends, timings, warnings."""
    facts = parse_bootlog(head_text(Path(path), "bootlog"))
    if not facts.recognised_lines:
        fail(f"{path}: no line of a vLLM, SGLang or llama.cpp startup log in it ({facts.unrecognised_lines} lines read)")
    if json_out:
        print(dump(facts, indent=2, exclude={"unrecognised"}))
    else:
        console.print(bootlog_table(facts))
