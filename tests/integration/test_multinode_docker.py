# ruff: noqa: F811  (pytest fixtures imported from the launch and SSH tests are arguments)
"""The Docker runner on every node, through the SSH launcher, with real parts only.

Nodes 0 and 1 are this machine's real sshd (scripts/ci-sshd.sh) and real dockerd: two agents in
two containers of the trainwiz environment image form one run (c10d on 127.0.0.1, gloo on the
CPU). For the image checks a second real "machine" is made by the test: its own dockerd (own
data root and socket) behind its own sshd on another loopback port, whose sessions get
``DOCKER_HOST`` pointing at that daemon (sshd_config ``SetEnv``), so node 1 there really has
another image store.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
import yaml

from backend.plan.ssh_argv import ssh_base
from backend.ports import any_free_port
from backend.runs.docker_runner import LABEL_RUN, client
from backend.runs.multinode import docker_nodes
from backend.runs.multinode.agents import NodeLog
from backend.runs.procs import pid_alive
from tests.faults.helpers import ENDED, run_seen
from tests.integration.test_launch_host import (  # noqa: F401 (fixtures)
    cli,
    home,
    metric_lines,
    wait_state,
    wait_steps,
)
from tests.integration.test_multinode_ssh import (  # noqa: F401 (fixtures)
    SSHD_DIR,
    launch,
    ssh_keys,
    sshd_port,
    wait_no_leftovers,
)
from tests.one_thread import one_thread
from tests.waiting import wait_until

pytestmark = [pytest.mark.docker, pytest.mark.training, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
BASE = os.environ.get("TRAINWIZ_BASE_IMAGE", "trainwiz-base:bookworm")
WHEELS = os.environ.get("TRAINWIZ_WHEELS", "/opt/wheels")


def docker_ssh_data(home: Path, keys: dict[str, str], nodes: list[str], **launch: object) -> dict:
    """tiny-cpu in the environment image on every node: model and data mounted read-only."""
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["name"] = "tiny-docker"  # the environment image test_launch_docker builds (cached)
    data["training"]["max_steps"] = launch.pop("max_steps", 4)
    data["training"]["data_path"] = "/data/sample_conversations.json"
    data["environment"] = {
        "mode": "image",
        "image": BASE,
        "torch_spec": "torch==2.13.0",  # the machine's CPU wheel, not a CUDA build
        "find_links": [WHEELS],
    }
    data["container"] = {
        "gpus": None,
        "interactive": False,
        "tty": False,
        "volumes": [
            {"host": str(home / "models"), "container": "/models", "mode": "ro"},
            {"host": str(ROOT / "presets" / "data"), "container": "/data", "mode": "ro"},
        ],
    }
    ssh = {**keys, **launch.pop("ssh", {})}  # type: ignore[dict-item]
    launch.setdefault("master_port", any_free_port())  # not tiny-cpu's 29511, every test's
    data["launch"].update(
        runner="docker", scheduler="ssh", nnodes=len(nodes), nodes=nodes, ssh=ssh, **launch
    )
    one_thread(data["launch"])  # a container's environment is the preset's
    return data


def write_preset(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "tiny-docker-ssh.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(scope="module")
def env_image() -> str:
    """The environment image for the preset above (built once when missing; then cached)."""
    from backend.diagnosis.build_log import ensure_env_image
    from backend.preset.loader import parse_preset_text

    data = docker_ssh_data(Path("/tmp"), {}, ["127.0.0.1", "127.0.0.1"])
    preset = parse_preset_text(yaml.safe_dump(data))
    ensure_env_image(preset)
    return docker_nodes.node_image(preset)


def run_containers(run_id: str, daemon: docker.DockerClient | None = None) -> list:
    handle = daemon or client()
    return handle.containers.list(all=True, filters={"label": f"{LABEL_RUN}={run_id}"})


def _containers(run_id: str) -> dict[str, str]:
    """name -> status of the run's containers, for a wait's time-out message."""
    return {c.name: c.status for c in run_containers(run_id)}


def _steps(run_dir: Path) -> int:
    return sum(1 for m in metric_lines(run_dir) if m["kind"] == "step")


def test_two_nodes_two_containers_one_run(
    tmp_path: Path, home: Path, sshd_port: int, ssh_keys: dict[str, str], env_image: str
) -> None:
    node = f"127.0.0.1:{sshd_port}"
    data = docker_ssh_data(home, ssh_keys, [node, node], max_steps=6)
    run_id, run_dir = launch(write_preset(tmp_path, data))
    seen: set[str] = set()  # every container of the run seen while it ran (each is removed)

    def both_or_ended() -> bool:
        seen.update(c.name for c in run_containers(run_id))
        ended = json.loads((run_dir / "status.json").read_text())["state"] in ENDED
        return len(seen) >= 2 or ended

    wait_until(
        both_or_ended,
        what=f"both node containers of {run_id} (or the run's end)",
        timeout=300,
        seen=lambda: {"containers": sorted(seen), **run_seen(run_dir)},
        interval=0.3,
    )
    assert seen == {f"trainwiz-{run_id}-node0", f"trainwiz-{run_id}-node1"}
    final = wait_state(run_id, ("finished", "failed", "stopped"))
    log = (run_dir / "train.log").read_bytes().decode()
    assert final["state"] == "finished", log[-3000:]
    lines = metric_lines(run_dir)
    assert lines[0]["kind"] == "start" and lines[0]["world_size"] == 2
    steps = [m for m in lines if m["kind"] == "step"]
    assert [s["step"] for s in steps] == [1, 2, 3, 4, 5, 6]  # rank 0 only
    assert steps[-1]["loss"] < steps[0]["loss"]
    for index in (0, 1):
        assert f"[node{index} {node}] " in log
    # One model trained data-parallel: only world rank 0 logs the loss. The c10d rendezvous
    # gives out ranks in the order the agents join, so rank 0 may live on either node.
    lossy = {x.split("]")[0] for x in log.split("\n") if x.startswith("[node") and "'loss'" in x}
    assert len(lossy) == 1 and lossy <= {f"[node0 {node}", f"[node1 {node}"}, lossy
    assert f"image {env_image} on node 1 ({node}): sha256:" in log
    assert [(n["index"], n["joined"], n["exit_code"]) for n in final["nodes"]] == [
        (0, True, 0),
        (1, True, 0),
    ]
    assert run_containers(run_id) == []  # each node's shell removed its container
    wait_no_leftovers(run_id)


def test_stop_removes_this_runs_containers_on_every_node(
    tmp_path: Path, home: Path, sshd_port: int, ssh_keys: dict[str, str], env_image: str
) -> None:
    node = f"127.0.0.1:{sshd_port}"
    probe = tmp_path / "pwned"
    data = docker_ssh_data(home, ssh_keys, [node, node], max_steps=2000)
    # A hostile value travels as one quoted word through ssh, the node's shell and docker run.
    data["launch"]["env"] = {"TRAINWIZ_PROBE": f"$(touch {probe}); touch {probe}' \"x"}
    other = client().containers.run(  # another run's container: stop must leave it alone
        BASE, ["sleep", "600"], detach=True, network_mode="none", labels={LABEL_RUN: "other"}
    )
    try:
        run_id, run_dir = launch(write_preset(tmp_path, data))
        wait_steps(run_dir, 1, timeout=300)
        running = {c.name: c.status for c in run_containers(run_id)}
        assert running == {
            f"trainwiz-{run_id}-node0": "running",
            f"trainwiz-{run_id}-node1": "running",
        }
        stopped = json.loads(cli("stop", run_id, "--json").stdout)
        assert stopped["state"] == "stopped", (run_dir / "train.log").read_text()[-3000:]
        assert run_containers(run_id) == []
        other.reload()
        assert other.status == "running"
        assert not probe.exists()
        assert len([m for m in metric_lines(run_dir) if m["kind"] == "step"]) < 2000
        wait_no_leftovers(run_id)
    finally:
        other.remove(force=True)


def test_stop_without_a_watcher_still_removes_every_nodes_container(
    tmp_path: Path, home: Path, sshd_port: int, ssh_keys: dict[str, str], env_image: str
) -> None:
    # The containers are detached: they outlive a killed watcher, and stop still ends them.
    node = f"127.0.0.1:{sshd_port}"
    data = docker_ssh_data(home, ssh_keys, [node, node], max_steps=2000)
    run_id, run_dir = launch(write_preset(tmp_path, data))
    wait_steps(run_dir, 1, timeout=300)
    status = json.loads((run_dir / "status.json").read_text())
    watcher = status["watcher_pid"]
    os.kill(watcher, signal.SIGKILL)
    wait_until(  # SIGKILL lands asynchronously
        lambda: not pid_alive(watcher),
        what=f"the SIGKILLed watcher pid {watcher} gone (or a zombie)",
        timeout=20,
        seen=lambda: Path(f"/proc/{watcher}/stat").read_text(),
    )
    # Then a step logged after its death: the training (rank 0 writes metrics.jsonl from its
    # container) went on without the watcher, past the first output its ssh clients could no
    # longer hand to it; only then are the containers looked at.
    after = _steps(run_dir)
    wait_until(
        lambda: _steps(run_dir) > after,
        what=f"a metric step after step {after}, logged with the watcher gone",
        timeout=120,
        seen=lambda: {"containers": _containers(run_id), **run_seen(run_dir)},
        interval=0.2,
    )
    assert {c.status for c in run_containers(run_id)} == {"running"}
    stopped = json.loads(cli("stop", run_id, "--timeout", "5", "--json", check=False).stdout)
    assert stopped["state"] == "stopped", stopped["message"]
    assert run_containers(run_id) == []
    wait_no_leftovers(run_id)


# --- a second machine: its own dockerd behind its own sshd ----------------------------------


def start_sshd(root: Path, docker_host: str) -> tuple[int, subprocess.Popen[bytes]]:
    """Another real sshd on a loopback port whose sessions talk to ``docker_host``."""
    port = any_free_port()
    conf = root / "sshd_config"
    conf.write_text(
        f"ListenAddress 127.0.0.1:{port}\nHostKey {SSHD_DIR / 'host_ed25519'}\n"
        f"PidFile {root / 'sshd.pid'}\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nPubkeyAuthentication yes\n"
        "PermitRootLogin prohibit-password\nUsePAM no\n"
        f"AuthorizedKeysFile {SSHD_DIR / 'authorized_keys'}\n"
        f"SetEnv DOCKER_HOST={docker_host}\n"
    )
    sshd = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", str(conf)])
    deadline = time.monotonic() + 20
    while subprocess.run(["bash", "-c", f"exec 3<>/dev/tcp/127.0.0.1/{port}"]).returncode:
        if time.monotonic() > deadline or sshd.poll() is not None:
            sshd.kill()
            raise AssertionError(f"the test sshd did not listen on 127.0.0.1:{port}")
        time.sleep(0.1)
    return port, sshd


@pytest.fixture(scope="module")
def other_machine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    root = Path(f"/tmp/tw-node1-{uuid.uuid4().hex[:8]}")  # short: a unix socket path is <108
    bridge_before = Path("/sys/class/net/docker0").exists()
    root.mkdir()
    sock = root / "docker.sock"
    started: list[subprocess.Popen[bytes]] = []
    daemon: docker.DockerClient | None = None
    try:  # whatever fails in the setup, the daemons it started are ended
        with open(root / "dockerd.log", "wb") as daemon_log:
            started.append(
                subprocess.Popen(
                    [
                        # Its own network namespace: a second dockerd on the same host deletes
                        # the host's docker0 bridge (even with --bridge=none), which breaks every
                        # later bridge-network container of the real daemon.
                        "unshare",
                        "--net",
                        "dockerd",
                        f"--data-root={root / 'data'}",
                        f"--exec-root={root / 'exec'}",
                        f"--pidfile={root / 'dockerd.pid'}",
                        f"--host=unix://{sock}",
                        "--bridge=none",
                        "--iptables=false",
                        "--ip6tables=false",
                    ],
                    stdout=daemon_log,
                    stderr=subprocess.STDOUT,
                )
            )
        port, sshd = start_sshd(root, f"unix://{sock}")
        started.insert(0, sshd)
        deadline = time.monotonic() + 60
        while daemon is None:
            try:  # the client asks the daemon for its API version: once it answers
                daemon = docker.DockerClient(base_url=f"unix://{sock}")
            except Exception:
                if time.monotonic() > deadline or started[-1].poll() is not None:
                    raise AssertionError((root / "dockerd.log").read_text()[-2000:]) from None
                time.sleep(0.3)
        yield {"node": f"127.0.0.1:{port}", "port": port, "daemon": daemon}
    finally:
        if daemon is not None:
            daemon.close()
        for proc in started:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        subprocess.run(["rm", "-rf", str(root)], check=False)
    # The real daemon's bridge survives the second machine (it used to be deleted with it).
    assert bridge_before is False or Path("/sys/class/net/docker0").exists()


def trust(keys: dict[str, str], port: int) -> None:
    host_key = " ".join((SSHD_DIR / "host_ed25519.pub").read_text().split()[:2])
    with open(keys["known_hosts_file"], "a", encoding="utf-8") as handle:
        handle.write(f"[127.0.0.1]:{port} {host_key}\n")


def test_an_image_id_mismatch_on_node_1_is_refused_before_anything_starts(
    tmp_path: Path,
    home: Path,
    sshd_port: int,
    ssh_keys: dict[str, str],
    env_image: str,
    other_machine: dict,
) -> None:
    trust(ssh_keys, other_machine["port"])
    daemon = other_machine["daemon"]
    empty = tmp_path / "empty.tar"
    subprocess.run(["tar", "cf", str(empty), "-T", "/dev/null"], check=True)
    repo, tag = env_image.rsplit(":", 1)
    with open(empty, "rb") as handle:  # node 1's tag names another image than node 0's
        daemon.api.import_image_from_data(handle.read(), repository=repo, tag=tag)
    theirs = daemon.images.get(env_image).id
    ours = client().images.get(env_image).id
    assert theirs != ours
    node0, node1 = f"127.0.0.1:{sshd_port}", other_machine["node"]
    run_id, run_dir = launch(
        write_preset(tmp_path, docker_ssh_data(home, ssh_keys, [node0, node1]))
    )
    final = wait_state(run_id, ("finished", "failed", "stopped"), timeout=120)
    message = final["message"]
    assert final["state"] == "failed", message
    assert f"node 1 ({node1}): image {env_image} is {theirs} there but {ours} on node 0" in message
    log = (run_dir / "train.log").read_text()
    assert "docker run" not in log.replace(message, "")  # no agent was started anywhere
    assert run_containers(run_id) == [] and run_containers(run_id, daemon) == []
    assert daemon.images.get(env_image).id == theirs  # trainwiz did not replace their image
    assert metric_lines(run_dir) == []
    wait_no_leftovers(run_id)
    daemon.images.remove(env_image, force=True)


def test_a_missing_image_is_shipped_streamed_and_then_matches(
    sshd_port: int, ssh_keys: dict[str, str], other_machine: dict
) -> None:
    from backend.preset.schema import SshConfig

    trust(ssh_keys, other_machine["port"])
    daemon = other_machine["daemon"]
    config = SshConfig(**ssh_keys)
    nodes = [
        {"index": i, "host": h, "ssh": ssh_base(config, h), "image": BASE}
        for i, h in enumerate([f"127.0.0.1:{sshd_port}", other_machine["node"]])
    ]
    with pytest.raises(docker.errors.ImageNotFound):
        daemon.images.get(BASE)
    with open(os.devnull, "wb") as sink:
        assert docker_nodes.ensure_images(nodes, NodeLog(sink, [])) == ""  # type: ignore[arg-type]
    assert daemon.images.get(BASE).id == client().images.get(BASE).id
    # A hostile tag reaches docker as one word on the node: a missing image, nothing run.
    probe = Path(f"/tmp/tw-pwned-{uuid.uuid4().hex[:8]}")
    for node in nodes:
        node["image"] = f"x'; touch {probe}; echo '$(touch {probe})"
    with open(os.devnull, "wb") as sink:
        refused = docker_nodes.ensure_images(nodes, NodeLog(sink, []))  # type: ignore[arg-type]
    assert "node 0" in refused and "is not there" in refused, refused
    assert not probe.exists()


def test_node_checks_ask_for_docker_on_every_node(
    tmp_path: Path, sshd_port: int, ssh_keys: dict[str, str]
) -> None:
    from tests.integration.test_multinode_checks import node_checks

    root = tmp_path / "nodocker"
    root.mkdir()
    port, sshd = start_sshd(root, f"unix://{root}/no-daemon.sock")  # a node without a daemon
    try:
        trust(ssh_keys, port)
        good = f"127.0.0.1:{sshd_port}"
        both = write_preset(tmp_path, docker_ssh_data(tmp_path, ssh_keys, [good, good]))
        _code, results = node_checks(both)
        assert results["nodes_ssh"]["status"] == "ok", results["nodes_ssh"]
        bad = f"127.0.0.1:{port}"
        one = write_preset(tmp_path, docker_ssh_data(tmp_path, ssh_keys, [good, bad]))
        code, results = node_checks(one)
        assert code != 0 and results["nodes_ssh"]["status"] == "fail"
        assert results["nodes_ssh"]["summary"] == f"docker is not usable over ssh on {bad}"
    finally:
        sshd.terminate()
        sshd.wait(timeout=30)
