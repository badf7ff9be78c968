"""The SSH launcher against a real OpenSSH server on 127.0.0.1 (scripts/ci-sshd.sh).

Two torchrun agents on this machine form one run (``nnodes: 2``, c10d rendezvous on
127.0.0.1, gloo on the CPU), each started over its own ssh connection with a key pair and a
known_hosts file the test makes in a temp dir. The key's authorized_keys entry lives in the
test sshd's own file and is removed afterwards.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from tests.integration.test_launch_host import (  # noqa: F401 (fixtures)
    cli,
    home,
    metric_lines,
    wait_state,
    wait_steps,
)
from tests.one_thread import one_thread
from tests.waiting import wait_until

pytestmark = [pytest.mark.training, pytest.mark.slow, pytest.mark.usefixtures("home")]

ROOT = Path(__file__).resolve().parents[2]
SSHD_DIR = Path("/var/lib/trainwiz-sshd")
AUTHORIZED = SSHD_DIR / "authorized_keys"  # shared by every test, worker and suite on this sshd
AUTHORIZED_LOCK = SSHD_DIR / "authorized_keys.lock"  # flock'd around every edit of it


@pytest.fixture(scope="session")
def sshd_port() -> int:
    out = subprocess.run(
        ["bash", str(ROOT / "scripts" / "ci-sshd.sh")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip().splitlines()[-1])


@contextmanager
def _authorized_keys_locked() -> Iterator[Path]:
    """The shared authorized_keys file, under an exclusive lock held beside it.

    Every test (in every pytest-xdist worker, and every suite sharing this sshd) edits the one
    file: an edit is a read-modify-write, so two unlocked ones lose each other's entry. The lock
    is a separate file, never replaced or deleted, so every holder locks the same inode (the
    keys file itself is replaced by each removal).
    """
    lock = os.open(AUTHORIZED_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released by the close below, whatever happens
        yield AUTHORIZED
    finally:
        os.close(lock)


def _add_authorized_key(entry: str) -> None:
    """Append ``entry`` (one line) to the shared authorized_keys, under the lock."""
    line = entry if entry.endswith("\n") else entry + "\n"
    with _authorized_keys_locked() as path:
        if path.exists() and path.stat().st_size and not _ends_with_newline(path):
            line = "\n" + line  # a last line without its newline must not absorb ours
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(line)


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as handle:
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) == b"\n"


def _remove_authorized_key(comment: str) -> None:
    """Drop every line naming ``comment``, under the lock: the rest is written to a temp file
    beside it and renamed over it, so sshd (which reads it at every login, unlocked) sees the
    old file or the new one, never a half-written one. The temp file gets the old file's mode
    and owner: sshd's StrictModes refuses a key file that is group/world writable or owned by
    anyone but root or the user (scripts/ci-sshd.sh makes it root's, 0644)."""
    with _authorized_keys_locked() as path:
        kept = [x for x in path.read_text().splitlines(keepends=True) if comment not in x]
        info = path.stat()
        fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write("".join(kept))
                handle.flush()
                os.fchmod(handle.fileno(), stat.S_IMODE(info.st_mode))
                os.fchown(handle.fileno(), info.st_uid, info.st_gid)
                os.fsync(handle.fileno())
            os.replace(temp, path)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise


@pytest.fixture
def ssh_keys(tmp_path: Path, sshd_port: int) -> Iterator[dict[str, str]]:
    """A fresh key pair, its authorized_keys entry, and known_hosts pinning the test sshd."""
    keys = tmp_path / "ssh"
    keys.mkdir(mode=0o700)
    comment = f"trainwiz-test-{os.getpid()}-{time.monotonic_ns()}"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(keys / "id")],
        check=True,
    )
    host_key = (SSHD_DIR / "host_ed25519.pub").read_text().split()[:2]
    (keys / "known_hosts").write_text(f"[127.0.0.1]:{sshd_port} {' '.join(host_key)}\n")
    _add_authorized_key((keys / "id.pub").read_text())
    yield {"identity_file": str(keys / "id"), "known_hosts_file": str(keys / "known_hosts")}
    _remove_authorized_key(comment)


