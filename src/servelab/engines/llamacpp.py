"""llama.cpp's ``llama-server``: everything servelab knows about it (the engine interface: ``servelab.engines.base``).

Facts from ../shared/reference/server-facts.md §5: discovery (``owned_by: "llamacpp"``, or a
``/props`` that answers; the per-slot context is ``/props`` → ``default_generation_settings.n_ctx``,
which ``-fit`` and ``--parallel`` change, so it is read, never assumed; version in ``build_info``),
``/tokenize`` ``{"content", "add_special"}`` and ``/apply-template``, request fields
(``cache_prompt: false`` for a cold cache), its connection behaviour, its Prometheus names
(``llamacpp:*``, only with ``--metrics``) and its startup log (fixtures in tests/fixtures/bootlogs/INDEX.yaml).

Startup-log line shapes across builds:

- 2025–2026 text: ``0.01.744.861 I srv  load_model: …`` (time since start, level letter), sometimes
  after a ``[pid]`` prefix;
- 2024–2025 server logs in text form: ``INFO [    init] new slot | tid="…" timestamp=… id_slot=0 n_ctx_slot=1024``;
- 2024 ``--log-format json`` (the default then): one object per line, ``{"tid": …, "timestamp": …,
  "level": "INFO", "function": "init", "line": 123, "msg": "new slot", "id_slot": 0, "n_ctx_slot": 1024}``
  (``message`` instead of ``msg`` in early 2024); read as ``new slot | id_slot=0 n_ctx_slot=1024``;
- library lines without a prefix (``llama_context: n_ctx = 4096``, ``llama_kv_cache: size = …``).

KV capacity: ``kv_cache_tokens`` is the cache's cells (the context all slots share: ``n_ctx``);
``max_model_len`` is one slot's context; ``slots`` is ``--parallel``.
"""

from __future__ import annotations

import re

from servelab.guards import jsonfile
from servelab.values.argv import flag_value, has_flag
from servelab.engines.base import Engine, Gauges, JsonGet, JsonPost, LintFinding, positive_int
from servelab.engines.bootfacts import BootFacts, Rule, set_fact, set_facts
from servelab.engines.counters import Scrapes, ServerStats
from servelab.errors import ServelabError

NAME = "llama.cpp"
PREFIX = re.compile(r"^(?:\[\d+\] )?(\d+)\.(\d\d)\.(\d{3})\.(\d{3}) ([IWEDT]) (.*)$")
SERVER_TEXT = re.compile(r"^(INFO|WARN|ERR|VERB|DEBUG)\s+\[\s*(\w+)\]\s+(.*)$")
JSON_META = ("tid", "timestamp", "level", "function", "line", "msg", "message")
LEVELS = {"W": "WARNING", "E": "ERROR", "WARN": "WARNING", "ERR": "ERROR"}


def strip_prefix(line: str) -> tuple[str, float | None, str] | None:
    """(message, timestamp in s or None, level) of a llama-server log line, or None if it is not one."""
    if m := PREFIX.match(line):
        ts = int(m.group(1)) * 60 + int(m.group(2)) + int(m.group(3)) / 1e3 + int(m.group(4)) / 1e6
        return m.group(6), ts, LEVELS.get(m.group(5), "INFO")
    if m := SERVER_TEXT.match(line):
        ts = re.search(r"\btimestamp=(\d+)", m.group(3))
        return m.group(3), float(ts.group(1)) if ts else None, LEVELS.get(m.group(1), "INFO")
    if line.startswith("{") and '"function"' in line:
        try:
            obj = jsonfile.loads(line, "a log line")
        except ServelabError:
            return None
        if not isinstance(obj, dict) or not isinstance(obj.get("msg", obj.get("message")), str):
            return None
        fields = " ".join(f"{k}={v}" for k, v in obj.items() if k not in JSON_META)
        ts = obj.get("timestamp")
        return f"{obj.get('msg', obj.get('message'))} | {fields}", float(ts) if isinstance(ts, int | float) else None, LEVELS.get(str(obj.get("level")), "INFO")
    return None


def _slots(f: BootFacts, m: re.Match) -> None:
    f.slots, f.max_model_len = int(m.group(1)), int(m.group(2))
    f.kv_cache_tokens = f.kv_cache_tokens or f.slots * f.max_model_len


def _new_slot(f: BootFacts, m: re.Match) -> None:
    """``new slot | … n_ctx_slot=N``: one slot's context; the slots share the cache equally."""
    f.max_model_len = f.max_model_len or int(m.group(1))
    if f.slots and f.kv_cache_tokens is None:
        f.kv_cache_tokens = f.slots * f.max_model_len


