"""Faults and hostile input: a malformed chunk fails one request, never the run; the parser never
raises on any bytes (property-based); secrets never reach what is stored or printed."""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from canned import delta, sse, streaming
from servelab.load.client import StreamParser
from servelab.values.records import RequestRecord
from test_client import send_one

MALFORMED = [
    b"null",
    b"[1,2]",
    b'{"choices": ["abc"]}',
    b'{"choices": [{"delta": {"content": 5}}]}',
    b'{"choices": [{"delta": "text"}]}',
    b'{"usage": 7}',
    b'{"usage": {"prompt_tokens": "lots"}}',
    b'{"usage": {"prompt_tokens": -3, "completion_tokens": 2}}',
    b'{"choices": [{"delta": {"content": "a"}, "finish_reason": 1}]}',
    b"\xff\xfe not utf-8",
]


def record() -> RequestRecord:
    return RequestRecord(index=0, concurrency=1, phase="measured", max_tokens=8, queued=0.0)


@pytest.mark.parametrize("payload", MALFORMED, ids=lambda p: p[:30].decode("utf-8", "replace"))
def test_each_malformed_chunk_shape_is_a_bad_chunk(payload):
    parser = StreamParser(record(), 0.0, 0.0)
    parser.feed(b'data: {"choices": [{"delta": {"content": "ok"}}]}\n\ndata: ' + payload + b"\n\n", 1.0)
    assert parser.error is not None and parser.error[0] == "bad_chunk", parser.error
    assert parser.parts == ["ok"]  # what came before is kept


def test_malformed_chunk_fails_its_request_over_http():
    parts = sse(delta("a")) [:1] + [b'data: {"choices": ["abc"]}\n\n'] + sse(delta("b", finish="stop"))
    rec, _ = asyncio.run(send_one(streaming(parts)))
    assert rec.status == "failed" and rec.error_kind == "bad_chunk" and "choices.0" in rec.error


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.sampled_from(
        ["choices", "delta", "content", "reasoning", "reasoning_content", "usage", "prompt_tokens", "completion_tokens",
         "finish_reason", "error", "prompt_tokens_details", "cached_tokens"]) | st.text(max_size=4), children, max_size=4),
    max_leaves=12,
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(values=st.lists(json_values, min_size=1, max_size=4), cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=6),
       junk=st.binary(max_size=16))  # fmt: skip
def test_parser_never_raises_on_any_values_and_byte_splits(values, cuts, junk):
    body = b"".join(b"data: " + json.dumps(v).encode() + b"\n\n" for v in values) + junk + b"\n\ndata: [DONE]\n\n"
    parser = StreamParser(record(), 0.0, 0.0)
    edges = sorted({min(c, len(body)) for c in cuts} | {0, len(body)})
    for a, b in zip(edges, edges[1:], strict=False):
        parser.feed(body[a:b], 1.0)
    rec = parser.record
    assert parser.error is None or parser.error[0] in ("bad_chunk", "stream_error")
    assert all(isinstance(p, str) for p in parser.parts + parser.reasoning_parts)
    for n in (rec.prompt_tokens, rec.output_tokens, rec.reasoning_tokens, rec.cached_prompt_tokens):
        assert n is None or (isinstance(n, int) and n >= 0)
    json.dumps(rec.model_dump())  # whatever was read can be written


# --- hostile input: one clear line, exit 2, no traceback ----------------------------------------


from typer.testing import CliRunner  # noqa: E402

from canned import canned_server  # noqa: E402
from servelab.cli import app  # noqa: E402
from servelab.server.endpoint import discover  # noqa: E402
from servelab.errors import ServelabError  # noqa: E402
from servelab.recipes import load_recipe, redact  # noqa: E402
from servelab.metrics.bootlog import parse_bootlog  # noqa: E402
from servelab.guards.redaction import mask_url, remember, scrub  # noqa: E402
from test_fault_suite import fault_server  # noqa: E402


def one_error_line(res, *needles: str) -> None:
    assert res.exit_code == 2, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), res.output
    assert all(n in lines[0] for n in needles), lines[0]


@pytest.mark.parametrize(("args", "needle"), [
    (["bench", "--url", "http://127.0.0.1:9/[/bold]"], "[/bold]"),
    (["bench", "--url", "http://127.0.0.1:9", "--rate", "nan"], "--rate"),
    (["bench", "--url", "http://127.0.0.1:9", "--rate", "1,inf"], "--rate"),
])  # fmt: skip
def test_bad_cli_values_are_one_line(args, needle):
    one_error_line(CliRunner().invoke(app, args), needle)


