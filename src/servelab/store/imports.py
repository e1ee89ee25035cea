"""Runs for the database: servelab's run directories, and result files of other tools.

- servelab: a run directory (``run.json``), or any folder holding run directories (sweeps, suites,
  grids). Its id is derived from when, where and what it measured, so a resumed run replaces its
  earlier import.
- ``vllm bench serve --save-result`` JSON (vLLM's ``vllm/benchmarks/serve.py``): one level per
  file, labelled by ``max_concurrency`` (or the request rate); TTFT / TPOT / ITL / E2E from its
  ``median_*_ms`` (p50), ``p99_*_ms`` and ``mean_*_ms``; decode tok/s per request p50 = 1000 ÷
  median TPOT; the engine is what its ``backend`` names, and the API (``traffic``: completions or
  chat) is the one that backend sends to.
- llama-benchy 0.4.0 ``--format json`` or ``--format csv``: one level per test (pp, tg, depth,
  concurrency); output tok/s = tg t/s (total) mean, decode tok/s per request = tg t/s (req) mean,
  TTFT = e2e_ttft mean. llama-benchy reports means only, so its levels fill the ``*_mean`` columns.

Foreign files get the sha256 of their content as id, so importing one twice changes nothing.
Every reader checks the whole file before anything is stored; a malformed or foreign file is one
error naming the file and what is wrong.
"""

from __future__ import annotations

import hashlib
import math
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from servelab.guards import jsonfile
from servelab.errors import ServelabError
from servelab.store.grid import llama_benchy_rows, read_llama_benchy
from servelab.guards.redaction import dump
from servelab.store.results import RunResult, read_document
from servelab.store.database import Level, Run
from servelab.guards.files import read_bytes


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


def _hash(*parts: object) -> str:
    return hashlib.sha256("|".join(str(p) for p in parts).encode()).hexdigest()[:16]


def from_run(run: RunResult, origin: Path) -> Run:
    """A servelab run as a database row. Hardware: the ``--hardware`` profile of the run's ceiling,
    else the client's host name for a server on loopback, else "unknown"."""
    host = urlparse(run.endpoint.url).hostname
    hardware = run.ceiling.hardware if run.ceiling else (run.environment.host if host in ("127.0.0.1", "localhost", "::1") else "unknown")
    levels = [
        Level(
            position=i, label=f"{lv.rate_rps:g} req/s" if lv.rate_rps is not None else f"{lv.concurrency} session{'s' * (lv.concurrency != 1)}" if lv.sessions else f"c={lv.concurrency}",
            concurrency=lv.concurrency, rate_rps=lv.rate_rps, ok=lv.ok, failed=lv.failed_requests,
            output_tok_s=lv.output_throughput_tok_s, request_rps=lv.request_throughput_rps,
            ttft_ms_p50=lv.ttft_ms.p50, ttft_ms_p99=lv.ttft_ms.p99, ttft_ms_mean=lv.ttft_ms.mean,
            tpot_ms_p50=lv.tpot_ms.p50, tpot_ms_p99=lv.tpot_ms.p99, tpot_ms_mean=lv.tpot_ms.mean,
            itl_ms_p50=lv.itl_ms.p50, itl_ms_p99=lv.itl_ms.p99, e2e_ms_p50=lv.e2e_ms.p50, e2e_ms_p99=lv.e2e_ms.p99,
            e2e_ms_mean=lv.e2e_ms.mean, decode_tok_s_p50=lv.decode_tok_s.p50, decode_tok_s_mean=lv.decode_tok_s.mean,
            goodput_rps=lv.slo.goodput_rps if lv.slo else None, goodput_tok_s=lv.slo.goodput_tok_s if lv.slo else None,
            slo_attainment=lv.slo.attainment if lv.slo else None,
        )
        for i, lv in enumerate(run.levels)
    ]  # fmt: skip
    return Run(
        id=_hash("servelab", run.started_at, run.environment.host, run.endpoint.url, run.endpoint.model),
        source="servelab", origin=str(origin.resolve()), imported_at=_now(), started_at=run.started_at, status=run.status,
        model=run.endpoint.model, engine=run.endpoint.engine, engine_version=run.endpoint.engine_version, hardware=hardware,
        host=run.environment.host, recipe=run.recipe.name if run.recipe else None, variant=run.recipe.variant if run.recipe else None,
        input_tokens=run.load.input_tokens, output_tokens=run.load.output_tokens, prefix_cache=run.load.prefix_cache,
        traffic=run.load.traffic, document=dump(run), levels=levels,
    )  # fmt: skip


def _float(data: dict, key: str, path: Path) -> float | None:
    value = data.get(key)
    if value is None or value in ("inf", "Infinity"):  # vLLM writes request_rate "inf" for "all at once"
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
        raise ServelabError(f"{path}: '{key}' is {value!r}, not a number ≥ 0")
    return float(value) if math.isfinite(value) else None


