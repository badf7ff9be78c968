"""The SSH launcher: node 0's watcher starts one torchrun agent per node over real OpenSSH.

Every ssh call is an argv list with ``BatchMode=yes`` (a missing key fails at once instead of
asking for a password), the user's own keys and known_hosts (or the preset's files), and ``--``
before the host. The command on the node is the only shell text: it is made with
``shlex.join`` from the agent's argv, so every value reaches the node as one quoted word. The
node's shell prints its pid first (sshd makes each session its own process group, and ``exec``
keeps that pid for torchrun), which is what ``stop`` signals on every node.
"""

from __future__ import annotations

import shlex
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import IO, Any

from backend import subproc
from backend.plan.ssh_argv import ssh_base
from backend.preset.schema import Preset
from backend.redact import read_secret_env, split_secret_env
from backend.rundir import STOP_REQUEST, update_status
from backend.runs.multinode import samplers
from backend.runs.multinode.agents import PID_MARK, NodeLog, NodeState, cause, finding

SIGNAL_TIMEOUT_S = 30.0  # a node that does not take a signal within this is left to the KILL


def stdin_reads(names: list[str]) -> str:
    """Shell text that reads each secret variable, one line each, from ssh's stdin (the
    watcher writes the values there): a secret never is a word of any command line."""
    return "".join(f"IFS= read -r {name} && export {name} && " for name in names)


def remote_command(argv: list[str], env: dict[str, str], cwd: str) -> str:
    """What the node's shell runs: its pid, then the agent in ``cwd`` with ``env``; secret
    values (``backend.redact.split_secret_env``) come on stdin, not in the text."""
    public, secret = split_secret_env(env)
    assignments = [f"{key}={value}" for key, value in public.items()]
    agent = shlex.join(["env", *assignments, *argv])
    reads = stdin_reads(list(secret))
    return f"echo {PID_MARK}$$; {reads}cd {shlex.quote(cwd)} && exec {agent} 2>&1"


def send_secrets(proc: subprocess.Popen[bytes], names: list[str], values: dict[str, str]) -> None:
    """Write the node's secret values on its ssh's stdin (the order of ``stdin_reads``)."""
    if proc.stdin is None:
        return
    try:
        proc.stdin.write(b"".join(values.get(n, "").encode() + b"\n" for n in names))
        proc.stdin.close()
    except OSError:
        pass  # the node went away: its reader sees ssh's exit


def node_specs(
    preset: Preset, agent: list[str], env: dict[str, str], cwd: str
) -> list[dict[str, Any]]:
    """launch.json's ``nodes``: the exact ssh argv for each node, node 0 first."""
    config = preset.launch.ssh
    out = []
    for index, node in enumerate(preset.launch.nodes):
        base = ssh_base(config, node)
        out.append(
            {
                "index": index,
                "host": node,
                "ssh": base,
                "argv": [*base, remote_command(agent, env, cwd)],
                "stdin_env": list(split_secret_env(env)[1]),
                "sampler": samplers.ssh_argv(base, agent[0], env, index, node),
            }
        )
    return out


def signal_nodes(nodes: list[dict[str, Any]], states: list[NodeState], sig: str) -> None:
    """``kill -SIG -- -PID`` on every node whose agent told its pid (in parallel); a node spec
    with its own ``signal`` commands (a container: docker_nodes) is signalled with those."""
    calls = [
        [
            *spec["ssh"],
            spec.get("signal", {}).get(sig) or f"kill -{sig} -- -{state.pid} 2>/dev/null || true",
        ]
        for spec, state in zip(nodes, states)
        if state.pid and state.state != "exited"
    ]
    subproc.run_all(calls, SIGNAL_TIMEOUT_S)


def _reader(proc: subprocess.Popen[bytes], node: NodeState, nlog: NodeLog) -> None:
    assert proc.stdout is not None
    for raw in iter(proc.stdout.readline, b""):
        nlog.line(node, raw.decode("utf-8", errors="replace"))
    node.exit_code = proc.wait()
    node.ended_at = time.monotonic()
    node.state = "exited"
    nlog.changed.set()