@pytest.mark.parametrize("text", [
    b"\xff\xfe\x00binary",  # not UTF-8
    b"a: &x [1, 2]\nb: *x\n",  # an alias
    b"a: &a [*a]\n",  # a self-referencing alias
    b"a: &a [1,1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n",
])  # fmt: skip
def test_binary_files_and_yaml_aliases_are_refused(tmp_path, text):
    path = tmp_path / "x.yaml"
    path.write_bytes(text)
    one_error_line(CliRunner().invoke(app, ["lint", str(path)]), str(path))
    one_error_line(CliRunner().invoke(app, ["bench", "--url", "http://127.0.0.1:9", "--mix", "m", "--workloads-file", str(path)]), str(path))
    one_error_line(CliRunner().invoke(app, ["bench", "--url", "http://127.0.0.1:9", "--dataset", str(path)]), str(path))


def test_sharegpt_turn_without_string_value_is_skipped(tmp_path):
    from servelab.workloads.datasets import load_dataset

    path = tmp_path / "d.jsonl"
    path.write_text('{"conversations": [{"from": "human", "value": 5}, {"from": "human", "value": "hi"}]}\n')
    assert load_dataset(path)[0].prompt == "hi"
    path.write_text('{"conversations": [{"from": "human", "value": ["x"]}]}\n')
    with pytest.raises(ServelabError, match="no human turn"):
        load_dataset(path)


@pytest.mark.parametrize("models", [{"data": ["abc"]}, {"data": [{"object": "model"}]}, {"data": [{"id": 5}]}])
def test_model_list_without_ids_is_one_line(models):
    async def main():
        async with canned_server({("GET", "/v1/models"): models}) as url:
            await discover(url)

    with pytest.raises(ServelabError, match="no model with an id"):
        asyncio.run(main())


@pytest.mark.parametrize("max_model_len", ["lots", float("inf"), [4096], -5, True])
def test_lying_max_model_len_is_ignored(max_model_len):
    async def main():
        async with canned_server({("GET", "/v1/models"): {"data": [{"id": "m", "owned_by": "vllm", "max_model_len": max_model_len}]}}) as url:
            return await discover(url)

    assert asyncio.run(main()).info.max_model_len is None


# --- secrets ------------------------------------------------------------------------------------


def test_secrets_are_masked_by_value_and_by_shape():
    remember("s3cr3t-value-123")
    assert scrub("server said: bad key s3cr3t-value-123") == "server said: bad key ***"
    assert redact(["serve", "--auth-header", "Bearer sk-abcdefghijklmnop", "--x", "sk-abcdefghijklmnop"]) == [
        "serve", "--auth-header", "Bearer ***", "--x", "***"]  # fmt: skip
    assert mask_url("http://user:pw@host:8000/v1") == "http://user:***@host:8000/v1"
    assert mask_url("sqlite:////tmp/runs.db") == "sqlite:////tmp/runs.db"  # nothing to mask: as given, not sqlite://tmp/runs.db
    assert mask_url("postgresql://u:pw@db/runs?sslmode=require") == "postgresql://u:***@db/runs?sslmode=require"


def test_api_key_echoed_by_the_server_and_url_credentials_never_reach_disk(tmp_path, monkeypatch):
    """A server that echoes the bearer token in its error body; a URL with user:password. Nothing
    written (records, run.json) holds either, and the table title shows the URL masked."""
    key = "sk-echoed-secret-0123456789"

    async def models(request):
        from aiohttp import web

        return web.json_response({"data": [{"id": "m", "owned_by": "vllm", "max_model_len": 4096}]})

    async def chat(request):
        from aiohttp import web

        return web.json_response({"error": {"message": f"invalid header {request.headers.get('Authorization')}"}}, status=400)

    async def tokenize(request):  # one token per UTF-8 byte: consistent with /detokenize
        from aiohttp import web

        body = await request.json()
        text = body.get("prompt") or "".join(m["content"] for m in body.get("messages", []))
        return web.json_response({"tokens": list(text.encode()), "count": len(text.encode())})

    async def detokenize(request):
        from aiohttp import web

        return web.json_response({"prompt": bytes((await request.json())["tokens"]).decode("utf-8", "replace")})

    routes = {("GET", "/v1/models"): models, ("POST", "/v1/chat/completions"): chat, ("POST", "/tokenize"): tokenize,
              ("POST", "/detokenize"): detokenize}  # fmt: skip

    monkeypatch.setenv("MY_KEY", key)

    async def main(url_creds: str, key_env: str, out: str):
        async with canned_server(routes) as url:
            args = ["bench", "--url", url.replace("http://", url_creds), "--api-key-env", key_env, "--concurrency", "1", "--output", str(tmp_path / out)]
            return await asyncio.to_thread(CliRunner().invoke, app, args)

    for creds, env, out in (("http://", "MY_KEY", "key"), ("http://alice:hunter2pw@", "NO_SUCH_VARIABLE", "creds")):
        res = asyncio.run(main(creds, env, out))
        assert res.exit_code == 2 and "failed (http_400)" in res.output and key not in res.output and "hunter2pw" not in res.output, res.output
        written = "".join(p.read_text(errors="replace") for p in (tmp_path / out).rglob("*") if p.is_file())
        assert "invalid header" in written and key not in written and "hunter2pw" not in written
    assert "alice:***@" in written
    res = asyncio.run(main("http://alice:hunter2pw@", "MY_KEY", "both"))
    assert res.exit_code == 2 and "give one of them" in res.output and "hunter2pw" not in res.output