def _listed_slot(f: BootFacts, m: re.Match) -> None:
    """``-> Slot 3 - max context: 512`` (one line per slot): slots = highest id + 1."""
    f.slots = max(f.slots or 0, int(m.group(1)) + 1)
    f.max_model_len = f.max_model_len or int(m.group(2))


def _build(f: BootFacts, m: re.Match) -> None:
    f.version = f.version or f"b{m.group(1)} ({m.group(2)})"


RULES: list[Rule] = [
    Rule(re.compile(r"build(?:_info)?: (b?\d+[\w\-]*(?: \(\w+\))?)"), set_fact("version"), "b4000–b11549 (text)"),
    Rule(re.compile(r"build info \|.*?\bbuild=(\d+) commit=\"?(\w+)"), _build, "b2000–b3900 (server text/JSON log)"),
    Rule(re.compile(r"loading model '([^']+)'"), set_fact("model"), "b5000–b11549"),
    Rule(re.compile(r"initializing, n_slots = (\d+), n_ctx_slot = (\d+)"), _slots, "b11549 (2026-10)"),
    Rule(re.compile(r"initializing slots(?:, n_slots = | \|.*?\bn_slots=)(\d+)"), set_fact("slots", lambda m: int(m.group(1))), "b2500–b3900 (server log), 2025–2026 text"),
    Rule(re.compile(r"new slot \|.*?\bn_ctx_slot=(\d+)"), _new_slot, "b2500–b3900 (server text/JSON log)"),
    Rule(re.compile(r"-> Slot (\d+) - max context: (\d+)"), _listed_slot, "b1900–b2300 (early 2024)"),
    Rule(re.compile(r"\bn_seq_max\s*=\s*(\d+)"), set_fact("slots", lambda m: int(m.group(1))), "b4900–b11549 (llama_context)"),
    Rule(re.compile(r"\bn_ctx_(?:per_seq|seq)\s*(?:=\s*|\()(\d+)"), set_fact("max_model_len", lambda m: int(m.group(1))), "b4200–b11549"),
    Rule(re.compile(r"^(?:llama_new_context_with_model|llama_init_from_model|llama_context|create_memory):\s+n_ctx\s*=\s*(\d+)"),
         set_fact("kv_cache_tokens", lambda m: int(m.group(1))), "b1500–b11549"),  # fmt: skip
    Rule(re.compile(r"llama_kv_cache_init: kv_size = (\d+)"), set_fact("kv_cache_tokens", lambda m: int(m.group(1))), "b4300–b4800 (early 2025)"),
    Rule(re.compile(r"creating non-SWA KV cache, size = (\d+) cells"), set_fact("kv_cache_tokens", lambda m: int(m.group(1))), "b5600–b6000 (iSWA)"),
    # the whole cache over all devices (the per-device "KV buffer size" lines before it are parts); with
    # sliding-window layers (iSWA) the non-SWA cache prints first and is the one kept
    Rule(re.compile(r"^llama_kv_cache(?:_unified)?: size =\s*([\d.]+) MiB \(\s*(\d+) cells"),
         set_facts(kv_cache_gib=lambda m: float(m.group(1)) / 1024, kv_cache_tokens=lambda m: int(m.group(2))), "b5600–b11549"),  # fmt: skip
    Rule(re.compile(r"KV self size\s*=\s*([\d.]+) MiB"), set_fact("kv_cache_gib", lambda m: float(m.group(1)) / 1024), "b1500–b5500"),
    Rule(re.compile(r"model buffer size =\s*([\d.]+) MiB"), set_fact("weights_gib", lambda m: float(m.group(1)) / 1024), "b3000–b11549"),
    Rule(re.compile(r"llama_server: model loaded|main: model loaded|^model loaded \|"), lambda f, m: None, "all"),
]
READY = re.compile(r"listening on|server is listening on|HTTP server listening")


