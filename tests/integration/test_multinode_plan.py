"""Multi-node presets without any service: the schema, the plan's exact per-node commands, and
the planner's scaling estimate."""

from __future__ import annotations

import json
import shlex
from dataclasses import replace
from pathlib import Path

import yaml

from backend.planner.gpu import gpu_spec
from backend.planner.multinode import scaling
from backend.planner.settings import TrainSettings
from backend.planner.shape import shape_from_config
from backend.ports import any_free_port
from tests.integration.test_launch_host import cli

ROOT = Path(__file__).resolve().parents[2]


def preset_file(tmp_path: Path, **launch: object) -> Path:
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["launch"].update(launch)
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def refused(path: Path) -> str:
    out = cli("plan", str(path), check=False)
    assert out.returncode == 2, out.stdout + out.stderr
    return out.stderr


def test_schema_errors_name_the_field(tmp_path: Path) -> None:
    bad_node = refused(preset_file(tmp_path, scheduler="ssh", nodes=["-oProxyCommand=sh"]))
    assert "launch.nodes" in bad_node and "-oProxyCommand=sh" in bad_node
    count = refused(preset_file(tmp_path, scheduler="ssh", nodes=["a", "b"]))
    assert "launch.nnodes is 1 but launch.nodes lists 2: set nnodes: 2" in count
    docker = refused(preset_file(tmp_path, scheduler="slurm", runner="docker"))
    assert "launch.runner: host" in docker
    module = refused(preset_file(tmp_path, scheduler="slurm", slurm={"modules": ["cuda; rm"]}))
    assert "launch.slurm.modules" in module
    endpoint = refused(preset_file(tmp_path, scheduler="slurm", rdzv_endpoint="host"))
    assert "launch.rdzv_endpoint" in endpoint


def test_each_node_step_is_one_quoted_ssh_command(tmp_path: Path) -> None:
    nodes = ["gpu-a", "me@gpu-b:2200"]
    # A free port of its own: the store of an SSH run listens here, so tiny-cpu's 29511, bound
    # by any run training on this machine at that moment, would move to the next free one.
    port = any_free_port()
    path = preset_file(
        tmp_path, scheduler="ssh", nnodes=2, nodes=nodes, env={"NCCL_DEBUG": "WARN x'y"},
        master_port=port,
    )  # fmt: skip
    plan = json.loads(cli("plan", str(path), "--json").stdout)
    steps = {s["id"]: s for s in plan["steps"]}
    for index, node in enumerate(nodes):
        argv = steps[f"node{index}"]["argv"]
        assert argv[:3] == ["ssh", "-o", "BatchMode=yes"]
        host = node.split("@")[-1].split(":")[0]
        assert argv[-3:-1] == ["--", host]
        remote = shlex.split(argv[-1].split("; ", 1)[1].split(" && exec ", 1)[1])
        assert "NCCL_DEBUG=WARN x'y" in remote  # one word on the node, whatever it holds
        assert "--nnodes=2" in remote and f"--rdzv_endpoint=gpu-a:{port}" in remote
        assert not any(a.startswith(("--node_rank", "--master_port")) for a in remote)
        # The node's GPU sampler: the same ssh, the sampler copied into the run dir.
        gpus = steps[f"node{index}-gpus"]["argv"]
        assert gpus[:-1] == argv[:-1]
        sampler = shlex.split(gpus[-1].split("; exec ", 1)[1].rsplit(" 2>&1", 1)[0])
        assert sampler[1] == "<run_dir>/entry/gpusampler.py" and f"--node=node{index}" in sampler
        assert f"--host={node}" in sampler and "--heartbeat" in sampler
        assert "--marker=TRAINWIZ_METRICS=<run_dir>/metrics.jsonl" in sampler
    assert "-p" in steps["node1"]["argv"] and "me" in steps["node1"]["argv"]


def test_inter_node_bandwidth_sets_the_scaling_efficiency() -> None:
    config = json.loads((ROOT / "tests/fixtures/planner/llama-1.35b-config.json").read_text())
    shape = shape_from_config(config)
    gpu = gpu_spec("h200")
    s = TrainSettings(
        micro_batch=4, grad_accum=4, seq=2048, nproc=8, nnodes=2, fsdp="full_shard auto_wrap"
    )
    fast, slow = scaling(shape, s, gpu, 50e9), scaling(shape, s, gpu, 1.5e9)
    assert 0 < slow.efficiency < fast.efficiency <= 1.05
    assert slow.hybrid_efficiency is not None and slow.hybrid_efficiency > slow.efficiency
    assert any("hybrid_shard" in n for n in slow.notes)
    assert scaling(shape, replace(s, nnodes=1), gpu).efficiency == 1.0


def test_plan_prints_the_scaling_of_a_two_node_preset(tmp_path: Path) -> None:
    data = yaml.safe_load((ROOT / "presets" / "vicuna-13b-v1.3-8xa100.yaml").read_text())
    data["launch"].update(nnodes=2)
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump(data))
    out = cli("plan", str(path), "--gpu", "a100", "--json")
    across = json.loads(out.stdout)["multinode"]
    assert across["nnodes"] == 2 and across["efficiency"] > 0
    assert across["comm_inter_s"] > 0
    text = cli("plan", str(path), "--gpu", "a100").stdout
    assert "# multi-node: 2 nodes, full_shard:" in text and "scaling efficiency" in text


def test_docker_nodes_each_run_one_quoted_docker_run(tmp_path: Path) -> None:
    hostile = "$(touch /tmp/tw-pwned) 'y\";"
    path = preset_file(
        tmp_path, runner="docker", scheduler="ssh", nnodes=2, nodes=["gpu-a", "gpu-b"]
    )
    data = yaml.safe_load(path.read_text())
    data["launch"]["env"] = {"NCCL_TW_PROBE": hostile}
    data["container"] = {"gpus": None, "interactive": False, "tty": False, "remove": True}
    path.write_text(yaml.safe_dump(data))
    plan = json.loads(cli("plan", str(path), "--json").stdout)
    steps = {s["id"]: s for s in plan["steps"]}
    for index in (0, 1):
        remote = steps[f"node{index}"]["argv"][-1]
        words = shlex.split(remote)
        run = words[words.index("run") - 1 :]
        assert run[:3] == ["cid=$(docker", "run", "-d"]
        assert "--rm" not in run  # the node's shell reads the exit code, then removes it
        assert {"--network=host", "--pid=host", f"--name=trainwiz-<run_id>-node{index}"} <= set(run)
        assert f"trainwiz.node={index}" in run and f"NCCL_TW_PROBE={hostile}" in run
        assert "torchrun" in run and "--rdzv_backend=c10d" in run
    bad_node = refused(
        preset_file(tmp_path, runner="docker", scheduler="ssh", nnodes=2, nodes=["a", "b;reboot"])
    )
    assert "launch.nodes" in bad_node and "b;reboot" in bad_node
    data["container"]["network"] = "bridge"
    path.write_text(yaml.safe_dump(data))
    assert "container.network: 'bridge'" in refused(path)
    data["container"].pop("network")
    data["environment"]["mode"] = "in_container"
    path.write_text(yaml.safe_dump(data))
    assert "environment.mode: in_container" in refused(path)
