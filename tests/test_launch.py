"""Launching recipes: exact docker / ssh / Ray / multi-node command lines, and real processes
(the embedded llama-server) started, checked for readiness and crashes, and stopped."""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servelab.cli import app
from servelab.errors import ServelabError
from servelab.launch.server import RecipeServer
from servelab.recipes import load_recipe, with_hosts

ROOT = Path(__file__).resolve().parent.parent
LLAMA_RECIPE = ROOT / "recipes" / "llama-cpp-gemma-270m.yaml"
cli = CliRunner()
HOME = os.path.expanduser("~")
CACHES = ["-v", f"{HOME}/.cache/huggingface:/root/.cache/huggingface", "-v", f"{HOME}/.cache/vllm:/root/.cache/vllm",
          "-v", f"{HOME}/.cache/flashinfer:/root/.cache/flashinfer", "-v", f"{HOME}/.triton:/root/.triton"]  # fmt: skip


def write(tmp_path: Path, text: str, name: str = "recipe.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


DOCKER = """\
name: Qwen 8B
engine: vllm
model: Qwen/Qwen3-8B
container:
  image: vllm/vllm-openai:{tag}
  volumes: [/models:/models]
env: {VLLM_LOGGING_LEVEL: DEBUG}
pass_env: [HF_TOKEN]
command: [vllm, serve, "{model}", --port, "{port}"]
defaults: {tag: v0.11.0, port: 8000}
"""


def test_docker_run_command_is_exact(tmp_path):
    recipe = load_recipe(write(tmp_path, DOCKER))
    server = RecipeServer(recipe, recipe.resolve({}), tmp_path)
    name = f"{server.container_prefix}-0"
    assert server.commands() == [[
        "docker", "run", "--rm", "--name", name, "--gpus", "all", "--ipc", "host", "--network", "host", *CACHES,
        "-v", "/models:/models", "-e", "VLLM_LOGGING_LEVEL=DEBUG", "-e", "HF_TOKEN",
        "vllm/vllm-openai:v0.11.0", "vllm", "serve", "Qwen/Qwen3-8B", "--port", "8000",
    ]]  # fmt: skip
    assert server.server_procs[0].stop_argv == ["docker", "stop", name]
    assert name.startswith("servelab-qwen-8b-")


def test_docker_without_host_network_publishes_the_port(tmp_path):
    text = DOCKER.replace("  volumes: [/models:/models]\n", "  network: bridge\n  cache_volumes: false\n  shm_size: 16g\n  ipc: null\n")
    recipe = load_recipe(write(tmp_path, text))
    argv = RecipeServer(recipe, recipe.resolve({}), tmp_path).commands()[0]
    assert argv[5:13] == ["--gpus", "all", "--shm-size", "16g", "--network", "bridge", "-p", "8000:8000"]
    assert "-v" not in argv


def test_ray_cluster_in_containers_over_ssh(tmp_path):
    cluster = "tensor_parallel: 2\ncluster:\n  hosts: [a, b]\n  ssh: [-i, /k]\n  ray_args: [--num-gpus=1]\n"
    recipe = with_hosts(load_recipe(write(tmp_path, DOCKER + cluster)), "spark-1,spark-2")
    server = RecipeServer(recipe, recipe.resolve({}), tmp_path)
    head, worker = f"{server.container_prefix}-0", f"{server.container_prefix}-1"
    docker = lambda name, *cmd: shlex.join(["docker", "run", "--rm", "--name", name, "--gpus", "all", "--ipc", "host", "--network", "host",  # noqa: E731
                                            *CACHES, "-v", "/models:/models", "-e", "VLLM_LOGGING_LEVEL=DEBUG", "-e", "HF_TOKEN",
                                            "vllm/vllm-openai:v0.11.0", *cmd])  # fmt: skip
    ssh = ["ssh", "-tt", "-o", "BatchMode=yes", "-i", "/k"]
    assert server.commands() == [
        [*ssh, "spark-1", "--", docker(head, "ray", "start", "--head", "--port=6379", "--block", "--num-gpus=1")],
        [*ssh, "spark-2", "--", docker(worker, "ray", "start", "--address=spark-1:6379", "--block", "--num-gpus=1")],
        [*ssh, "spark-1", "--", shlex.join(["docker", "exec", head, "vllm", "serve", "Qwen/Qwen3-8B", "--port", "8000",
                                            "--tensor-parallel-size", "2", "--distributed-executor-backend", "ray"])],
    ]  # fmt: skip
    assert server.cluster_procs[1].stop_argv == ["ssh", "-o", "BatchMode=yes", "-i", "/k", "spark-2", "--", f"docker stop {worker}"]
    assert server._ray_probe()[-1].startswith(f"docker exec {head} python3 -c ")
    assert server.url == "http://spark-1:8000"


def test_ray_cluster_of_plain_processes_sends_the_environment(tmp_path):
    text = "name: r\nengine: vllm\nenv: {NCCL_SOCKET_IFNAME: eth0}\ncommand: [vllm, serve, m]\ncluster:\n  hosts: [127.0.0.1, gpu-2]\n"
    recipe = load_recipe(write(tmp_path, text))
    server = RecipeServer(recipe, recipe.resolve({}), tmp_path)
    head, worker = server.cluster_procs
    assert head.argv == ["ray", "start", "--head", "--port=6379", "--block"] and head.env == {"NCCL_SOCKET_IFNAME": "eth0"}
    assert worker.argv == ["ssh", "-tt", "-o", "BatchMode=yes", "gpu-2", "--",
                           "env NCCL_SOCKET_IFNAME=eth0 ray start --address=127.0.0.1:6379 --block"]  # fmt: skip
    assert worker.stop_argv == ["ssh", "-o", "BatchMode=yes", "gpu-2", "--", "ray stop --force"]
    assert head.stop_argv is None  # a local Ray head is stopped through its own process group
    assert server.server_procs[0].argv == ["vllm", "serve", "m", "--distributed-executor-backend", "ray"]


@pytest.mark.parametrize(("engine", "flags"), [
    ("sglang", [["--nnodes", "2", "--node-rank", "0", "--dist-init-addr", "n1:29501"], ["--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "n1:29501"]]),
    ("vllm", [["--nnodes", "2", "--node-rank", "0", "--master-addr", "n1", "--master-port", "29501"],
              ["--nnodes", "2", "--node-rank", "1", "--master-addr", "n1", "--master-port", "29501", "--headless"]]),
])  # fmt: skip
def test_native_multi_node_runs_the_server_on_every_node(tmp_path, engine, flags):
    text = f"name: n\nengine: {engine}\ncommand: [serve, m, --tp-size, '2']\ncluster:\n  hosts: [n1, n2]\n  backend: native\n"
    recipe = load_recipe(write(tmp_path, text))
    server = RecipeServer(recipe, recipe.resolve({}), tmp_path)
    assert server.cluster_procs == []
    for rank, (proc, expected) in enumerate(zip(server.server_procs, flags, strict=True)):
        assert proc.argv[-1] == shlex.join(["serve", "m", "--tp-size", "2", *expected])
        assert proc.argv[-3] == f"n{rank + 1}"
    assert [p.log_path.name for p in server.server_procs] == ["server.log", "server-node1.log"]
    assert all(p.stop_argv is None for p in server.server_procs)  # no Ray here: ssh hang-up stops them, never `ray stop`


def test_sglang_cannot_use_ray(tmp_path):
    with pytest.raises(ServelabError, match="SGLang runs several nodes natively"):
        load_recipe(write(tmp_path, "name: n\nengine: sglang\ncommand: [x]\ncluster:\n  hosts: [a, b]\n  backend: ray\n"))


def test_dry_run_prints_commands_with_secrets_redacted(tmp_path):
    path = write(tmp_path, "name: k\nengine: vllm\ncommand: [vllm, serve, m, --api-key, '{key}']\ndefaults: {key: sk-secret}\n")
    res = cli.invoke(app, ["launch", str(path), "--dry-run"])
    assert res.exit_code == 0, res.output
    assert "vllm serve m --api-key '***'" in res.output and "sk-secret" not in res.output


def test_a_server_that_never_gets_ready_times_out_and_is_stopped(tmp_path):
    text = f"name: slow\nengine: custom\ncommand: [{sys.executable}, -c, 'print(\"loading\", flush=True); import time; time.sleep(600)']\nready:\n  timeout_s: 0.5\n"
    recipe = load_recipe(write(tmp_path, text))
    server = RecipeServer(recipe, recipe.resolve({}), tmp_path)
    with pytest.raises(ServelabError, match=r"(?s)was not ready at http://127.0.0.1:8000/v1/models after 0 s.*loading"):
        server.start()
    assert not server.server_procs[0].alive()


def test_a_missing_program_is_one_clear_error(tmp_path):
    recipe = load_recipe(write(tmp_path, "name: m\nengine: custom\ncommand: [no-such-server-binary]\n"))
    with pytest.raises(ServelabError, match=r"cannot start custom server \(no-such-server-binary\)"):
        RecipeServer(recipe, recipe.resolve({}), tmp_path).start()


@pytest.mark.server
def test_launch_serves_until_ctrl_c_and_stops_the_server(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "servelab", "launch", str(LLAMA_RECIPE), "--set", "parallel=1", "--log-dir", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        lines = []
        for line in proc.stdout:  # blocks until servelab prints; no sleeps
            lines.append(line)
            if line.startswith("serving at"):
                break
        url = lines[-1].split()[2]
        with urllib.request.urlopen(url + "/health", timeout=5) as resp:
            assert resp.status == 200
        with urllib.request.urlopen(url + "/props", timeout=5) as resp:
            assert json.load(resp)["total_slots"] == 1  # --set parallel=1 reached the server
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
    with pytest.raises(OSError):
        urllib.request.urlopen(url + "/health", timeout=2)
    assert (tmp_path / "server.log").stat().st_size > 0  # the server's own log is kept


def test_ray_head_and_worker_on_loopback_form_a_cluster_then_stop(tmp_path, free_port):
    """A real two-node Ray cluster on this machine (head + worker, both on loopback hosts), the
    server started once Ray counts both nodes, and everything stopped afterwards."""
    pytest.importorskip("ray")
    server_code = "import http.server, sys; http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), http.server.SimpleHTTPRequestHandler).serve_forever()"
    text = f"""\
name: ray loopback
engine: vllm
command: [{sys.executable}, -c, "{server_code}", "{{port}}"]
ready: {{url: "http://127.0.0.1:{{port}}/", timeout_s: 120}}
env: {{RAY_USAGE_STATS_ENABLED: "0"}}
cluster:
  hosts: [127.0.0.1, localhost]
  ray_port: {free_port}
  ray_args: [--num-cpus=1, --object-store-memory=80000000, --disable-usage-stats]
  ready_timeout_s: 180
"""
    recipe = load_recipe(write(tmp_path, text))
    server = RecipeServer(recipe, recipe.resolve({}), tmp_path / "logs")
    with server:
        assert server.alive()
        probe = subprocess.run(server._ray_probe(), capture_output=True, text=True, timeout=120, check=True)
        assert probe.stdout.strip().splitlines()[-1] == "2"  # head and worker are both live Ray nodes
        assert server.server_procs[0].argv[-2:] == ["--distributed-executor-backend", "ray"]
    assert not any(p.alive() for p in server.cluster_procs + server.server_procs)
    assert "Ray runtime started" in (tmp_path / "logs" / "ray-head.log").read_text()


def test_sigkill_of_servelab_still_stops_the_server_it_launched(tmp_path):
    """SIGKILL cannot be caught: the server's lifeline (servelab.server.process) stops it when servelab is
    gone. The server here (Python's http.server) has no watchdog of its own."""
    server_code = "import http.server, sys; http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), http.server.SimpleHTTPRequestHandler).serve_forever()"
    recipe = write(tmp_path, f"""\
name: plain
engine: custom
command: [{sys.executable}, -c, "{server_code}", "{{port}}"]
ready: {{url: "http://127.0.0.1:{{port}}/", timeout_s: 60}}
""")
    proc = subprocess.Popen([sys.executable, "-m", "servelab", "launch", str(recipe)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = next(line.split("serving at", 1)[1].split()[0] for line in proc.stdout if "serving at" in line)
    port = int(url.rstrip("/").rsplit(":", 1)[1].split("/")[0])
    proc.kill()  # SIGKILL: no handler runs
    proc.wait(timeout=10)
    deadline = time.monotonic() + 40
    while True:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) != 0:
                break  # the server is gone
        assert time.monotonic() < deadline, "the launched server outlived servelab's SIGKILL"
        time.sleep(0.1)  # polling a condition
