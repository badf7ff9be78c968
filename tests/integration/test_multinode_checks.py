"""Checks between nodes, against the real sshd on 127.0.0.1 (scripts/ci-sshd.sh)."""
# ruff: noqa: F811  (pytest fixtures imported from the SSH tests are used as arguments)

from __future__ import annotations

import json
import socket
from pathlib import Path

from tests.integration.test_launch_host import cli
from tests.integration.test_multinode_ssh import (  # noqa: F401 (fixtures)
    ssh_keys,
    ssh_preset,
    sshd_port,
)

NODE_CHECKS = ["nodes_ssh", "nodes_alike", "nodes_shared", "rdzv_port", "nccl_iface"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def node_checks(preset: Path) -> tuple[int, dict[str, dict]]:
    only = [arg for check in NODE_CHECKS for arg in ("--only", check)]
    out = cli("check", "--preset", str(preset), *only, "--json", check=False)
    return out.returncode, {r["id"]: r for r in json.loads(out.stdout)["checks"]}


def test_two_reachable_nodes_pass_every_node_check(
    tmp_path: Path, sshd_port: int, ssh_keys: dict[str, str]
) -> None:
    node = f"127.0.0.1:{sshd_port}"
    preset = ssh_preset(tmp_path, ssh_keys, [node, node], master_port=free_port())
    code, results = node_checks(preset)
    assert {k: r["status"] for k, r in results.items()} == {
        "nodes_ssh": "ok",
        "nodes_alike": "ok",
        "nodes_shared": "ok",
        "rdzv_port": "ok",
        "nccl_iface": results["nccl_iface"]["status"],  # depends on this machine's interfaces
    }
    assert results["nccl_iface"]["status"] in ("ok", "warn")
    assert code == 0
    assert "every node reaches the rendezvous at 127.0.0.1:" in results["rdzv_port"]["summary"]
    import torch  # the environment every node reported is the one this test runs in

    assert f"torch {torch.__version__}" in results["nodes_alike"]["summary"]
    assert all(p["shared"] and p["torchrun"] == "ok" for p in results["nodes_ssh"]["data"]["nodes"])


def test_an_unreachable_node_fails_the_ssh_check_naming_it(
    tmp_path: Path, sshd_port: int, ssh_keys: dict[str, str]
) -> None:
    dead = f"127.0.0.1:{free_port()}"  # nothing listens there
    preset = ssh_preset(tmp_path, ssh_keys, [f"127.0.0.1:{sshd_port}", dead])
    code, results = node_checks(preset)
    reach = results["nodes_ssh"]
    assert code != 0 and reach["status"] == "fail"
    assert f"1 of 2 nodes cannot be reached over ssh: {dead}" in reach["summary"]
    assert "Connection refused" in reach["summary"] and "launch" in reach["blocks"]


def test_a_single_node_preset_skips_them() -> None:
    _, results = node_checks(Path(__file__).resolve().parents[2] / "presets" / "tiny-cpu.yaml")
    assert {r["status"] for r in results.values()} == {"skip"}