def run(run_dir: Path, spec: dict[str, Any], log: IO[bytes]) -> tuple[int, str, str | None]:
    """Start every node's agent, follow them, stop them all when one fails or a stop comes."""
    specs: list[dict[str, Any]] = spec["nodes"]
    states = [NodeState(index=s["index"], host=s["host"]) for s in specs]
    nlog = NodeLog(log, states)
    procs: list[subprocess.Popen[bytes]] = []
    gpus = samplers.SshSamplers(specs, states, nlog)  # one GPU sampler per node, beside it
    try:
        gpus.start()
        return _follow(run_dir, spec, specs, states, nlog, procs, gpus)
    except BaseException:
        signal_nodes(specs, states, "TERM")  # whatever broke here, nothing stays running there
        for proc in procs:
            subproc.signal_group(proc, signal.SIGKILL)
        raise
    finally:
        gpus.stop()
        samplers.finish(run_dir, states)
        update_status(run_dir, nodes=nlog.records())


def _follow(
    run_dir: Path,
    spec: dict[str, Any],
    specs: list[dict[str, Any]],
    states: list[NodeState],
    nlog: NodeLog,
    procs: list[subprocess.Popen[bytes]],
    gpus: samplers.SshSamplers,
) -> tuple[int, str, str | None]:
    threads = []
    for node_spec, state in zip(specs, states):
        nlog.note(f"node {state.index} ({state.host}): {shlex.join(node_spec['argv'])}")
        names = list(node_spec.get("stdin_env") or [])
        proc = subproc.spawn(  # its own session: a ^C or SIGHUP here never reaches it
            node_spec["argv"], stdin=subprocess.PIPE if names else subprocess.DEVNULL, text=False
        )
        procs.append(proc)
        if names:
            send_secrets(proc, names, read_secret_env(run_dir))
        thread = threading.Thread(target=_reader, args=(proc, state, nlog), daemon=True)
        thread.start()
        threads.append(thread)
    update_status(
        run_dir,
        state="running",
        message=f"training on {len(states)} nodes",
        pid=procs[0].pid,
        pgid=procs[0].pid,
        step="train",
        nodes=nlog.records(),
    )
    ending_since: float | None = None
    killed = False
    timeout = float(spec.get("stop_timeout", 30))
    while any(s.state != "exited" for s in states):
        nlog.changed.wait(0.5)
        if samplers.refresh(run_dir, states) or nlog.changed.is_set():
            nlog.changed.clear()
            update_status(run_dir, nodes=nlog.records())
        stopping = (run_dir / STOP_REQUEST).exists()
        failed = any(s.state == "exited" and s.exit_code != 0 for s in states)
        if (stopping or failed) and ending_since is None:
            why = "stop requested" if stopping else "a node failed"
            nlog.note(f"{why}: stopping the agents on every node")
            ending_since = time.monotonic()
            signal_nodes(specs, states, "TERM")
            for proc, state in zip(procs, states):
                if state.pid is None:  # never started there: end our ssh client (and its proxy)
                    subproc.signal_group(proc, signal.SIGTERM)
        elif ending_since is not None and not killed and time.monotonic() - ending_since > timeout:
            killed = True
            signal_nodes(specs, states, "KILL")
            for proc in procs:
                subproc.signal_group(proc, signal.SIGKILL)
    for thread in threads:
        thread.join(timeout=5)
    update_status(run_dir, nodes=nlog.records())
    codes = [s.exit_code or 0 for s in states]
    code = next((c for c in codes if c != 0), 0)
    if not code:
        return 0, "", None
    named = cause(states)
    if named == "node_unreachable":
        code = 1  # ssh's 255 is not the training's exit code
    return code, finding(states, int(spec.get("join_timeout", 0))), named