def ssh_preset(tmp_path: Path, keys: dict[str, str], nodes: list[str], **launch: object) -> Path:
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    # A name of its own: run ids are <second>-<name>, and the tests here find a run's processes
    # by its id, so two runs of one name started in the same second by two workers (each in its
    # own TRAINWIZ_HOME) would count each other's processes as their own.
    data["name"] = f"tiny-ssh-{secrets.token_hex(3)}"
    data["training"]["max_steps"] = launch.pop("max_steps", 4)
    ssh = {**keys, **launch.pop("ssh", {})}  # type: ignore[dict-item]
    # A port of its own: tiny-cpu's 29511 is every other test's too (a rendezvous on another
    # run's store fails both).
    launch.setdefault("master_port", free_port())
    data["launch"].update(scheduler="ssh", nnodes=len(nodes), nodes=nodes, ssh=ssh, **launch)
    one_thread(data["launch"])  # an SSH node's environment is its sshd's
    path = tmp_path / "tiny-ssh.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def leftovers(run_id: str) -> list[str]:
    """Processes on this machine (every 'node') whose command line names the run."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if run_id in cmdline and state != "Z":
            found.append(f"{entry.name}: {cmdline[:200]}")
    return found


def wait_no_leftovers(run_id: str, timeout: float = 30) -> None:
    """Until no process on this machine names the run (every node's agent and shell ended)."""
    wait_until(
        lambda: leftovers(run_id) == [],
        what=f"no process left whose command line names {run_id}",
        timeout=timeout,
        seen=lambda: leftovers(run_id),
        interval=0.3,
    )


def launch(preset: Path) -> tuple[str, Path]:
    started = json.loads(cli("launch", str(preset), "--detach", "--json").stdout)
    return started["run_id"], Path(started["run_dir"])


def test_two_nodes_one_run_over_ssh(
    tmp_path: Path, sshd_port: int, ssh_keys: dict[str, str]
) -> None:
    node = f"127.0.0.1:{sshd_port}"
    run_id, run_dir = launch(ssh_preset(tmp_path, ssh_keys, [node, node], max_steps=6))
    final = wait_state(run_id, ("finished", "failed", "stopped"))
    log = (run_dir / "train.log").read_bytes().decode()  # tqdm's \r stay in their line
    assert final["state"] == "finished", log[-3000:]
    lines = metric_lines(run_dir)
    assert lines[0]["kind"] == "start" and lines[0]["world_size"] == 2
    steps = [m for m in lines if m["kind"] == "step"]
    assert [s["step"] for s in steps] == [1, 2, 3, 4, 5, 6]  # rank 0 only: no line twice
    assert steps[-1]["loss"] < steps[0]["loss"]
    assert steps[0]["samples"] == 2 * 4  # both nodes' batches counted
    for index in (0, 1):
        assert f"[node{index} {node}] " in log
    # One model trained data-parallel: only world rank 0 logs the loss. The c10d rendezvous
    # gives out ranks in the order the agents join, so rank 0 may live on either node.
    lossy = {x.split("]")[0] for x in log.split("\n") if x.startswith("[node") and "'loss'" in x}
    assert len(lossy) == 1 and lossy <= {f"[node0 {node}", f"[node1 {node}"}, lossy
    nodes = final["nodes"]
    assert [(n["index"], n["joined"], n["exit_code"]) for n in nodes] == [
        (0, True, 0),
        (1, True, 0),
    ]
    assert all(n["pid"] for n in nodes)
    # One GPU sampler per node reported into the run (this CPU machine: the no-GPU record)
    # and ended with the run; status.json tracked each one.
    for index in (0, 1):
        header, samples, end = sampler_file(run_dir, index)
        assert (header["node"], header["host"], header["state"]) == (f"node{index}", node, "no_gpu")
        assert header["source"] == "none" and "nvml" in header["message"]
        assert samples and all(s["gpus"] == [] for s in samples)
        assert end is not None and end["reason"]
        sampler = nodes[index]["sampler"]
        assert sampler["state"] == "stopped" and sampler["ssh_pid"] == header["pid"]
    wait_no_leftovers(run_id)


def test_stop_ends_every_node(tmp_path: Path, sshd_port: int, ssh_keys: dict[str, str]) -> None:
    node = f"127.0.0.1:{sshd_port}"
    run_id, run_dir = launch(ssh_preset(tmp_path, ssh_keys, [node, node], max_steps=2000))
    wait_steps(run_dir, 1)
    assert len(leftovers(run_id)) >= 4  # two agents and two workers train this run
    assert len(samplers_running(run_id)) == 2  # and one GPU sampler per node
    stopped = json.loads(cli("stop", run_id, "--json").stdout)
    assert stopped["state"] == "stopped", (run_dir / "train.log").read_text()[-3000:]
    wait_no_leftovers(run_id)
    assert samplers_running(run_id) == []
    for index in (0, 1):
        assert sampler_file(run_dir, index)[2] is not None  # each wrote its end line
    assert all(n["state"] == "exited" for n in runs_nodes(run_id))
    steps = [m for m in metric_lines(run_dir) if m["kind"] == "step"]
    assert len(steps) < 2000


def sampler_file(run_dir: Path, index: int) -> tuple[dict, list[dict], dict | None]:
    """A node's sampler file: (header, samples, end line or None)."""
    records = [
        json.loads(x)
        for x in (run_dir / "nodes" / f"node{index}" / "gpu.jsonl").read_text().splitlines()
    ]
    header, rest = records[0], records[1:]
    assert header["kind"] == "header"
    ends = [r for r in rest if r.get("kind") == "end"]
    return header, [r for r in rest if "kind" not in r], ends[-1] if ends else None


def samplers_running(run_id: str) -> list[str]:
    """The samplers themselves (python running gpusampler.py), not their ssh clients."""
    return [
        x
        for x in leftovers(run_id)
        if "gpusampler.py" in x and not x.split(": ", 1)[1].startswith("ssh ")
    ]


def runs_nodes(run_id: str) -> list[dict]:
    return {r["run_id"]: r for r in json.loads(cli("runs", "--json").stdout)}[run_id]["nodes"]


def test_a_node_that_never_joins_fails_the_run_naming_it(
    tmp_path: Path, sshd_port: int, ssh_keys: dict[str, str]
) -> None:
    # Node 1 is a machine that accepts the TCP connection and then says nothing (hung sshd,
    # half-dead host): its agent never starts, node 0's agent waits for the rendezvous.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as hung:
        hung.bind(("127.0.0.1", 0))
        hung.listen(8)
        dead = f"127.0.0.1:{hung.getsockname()[1]}"
        preset = ssh_preset(
            tmp_path,
            ssh_keys,
            [f"127.0.0.1:{sshd_port}", dead],
            rdzv_timeout=15,
            ssh={"connect_timeout": 300},
        )
        run_id, run_dir = launch(preset)
        final = wait_state(run_id, ("finished", "failed", "stopped"), timeout=180)
    message = final["message"]
    assert final["state"] == "failed", message
    assert "rendezvous timeout after 15 s" in message
    assert f"never joined: node 1 ({dead})" in message
    assert "node 0" not in message
    assert "RendezvousTimeoutError" in (run_dir / "train.log").read_text()
    diagnosis = json.loads(cli("diagnose", run_id, "--json", check=False).stdout)
    top = diagnosis["findings"][0]
    assert top["category"] == "rendezvous_timeout" and top["text"].startswith("[node0 ")
    wait_no_leftovers(run_id)
