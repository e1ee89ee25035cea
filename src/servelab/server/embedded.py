"""The embedded server process: llama.cpp's own HTTP server from the prebuilt ``xllamacpp`` wheel.

``xllamacpp`` (PyPI, MIT; abi3 wheels for Linux x86_64/aarch64, macOS and Windows) runs
llama.cpp's C++ ``llama-server`` in-process (``xllamacpp.Server(CommonParams)``): the same
``/v1/chat/completions`` streaming, ``/metrics``, ``/tokenize``, ``/apply-template``, ``/props``,
``/slots`` and ``/health`` as the ``llama-server`` binary, with no compiler at install time.

This module is the child process servelab starts for it (``python -m servelab.server.embedded``, or
the ``{embedded_llama_server}`` recipe placeholder): it takes the subset of ``llama-server``'s
own flags listed in ``FLAGS``, so the same argument list starts either this process or a native
``llama-server`` binary, serves until it gets SIGTERM (the default action ends it: the server
keeps no state worth a graceful stop) and exits by itself when the process that started it is
gone, so a killed servelab never leaves it behind. An unknown flag is one error line and exit
code 2 (``--llama-server PATH`` runs any flag a native build has).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading

from servelab.errors import ServelabError

PARENT_POLL_S = 1.0  # how often the watchdog checks that the parent still exists


def parser() -> argparse.ArgumentParser:
    """The accepted ``llama-server`` flags (names, meanings and defaults as llama.cpp's ``common/arg.cpp``)."""
    p = argparse.ArgumentParser(
        prog="python -m servelab.server.embedded",
        description="llama.cpp's HTTP server (xllamacpp wheel) with llama-server's flags.",
    )
    p.add_argument("-m", "--model", help="GGUF file (default: the packaged Gemma 3 270M Q4_K_M)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("-np", "--parallel", type=int, default=4, help="slots (concurrent sequences)")
    p.add_argument("-c", "--ctx-size", type=int, default=16384, help="total context, shared by the slots")
    p.add_argument("-a", "--alias", help="served model name")
    p.add_argument("-t", "--threads", type=int, default=-1)
    p.add_argument("-b", "--batch-size", type=int)
    p.add_argument("-ub", "--ubatch-size", type=int)
    p.add_argument("--chat-template-file", help="Jinja chat template (used with --jinja)")
    p.add_argument("--jinja", action="store_true", help="accepted for llama-server compatibility (always on)")
    p.add_argument("--metrics", action="store_true", help="accepted for compatibility (/metrics is always on)")
    p.add_argument("--swa-full", action="store_true", help="full-size cache for sliding-window layers")
    p.add_argument("-md", "--model-draft", help="draft model GGUF for speculative decoding")
    p.add_argument("--spec-type", help="speculative decoding type, e.g. draft-simple, ngram-simple")
    p.add_argument("--spec-draft-n-max", type=int, help="draft tokens per step (max)")
    p.add_argument("--spec-draft-n-min", type=int, help="draft tokens per step (min)")
    return p


def build_params(args: argparse.Namespace):
    """``xllamacpp.CommonParams`` for the parsed flags.

    Raises:
        SystemExit: (code 2, one line on stderr) an invalid ``--spec-type`` or an unreadable
            ``--chat-template-file``.
    """
    import xllamacpp

    if args.model is None:
        from servelab.server.local import model_path

        args.model = str(model_path())
    p = xllamacpp.CommonParams()
    p.model.path = args.model
    p.hostnames = [args.host]
    p.port = args.port
    p.n_parallel = args.parallel
    p.n_ctx = args.ctx_size
    p.cpuparams.n_threads = args.threads
    p.endpoint_metrics = p.endpoint_slots = p.endpoint_props = True
    if args.alias:
        p.model_alias = {args.alias}
    if args.batch_size:
        p.n_batch = args.batch_size
    if args.ubatch_size:
        p.n_ubatch = args.ubatch_size
    p.swa_full = args.swa_full
    if args.chat_template_file:
        try:
            with open(args.chat_template_file, encoding="utf-8") as f:
                p.chat_template = f.read()
        except (OSError, UnicodeDecodeError) as exc:
            sys.exit(f"error: --chat-template-file {args.chat_template_file}: {exc}")
        p.use_jinja = True
    spec = p.speculative
    if args.model_draft:
        spec.draft.mparams.path = args.model_draft
    if args.spec_type:
        name = "COMMON_SPECULATIVE_TYPE_" + args.spec_type.upper().replace("-", "_")
        try:
            spec.types = [xllamacpp.common_speculative_type.__members__[name]]
        except KeyError:
            kinds = [m.removeprefix("COMMON_SPECULATIVE_TYPE_").lower().replace("_", "-") for m in xllamacpp.common_speculative_type.__members__]
            sys.exit(f"error: --spec-type {args.spec_type!r} is not one of {', '.join(k for k in kinds if k != 'count')}")
    if args.spec_draft_n_max is not None:
        spec.draft.n_max = args.spec_draft_n_max
    if args.spec_draft_n_min is not None:
        spec.draft.n_min = args.spec_draft_n_min
    return p


def main(argv: list[str] | None = None) -> None:
    """Start the server, print where it listens, and serve until SIGTERM or the parent's exit."""
    args = parser().parse_args(argv)
    parent = os.getppid()
    try:
        import xllamacpp
    except ImportError:
        sys.exit("error: the embedded server needs the 'local' extra: pip install 'servelab[local]'")
    try:
        params = build_params(args)
    except ServelabError as exc:
        sys.exit(f"error: {exc}")
    print(f"servelab.server.embedded: xllamacpp {xllamacpp.__version__}, model {args.model}", flush=True)
    server = xllamacpp.Server(params)  # returns once the model is loaded and the socket listens
    print(f"servelab.server.embedded: listening on {server.listening_address}", flush=True)
    idle = threading.Event()
    try:
        while os.getppid() == parent:  # a watchdog, not synchronisation: the parent's exit reparents us
            idle.wait(PARENT_POLL_S)
    except KeyboardInterrupt:  # started by hand in a terminal
        pass
    os._exit(0)  # the server's threads are native; nothing to flush


if __name__ == "__main__":
    main()
