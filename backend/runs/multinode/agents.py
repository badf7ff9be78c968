"""One torchrun agent per node: its argv (c10d rendezvous), and what its log says about it.

Both launchers (SSH, Slurm) start the same agent command on every node; torchrun's own c10d
rendezvous forms the group, so trainwiz never assigns ranks itself. Each node's output is
copied into the run's ``train.log`` line by line with the node named (``[node1 gpu-b] ...``),
and the same lines tell whether the node joined the rendezvous: torchrun logs "Rendezvous
complete" at INFO (``LOGLEVEL=INFO``) and raises ``RendezvousTimeoutError`` when a node is
missing. From that the watcher writes a finding that names the node that never joined.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import IO, Any

JOINED = "Rendezvous complete for workers"
RDZV_TIMEOUT = "RendezvousTimeoutError"
PID_MARK = "TRAINWIZ_NODE_PID="
# What OpenSSH says when it never got a session on the node (its exit code is then 255).
UNREACHABLE = re.compile(
    r"ssh: connect to host \S+ port \d+: .+|Connection to \S+ port \d+ timed out"
    r"|ssh: Could not resolve hostname .+|Connection timed out during banner exchange"
    r"|Connection closed by \S+ port \d+|kex_exchange_identification: .+"
)
# torchrun's own flags that a single-node plan may carry and the rendezvous replaces.
_SINGLE_NODE_FLAGS = ("--nnodes", "--node_rank", "--master_addr", "--master_port", "--standalone")


def agent_argv(
    train_argv: list[str],
    *,
    torchrun: str,
    nnodes: int | str,
    endpoint: str,
    rdzv_id: str,
    join_timeout: int,
) -> list[str]:
    """The plan's ``torchrun ... script args`` with c10d rendezvous flags instead of rank flags."""
    flags: list[str] = []
    rest: list[str] = []
    for i, arg in enumerate(train_argv[1:], start=1):
        if not arg.startswith("--"):
            rest = train_argv[i:]
            break
        if not arg.startswith(_SINGLE_NODE_FLAGS):
            flags.append(arg)
    return [
        torchrun,
        f"--nnodes={nnodes}",
        *flags,
        "--rdzv_backend=c10d",
        f"--rdzv_endpoint={endpoint}",
        f"--rdzv_id={rdzv_id}",
        f"--rdzv_conf=join_timeout={join_timeout}",
        "--max_restarts=0",
        *rest,
    ]


@dataclass
class NodeState:
    """What status.json's ``nodes`` list says about one node."""

    index: int
    host: str
    state: str = "starting"  # starting | running | exited
    pid: int | None = None  # the agent's pid (= its process group) on that node
    joined: bool = False
    rdzv_timeout: bool = False
    exit_code: int | None = None
    last_line: str = ""
    unreachable: str = ""  # ssh's own words when it never reached the node
    ended_at: float | None = None  # when its agent (or ssh) ended: the first one is the cause
    sampler: dict[str, Any] = field(default_factory=dict)  # its GPU sampler (samplers.py)


class NodeLog:
    """Copies each node's lines into train.log with the node named, and follows its state."""

    def __init__(self, log: IO[bytes], nodes: list[NodeState]) -> None:
        self.log = log
        self.nodes = nodes
        self._lock = threading.Lock()
        self.changed = threading.Event()

    def line(self, node: NodeState, text: str) -> None:
        text = text.rstrip("\r\n")
        if text.startswith(PID_MARK):
            try:
                node.pid = int(text[len(PID_MARK) :].strip())
            except ValueError:
                pass
            node.state = "running"
            self.changed.set()
            return
        if JOINED in text and not node.joined:
            node.joined = True
            self.changed.set()
        if RDZV_TIMEOUT in text:
            node.rdzv_timeout = True
        if node.pid is None and not node.unreachable and UNREACHABLE.search(text):
            node.unreachable = UNREACHABLE.search(text).group(0).strip()  # type: ignore[union-attr]
        if text.strip():
            node.last_line = text.strip()[-300:]
        with self._lock:
            self.log.write(f"[node{node.index} {node.host}] {text}\n".encode())
            self.log.flush()

    def tagged(self, tag: str, text: str) -> None:
        with self._lock:
            self.log.write(f"[{tag}] {text.rstrip()}\n".encode())
            self.log.flush()

    def note(self, text: str) -> None:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        with self._lock:
            self.log.write(f"[trainwiz {stamp}] {text}\n".encode())
            self.log.flush()

    def records(self) -> list[dict[str, Any]]:
        return [asdict(n) for n in self.nodes]


def unreachable_fix(node: NodeState) -> str:
    if "resolve hostname" in node.unreachable:
        return "check the node's name in launch.nodes"
    return (
        "check that the node is up and that its sshd port (launch.ssh.port or host:port) "
        "is open to this machine; 'trainwiz check --preset' tries every node"
    )


def cause(nodes: list[NodeState]) -> str | None:
    """The run record's cause for a failed multi-node run (None: the usual exit-code one)."""
    if any(n.unreachable for n in nodes):
        return "node_unreachable"
    if any(n.rdzv_timeout for n in nodes):
        return "rendezvous_timeout"
    return None


def finding(nodes: list[NodeState], join_timeout: int) -> str:
    """Why a multi-node run failed, naming the node(s) to look at first.

    A node ssh never reached is named first (the others were stopped because of it). In a
    rendezvous timeout every waiting agent reports the timeout; the nodes that did not (never
    started, or started and said nothing) are the ones that never joined. Otherwise the node
    whose agent ended first with an error is the one that failed; the rest were stopped.
    """
    unreachable = [n for n in nodes if n.unreachable]
    if unreachable:
        first = unreachable[0]
        more = f" (and {len(unreachable) - 1} more)" if len(unreachable) > 1 else ""
        return (
            f"node_unreachable: node {first.index} ({first.host}) cannot be reached over ssh"
            f"{more}: {first.unreachable}; {unreachable_fix(first)}"
        )
    if any(n.rdzv_timeout for n in nodes):
        missing = [n for n in nodes if not n.rdzv_timeout and not n.joined]
        if missing:
            names = "; ".join(f"node {n.index} ({n.host}) {_why_missing(n)}" for n in missing)
            return f"rendezvous timeout after {join_timeout} s: never joined: {names}"
        return (
            f"rendezvous timeout after {join_timeout} s on every node: they cannot reach "
            "each other at launch.rdzv_endpoint (check the port and the firewall)"
        )
    failed = [n for n in nodes if n.exit_code not in (0, None)]
    if failed:
        first = min(failed, key=lambda n: (n.ended_at or float("inf"), n.pid is None, n.index))
        more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        return (
            f"node {first.index} ({first.host}) exited with code {first.exit_code}{more}: "
            f"{first.last_line or 'no output'}"
        )
    return "a node failed"


def _why_missing(node: NodeState) -> str:
    if node.pid is None:
        said = f": {node.last_line}" if node.last_line else ""
        return f"(its agent never started there{said})"
    return f"(agent pid {node.pid} started but did not join: {node.last_line or 'no output'})"