def test_a_host_that_looks_like_an_ssh_option_is_refused(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("name: r\nengine: vllm\ncommand: [vllm, serve, m]\ncluster:\n  hosts: [spark-1, '-oProxyCommand=touch x']\n")
    with pytest.raises(ServelabError, match=r"line 5: cluster.hosts: '-oProxyCommand=touch x' is not a host name"):
        load_recipe(path)


@pytest.mark.parametrize(("tokenize", "detokenize"), [
    ({"tokens": [1, 2, 3]}, [1]),
    ({"tokens": [1, 2, 3]}, {"prompt": 5}),
    ({"tokens": [1, 2, 3]}, "text"),
])  # fmt: skip
def test_a_lying_tokenizer_endpoint_is_one_line(tmp_path, tokenize, detokenize):
    from aiohttp import web

    async def models(request):
        return web.json_response({"data": [{"id": "m", "owned_by": "vllm", "max_model_len": 4096}]})

    routes = {("GET", "/v1/models"): models, ("POST", "/tokenize"): tokenize, ("POST", "/detokenize"): detokenize}

    async def main():
        async with canned_server(routes) as url:
            return await asyncio.to_thread(CliRunner().invoke, app, ["bench", "--url", url, "--output", str(tmp_path / "run")])

    one_error_line(asyncio.run(main()), "/detokenize answered something that is not a tokenizer answer")


SECRET = st.text(alphabet="ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789", min_size=8, max_size=30)


@given(secret=SECRET, user=st.sampled_from(["", "alice", "a.b"]), at=st.booleans())
def test_url_passwords_and_secret_query_values_are_masked_by_parsing(secret, user, at):
    password = secret[:4] + "@" + secret[4:] if at else secret  # '@' inside a password
    for text in (f"http://{user}:{password}@host:8000/v1", f"see https://h.example/v1?model=m&api_key={secret}&x=1",
                 f"{{'api_key': '{secret}', 'hf_token': '{secret}'}}", f"API_KEY={secret} serve", f"--hf-token={secret}",
                 json.dumps({"metrics_url": f"http://{user}:{password}@h/metrics?token={secret}"})):  # fmt: skip
        masked = scrub(text)
        assert secret not in masked and secret[4:] not in masked, (text, masked)
    assert mask_url(f"http://{user}:{password}@host/x").startswith(f"http://{user}:***@host")


def test_secret_named_boot_log_arguments_are_masked():
    log = "INFO 11-20 10:00:00 [utils.py:1] non-default args: {'model': 'Qwen/Qwen3-8B', 'api_key': ['k-CANARY-123456'], 'hf_token': 'plain-CANARY-tok'}\n"
    facts = parse_bootlog(log)
    assert facts.non_default_args["model"] == "Qwen/Qwen3-8B"
    assert "CANARY" not in json.dumps(facts.non_default_args)


def test_canary_secrets_reach_no_byte_written_or_printed(tmp_path, monkeypatch):
    """URL credentials (an empty user, '@' in the password), a secret query value, an API key the
    server echoes back, and a boot log with api_key and hf_token: nothing written (the run
    directory, the runs database) or printed holds any of them."""
    canaries = ["CANARYpw@rd42", "CANARYquery77", "sk-CANARYkey0123456789", "CANARYbootkey9", "hf_CANARYhftoken55"]
    monkeypatch.setenv("SERVELAB_DB", str(tmp_path / "runs.db"))
    monkeypatch.setenv("MY_KEY", canaries[2])
    log = tmp_path / "server.log"
    log.write_text(f"INFO 11-20 10:00:00 [utils.py:1] non-default args: {{'model': 'm', 'api_key': ['{canaries[3]}'], 'hf_token': '{canaries[4]}'}}\n")
    with fault_server("--echo", "4") as url:
        creds = url.replace("http://", f"http://:{canaries[0]}@")
        res = CliRunner().invoke(app, ["bench", "--url", creds, "--concurrency", "2", "--requests", "8", "--warmup", "0", "--input-tokens", "32",
                                       "--output-tokens", "4", "--server-log", str(log), "--output", str(tmp_path / "run")])  # fmt: skip
        res2 = CliRunner().invoke(app, ["bench", "--url", url + f"/?api_key={canaries[1]}", "--api-key-env", "MY_KEY", "--concurrency", "1",
                                        "--requests", "4", "--warmup", "0", "--output-tokens", "4", "--output", str(tmp_path / "run2")])  # fmt: skip
    printed = res.output + res2.output
    written = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and p != log)
    for canary in canaries:
        assert canary not in printed and canary.encode() not in written, canary
    assert "Traceback" not in printed and (tmp_path / "run" / "run.json").is_file()