# vllm bench serve's --backend (or endpoint_type) → the API it sent to (vLLM vllm/benchmarks/lib/endpoint_request_func.py,
# ASYNC_REQUEST_FUNCS: "vllm" and "openai" post to /v1/completions, "openai-chat" to /v1/chat/completions).
VLLM_BENCH_API = {"vllm": "completions", "openai": "completions", "openai-chat": "chat"}


def from_vllm_bench(data: dict, path: Path, digest: str) -> Run:
    """A ``vllm bench serve --save-result`` file as a run with one level (see the module docstring).

    Raises:
        ServelabError: a required key is missing or not a number.
    """
    for key in ("model_id", "completed", "output_throughput", "median_ttft_ms"):
        if key not in data:
            raise ServelabError(f"{path}: looks like a vllm bench serve result but has no '{key}'")
    def num(key: str) -> float | None:
        return _float(data, key, path)

    conc, rate, tpot, completed = num("max_concurrency"), num("request_rate"), num("median_tpot_ms"), int(num("completed") or 0)
    level = Level(
        position=0, label=f"c={conc:g}" if conc else (f"{rate:g} req/s" if rate else "all at once"), concurrency=int(conc or 0),
        rate_rps=rate, ok=completed, failed=int(num("failed") or 0), output_tok_s=num("output_throughput"), request_rps=num("request_throughput"),
        ttft_ms_p50=num("median_ttft_ms"), ttft_ms_p99=num("p99_ttft_ms"), ttft_ms_mean=num("mean_ttft_ms"),
        tpot_ms_p50=tpot, tpot_ms_p99=num("p99_tpot_ms"), tpot_ms_mean=num("mean_tpot_ms"), itl_ms_p50=num("median_itl_ms"), itl_ms_p99=num("p99_itl_ms"),
        e2e_ms_p50=num("median_e2el_ms"), e2e_ms_p99=num("p99_e2el_ms"), e2e_ms_mean=num("mean_e2el_ms"), decode_tok_s_p50=1000.0 / tpot if tpot else None,
    )  # fmt: skip
    try:
        started = datetime.strptime(str(data.get("date")), "%Y%m%d-%H%M%S").isoformat()
    except ValueError:
        started = None
    backend = str(data.get("backend") or data.get("endpoint_type") or "")
    lengths = [data.get("total_input_tokens"), data.get("total_output_tokens")]
    return Run(
        id=digest, source="vllm-bench-serve", origin=str(path.resolve()), imported_at=_now(), started_at=started, status="complete",
        model=str(data["model_id"]), engine="vllm" if backend in ("vllm", "openai", "openai-chat", "") else backend, engine_version=None,
        hardware="unknown", host=None, recipe=None, variant=data.get("label"),
        input_tokens=round(lengths[0] / completed) if isinstance(lengths[0], int) and completed else None,
        output_tokens=round(lengths[1] / completed) if isinstance(lengths[1], int) and completed else None,
        prefix_cache=None, traffic=VLLM_BENCH_API.get(backend), document=jsonfile.dumps({k: v for k, v in data.items() if not isinstance(v, list)}), levels=[level],
    )  # fmt: skip


def _mean(entry: dict, key: str, path: Path) -> float | None:
    value = entry.get(key)
    if value is None:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("mean"), (int, float)) or value["mean"] < 0:
        raise ServelabError(f"{path}: llama-benchy '{key}' is not {{mean ≥ 0, std, values}}")
    return float(value["mean"])


def from_llama_benchy_json(data: dict, path: Path, digest: str) -> Run:
    """A llama-benchy ``--format json`` file as a run with one level per test.

    Raises:
        ServelabError: a test entry lacks its sizes or figures.
    """
    levels = []
    for i, b in enumerate(data["benchmarks"]):
        try:
            pp, tg, depth, conc = int(b["prompt_size"]), int(b["response_size"]), int(b.get("context_size", 0)), int(b["concurrency"])
            runs = len(b["tg_throughput"]["values"])
        except (KeyError, TypeError, ValueError):
            raise ServelabError(f"{path}: llama-benchy test {i + 1} lacks prompt_size, response_size, concurrency or tg_throughput") from None
        levels.append(Level(
            position=i, label=f"pp{pp} tg{tg}{f' @ d{depth}' if depth else ''} (c{conc})", concurrency=conc, rate_rps=None,
            ok=runs * conc, failed=0, output_tok_s=_mean(b, "tg_throughput", path), decode_tok_s_mean=_mean(b, "tg_req_throughput", path),
            ttft_ms_mean=_mean(b, "e2e_ttft", path),
        ))  # fmt: skip
    doc = {**data, "benchmarks": [{k: v for k, v in b.items() if "over_time" not in k} for b in data["benchmarks"]]}
    try:  # "2026-11-21 08:48:00Z" → ISO 8601, so runs of every source sort together
        started = datetime.strptime(str(data.get("timestamp")), "%Y-%m-%d %H:%M:%SZ").replace(tzinfo=timezone.utc).isoformat()
    except ValueError:
        started = None
    return Run(
        id=digest, source="llama-benchy", origin=str(path.resolve()), imported_at=_now(), started_at=started,
        status="complete", model=str(data.get("model") or "unknown"), engine="unknown", engine_version=None, hardware="unknown", host=None,
        recipe=None, variant=None, input_tokens=None, output_tokens=None, prefix_cache="warm" if data.get("prefix_caching_enabled") else None,
        document=jsonfile.dumps(doc), levels=levels,
    )  # fmt: skip