class LlamaCpp(Engine):
    """llama.cpp's ``llama-server`` (also the embedded default, ``servelab.server.local``)."""

    name = NAME
    title = "llama.cpp"
    owned_by = ("llamacpp",)
    exact_output_length = True  # honours ignore_eos (it has no min_tokens)
    context_limit = "per slot (llama.cpp -c / --parallel)"
    gauges = Gauges(("llamacpp:requests_processing",), ("llamacpp:requests_deferred",), ("llamacpp:kv_cache_usage_ratio",))
    spec_decode_prefix = "llamacpp:spec_decode_num_"
    rules = RULES
    ready = READY
    strip_prefix = staticmethod(strip_prefix)
    launchers = (("llama-server",), ("servelab-llama-server",))  # llama.cpp tools/server; the embedded xllamacpp launcher
    ready_path = "/health"  # 503 "Loading model", then 200 (server-facts.md, llama.cpp endpoints)
    ready_timeout_s = 300.0
    default_port = 8080

    def point_problem(self, argv: list[str], request_tokens: int) -> str | None:
        """llama-server splits ``--ctx-size`` evenly over its ``--parallel`` slots (tools/server/server.cpp,
        n_ctx_slot = n_ctx / n_parallel): a request longer than one slot's share fails."""
        slots, ctx = flag_value(argv, "--parallel", "-np"), flag_value(argv, "--ctx-size", "-c")
        if slots and ctx and slots.isdecimal() and ctx.isdecimal() and int(slots) >= 1 and int(ctx) // int(slots) < request_tokens:
            return f"--ctx-size {ctx} over --parallel {slots} slots gives each {int(ctx) // int(slots):,} tokens, fewer than a request's {request_tokens:,}"
        return None

    async def recognise(self, get: JsonGet) -> bool:
        """Builds whose model card names no owner: ``GET /props`` answers with an object."""
        return isinstance(await get("/props"), dict)

    async def describe(self, get: JsonGet, card: dict) -> tuple[str | None, int | None]:
        """Version: ``/props`` → ``build_info``; context per request: ``/props`` →
        ``default_generation_settings.n_ctx`` (one slot's), else the card's ``max_model_len``."""
        _, context = await super().describe(get, card)
        props = await get("/props")
        if not isinstance(props, dict):
            return None, context
        settings = props.get("default_generation_settings")
        n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
        version = props.get("build_info")
        return (str(version) if version else None), (positive_int(n_ctx) or context)

    def hidden_size(self, card: dict) -> int | None:
        """The card's ``meta.n_embd`` (llama-server's /v1/models: the GGUF's embedding length)."""
        meta = card.get("meta")
        return positive_int(meta.get("n_embd")) if isinstance(meta, dict) else None

    def tokenize_body(self, text: str) -> dict:
        """``{"content", "add_special"}``."""
        return {"content": text, "add_special": False}

    async def chat_count(self, post: JsonPost, model: str, messages: list[dict], extra: dict) -> int | None:
        """``POST /apply-template``, then ``/tokenize`` with special tokens (BOS) parsed and added."""
        prompt = (await post("/apply-template", {"messages": messages, **extra}))["prompt"]
        return len((await post("/tokenize", {"content": prompt, "add_special": True, "parse_special": True}))["tokens"])

    def request_fields(self, *, max_tokens: int, ignore_eos: bool, cold: bool) -> dict:
        """``ignore_eos``; for a cold prefix cache ``cache_prompt: false``, because llama.cpp reuses
        any common token prefix of a slot (the chat template's first tokens), not only whole blocks."""
        return {**({"ignore_eos": True} if ignore_eos else {}), **({"cache_prompt": False} if cold else {})}

    def connector_options(self) -> dict:
        """One connection per request: llama-server closes connections although it answers
        "Keep-Alive: timeout=5" (after every streamed response, and idle ones early), so a pooled
        connection fails the next POST ("Can not write request body")."""
        return {"force_close": True}

    def server_counters(self, s: Scrapes, stats: ServerStats) -> None:
        """``llamacpp:prompt_tokens_total`` counts computed tokens (cached excluded): prompt tokens
        = computed + ``llamacpp:prompt_tokens_cached_total``; generated = ``tokens_predicted_total``."""
        computed = s.delta("llamacpp:prompt_tokens_total")
        cached = s.delta("llamacpp:prompt_tokens_cached_total")
        stats.prompt_tokens = None if computed is None else computed + (cached or 0)
        stats.cached_prompt_tokens = cached
        stats.prefix_cache_hit_rate = s.ratio(cached, stats.prompt_tokens)
        stats.generation_tokens = s.delta("llamacpp:tokens_predicted_total")

    def check_recipe(self, tensor_parallel: int, cluster_backend: str | None) -> tuple[str, str] | None:
        """No tensor parallelism (``--split-mode`` spreads layers instead), no clusters."""
        if tensor_parallel > 1:
            return "tensor_parallel", "llama.cpp has no tensor parallelism; give --split-mode in the command instead"
        return super().check_recipe(tensor_parallel, cluster_backend)

    def lint_rules(self, argv: list[str], concurrencies: list[int]) -> list[LintFinding]:
        """llama-metrics: without ``--metrics`` there is no ``/metrics``."""
        if has_flag(argv, "--metrics"):
            return []
        return [LintFinding(
            "llama-metrics", "warning", "llama-server runs without --metrics",
            "llama-server serves /metrics only with --metrics; without it the runs have no server-side counters "
            "(prompt/generated tokens, queue, KV use) to check the client's numbers against.",
        )]  # fmt: skip


ENGINE = LlamaCpp()
