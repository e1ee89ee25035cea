"""One load model: every command's load and target options are generated from
``servelab.settings`` (flag, default, bounds, help), so none can be missing or differ between
commands; the recipe's bench section is the same model and a run stores its dump."""

from __future__ import annotations

import json

import pytest
import typer
from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.cli import app
from servelab.errors import ServelabError
from servelab.cli.bind import _cli_default
from servelab.recipes import Recipe
from servelab.settings import Load, Target, cli_facts
from test_fault_suite import bench, fault_server

SEARCHED = {"concurrency", "workers", "rates", "sessions", "repeats", "time_scale", "closed_loop"}  # capacity searches these
# The load and target settings each command must offer, by field name.
EXPECTED: dict[str, tuple[set[str], set[str]]] = {
    "bench": (set(Load.model_fields), set(Target.model_fields)),
    "capacity": (set(Load.model_fields) - SEARCHED, set(Target.model_fields)),
    "suite": ({"tokenizer", "api_key_env", "workloads_file", "ignore_eos", "slo", "request_timeout_s", "seed"}, set(Target.model_fields)),
    "grid": ({"tokenizer", "api_key_env", "seed", "slo", "request_timeout_s"}, set(Target.model_fields)),
    "serve-local": (set(), {"parallel", "ctx_size", "llama_server"}),
}
# A command's own option under a setting's flag, with another meaning (and why it is not the setting).
OWN = {
    ("capacity", "--sessions"): "a switch: search the number of sessions instead of streams",
    ("capacity", "--repeats"): "extra measurements of the boundary, not of every level",
    ("capacity", "--closed-loop"): "the other side of its --open-loop switch: search streams, not rates",
    ("grid", "--concurrency"): "a grid dimension, default 1 as llama-benchy",
}


def _options(name: str) -> dict:
    """A command's options by each of their flags (``--x`` and ``--no-x`` of a switch alike)."""
    command = typer.main.get_command(app).commands[name]
    return {flag: p for p in command.params if p.param_type_name == "option" for flag in (*p.opts, *p.secondary_opts)}


def test_no_command_has_a_flag_twice():
    for name, command in typer.main.get_command(app).commands.items():
        flags = [flag for p in command.params if p.param_type_name == "option" for flag in (*p.opts, *p.secondary_opts)]
        assert len(flags) == len(set(flags)), f"{name}: {sorted(f for f in flags if flags.count(f) > 1)}"


def _flag(model: type, field: str) -> str:
    return cli_facts(model, field)["flag"].split("/")[0]


def test_each_command_offers_its_settings_with_the_models_default_and_help():
    for command, (load_fields, target_fields) in EXPECTED.items():
        options = _options(command)
        for model, fields in ((Load, load_fields), (Target, target_fields)):
            for field in fields:
                flag = _flag(model, field)
                assert flag in options, f"{command} has no {flag}"
                opt = options[flag]
                assert opt.default == _cli_default(model, field), f"{command} {flag}: default {opt.default!r}"
                assert opt.help == cli_facts(model, field)["help"], f"{command} {flag}: help differs from the model's"


def test_a_settings_flag_means_the_setting_in_every_command():
    flags = {_flag(m, f): (m, f) for m in (Load, Target) for f in m.model_fields}
    seen = 0
    for name in EXPECTED:  # the commands that measure (plan, predict and lint model a server: their --model is a model to plan)
        for flag, opt in _options(name).items():
            if flag not in flags or (name, flag) in OWN:
                continue
            assert opt.opts[0] == flag, f"{name} {flag} is the other side of {opt.opts[0]}, not the setting"
            model, field = flags[flag]
            seen += 1
            assert (opt.default, opt.help) == (_cli_default(model, field), cli_facts(model, field)["help"]), f"{name} {flag} is declared again"
    assert seen > 90


def test_the_recipes_bench_section_is_the_load():
    assert Recipe.model_fields["bench"].annotation is Load


_LISTS = st.lists(st.integers(1, 1000), min_size=1, max_size=4)


@settings(max_examples=60, deadline=None)
@given(
    concurrency=_LISTS, input_tokens=st.none() | st.integers(1, 10**6), spread=st.floats(0, 0.99), seed=st.integers(-(10**9), 10**9),
    closed=st.sampled_from(["stagger", "burst"]), slo=st.sampled_from([None, "ttft_p99=2s", "tpot_p90=50ms,e2e_p50=3s"]),
    duration=st.sampled_from([None, "90s", "2m", 5.5]),
)  # fmt: skip
def test_a_load_survives_its_stored_dump(concurrency, input_tokens, spread, seed, closed, slo, duration):
    load = Load(concurrency=",".join(map(str, concurrency)), input_tokens=input_tokens, output_spread=spread, seed=seed, closed_loop=closed, slo=slo,
                duration_s=duration)  # fmt: skip
    assert load.concurrency == concurrency
    assert Load.model_validate(load.model_dump(mode="json")) == load


def test_text_settings_are_refused_naming_their_flag():
    for kwargs, flag in (({"concurrency": "1,x"}, "--concurrency"), ({"rates": "0"}, "--rate"), ({"duration_s": "5x"}, "--duration"),
                         ({"chat_template_kwargs": "[1]"}, "--chat-template-kwargs"), ({"slo": "ttft=1"}, "--slo"), ({"think_time": "soon"}, "--think-time"),
                         ({"sessions": "0"}, "--sessions")):  # fmt: skip
        with pytest.raises(ServelabError, match=flag):
            Load(**kwargs)


def test_a_run_stores_the_load_it_was_given(tmp_path):
    with fault_server() as url:
        res = bench(url, tmp_path / "run", "--seed", "7", "--output-spread", "0.25", concurrency=2, requests=4)
    assert res.exit_code == 0, res.output
    stored = json.loads((tmp_path / "run" / "run.json").read_text())["settings"]
    assert Load.model_validate(stored) == Load(concurrency=[2], requests=4, warmup=0, input_tokens=64, output_tokens=8, seed=7, output_spread=0.25)


def test_bench_on_the_embedded_server_keeps_its_first_look():
    """4 requests a level unless asked otherwise, and one warm-up whatever the count or duration (as before the load model)."""
    from servelab.run.measure import bench_options

    assert (bench_options(Load(), embedded=True, first_look=True).requests, bench_options(Load(), embedded=True, first_look=True).warmup) == (4, 1)
    for asked in (Load(requests=20), Load(duration_s="30s")):
        assert bench_options(asked, embedded=True, first_look=True).warmup == 1
    assert bench_options(Load(), embedded=True).requests is None and bench_options(Load(), embedded=False, first_look=True).warmup is None


def test_a_rate_with_a_multi_turn_mix_is_refused():
    from servelab.run.measure import bench_options

    with pytest.raises(ServelabError, match="--rate"):
        bench_options(Load(rates="1", mix="agentic"), embedded=False)


def test_token_id_prompts_reused_past_their_pool_are_each_new():
    from servelab.run.levels import fresh
    from servelab.values.prompt import Prompt

    prompt = Prompt("x", 5, (1, 2, 3, 4, 5))
    seen = {fresh(prompt, "t", i, 10).ids for i in range(10, 50, 10)}  # rounds 1-4 of a 10-prompt pool
    assert len(seen) == 4 and prompt.ids not in seen and all(len(ids) == 5 for ids in seen)