def from_llama_benchy_table(path: Path, digest: str) -> Run:
    """A llama-benchy ``--format csv`` (or Markdown table) file as a run with one level per cell.

    Raises:
        ServelabError: not a llama-benchy table, or a test name it cannot read.
    """
    try:
        cells = read_llama_benchy(path)
        col, rows = llama_benchy_rows(path)
    except ValueError as exc:
        raise ServelabError(str(exc)) from None
    model = rows[0][col["model"]] if rows and "model" in col else "unknown"
    levels = [
        Level(position=i, label=f"pp{c.cell.pp} tg{c.cell.tg}{f' @ d{c.cell.depth}' if c.cell.depth else ''} (c{c.cell.concurrency})",
              concurrency=c.cell.concurrency, rate_rps=None, ok=0, failed=0, output_tok_s=c.tg_total, decode_tok_s_mean=c.tg_req_mean,
              ttft_ms_mean=c.ttft_ms_mean)
        for i, c in enumerate(cells)
    ]  # fmt: skip
    return Run(
        id=digest, source="llama-benchy", origin=str(path.resolve()), imported_at=_now(), started_at=None, status="complete", model=model,
        engine="unknown", engine_version=None, hardware="unknown", host=None, recipe=None, variant=None, input_tokens=None,
        output_tokens=None, prefix_cache=None, document=jsonfile.dumps({"table": path.read_text(encoding="utf-8")}), levels=levels,
    )  # fmt: skip


def read_results(path: Path) -> list[Run]:
    """Every run in ``path`` (:func:`_read_results`), each figure checked (``Level``'s validator):
    one line naming the file at fault.

    Raises:
        ServelabError: as :func:`_read_results`, or a figure that is not one (NaN, negative …).
    """
    try:
        return _read_results(path)
    except ServelabError as exc:
        raise exc if str(exc).startswith(str(path)) else ServelabError(f"{path}: {exc}") from None


def _read_results(path: Path) -> list[Run]:
    """Every run in ``path``: a run directory, a folder of them (any depth), or a result file of
    vllm bench serve (JSON) or llama-benchy (JSON, CSV, Markdown).

    Raises:
        ServelabError: the path does not exist, holds no run, or a file is malformed or of a
            kind servelab does not read (one line naming the file).
    """
    if path.is_dir():
        dirs = [path] if (path / "run.json").is_file() else sorted(p.parent for p in path.rglob("run.json"))
        if not dirs:
            raise ServelabError(f"{path}: no servelab run in it (no run.json)")
        return [from_run(read_document(RunResult, d / "run.json"), d) for d in dirs]
    raw = read_bytes(path, "import")
    digest = hashlib.sha256(raw).hexdigest()[:16]
    if path.suffix.lower() in (".csv", ".md"):
        return [from_llama_benchy_table(path, digest)]
    data: Any = jsonfile.loads(raw, str(path), "not JSON, CSV or Markdown: servelab reads run directories, vllm bench serve JSON and llama-benchy JSON/CSV")
    if isinstance(data, dict) and "schema_version" in data and "levels" in data:
        if path.name != "run.json":  # its records are the run directory's records.jsonl, which a renamed copy has lost
            raise ServelabError(f"{path}: a servelab run.json under another name; give its run directory (run.json with its records.jsonl)")
        return [from_run(read_document(RunResult, path), path.parent)]
    if isinstance(data, dict) and "model_id" in data and "output_throughput" in data:
        return [from_vllm_bench(data, path, digest)]
    if isinstance(data, dict) and isinstance(data.get("benchmarks"), list) and "version" in data:
        return [from_llama_benchy_json(data, path, digest)]
    raise ServelabError(f"{path}: JSON of an unknown kind; servelab reads its run.json, vllm bench serve --save-result and llama-benchy --format json")
