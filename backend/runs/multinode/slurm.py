"""The Slurm launcher: an sbatch script (shown exactly by ``trainwiz plan``), sbatch, follow.

The script asks for N nodes with one task each; ``srun`` starts one torchrun agent per node and
torchrun's c10d rendezvous runs on the first node of the allocation (``scontrol show hostnames``).
Its port, unless the preset names its own endpoint, is chosen by the batch step, which runs on
that node: a port the OS says is free there then, so two jobs on one head node never share one;
the script prints it (``TRAINWIZ_RDZV_ENDPOINT=host:port``) and the watcher records it.
Every value in the script comes from a validated preset field and is written with
``shlex.quote``; the only unquoted words are Slurm's own variables and that port. Each node
writes its own log (srun ``--output=.../node%t-%N.log``, one per task, the run directory being
on the cluster's shared file system, as Slurm homes are); the watcher copies those into
``train.log`` with the node named.
The job id, state and node list go into status.json, so a run started from one login can be
followed and stopped (``scancel``) from another (``squeue``, then ``scontrol``/``sacct``).
"""

from __future__ import annotations

import os
import re
import shlex
import time
from pathlib import Path
from typing import IO, Any

from backend import subproc
from backend.errors import BadInput
from backend.i18n import _
from backend.plan.rdzv import SLURM_ENDPOINT
from backend.plan.slurm_argv import sbatch_options
from backend.preset.schema import Preset
from backend.redact import read_secret_env, split_secret_env
from backend.rundir import NODES, STOP_REQUEST, RunDir, RunStatus, update_status
from backend.runs.multinode import samplers, slurm_states
from backend.runs.multinode.agents import NodeLog, NodeState, cause, finding

SCRIPT = "job.sbatch"
NODE_LOGS = NODES
ACTIVE = slurm_states.ACTIVE
_ENDPOINT = f"--rdzv_endpoint={SLURM_ENDPOINT}"  # the one word built from variables (_word)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ENDPOINT_MARK = "TRAINWIZ_RDZV_ENDPOINT="  # the batch log's line naming the port it chose
_SAID = re.compile(re.escape(ENDPOINT_MARK) + r"([A-Za-z0-9][A-Za-z0-9._-]*):([0-9]{1,5})")
# Asks the OS for a port free on this node now (bind to port 0), as torchrun will bind it.
_FREE_PORT = 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])'


def _word(arg: str) -> str:
    if arg == _ENDPOINT:
        return '--rdzv_endpoint="$head:$port"'
    return shlex.quote(arg)


def _port_lines(python: str) -> list[str]:
    """The batch step runs on the allocation's first node (Slurm's batch host), which is
    ``$head``: the port is asked for there, with no extra srun, and said in the batch log."""
    return [
        "# the rendezvous port: one the OS says is free on this node (the head) at this moment",
        f"port=$({shlex.quote(python)} -c {shlex.quote(_FREE_PORT)})",
        'export TRAINWIZ_RDZV_PORT="$port"',
        f'echo "{ENDPOINT_MARK}$head:$port"',
    ]


def endpoint_said(line: str) -> tuple[str, int] | None:
    """(head node, port) from the batch log's ``TRAINWIZ_RDZV_ENDPOINT=`` line, else None."""
    match = _SAID.fullmatch(line.strip())
    if not match or not 0 < int(match[2]) < 65536:
        return None
    return match[1], int(match[2])


def endpoint_in_log(run_dir: Path, job_id: str) -> tuple[str, int] | None:
    """The endpoint a job chose, from its batch log (a run followed without its watcher)."""
    try:
        with open(run_dir / f"slurm-{job_id}.out", "rb") as handle:
            head = handle.read(1 << 16).decode("utf-8", errors="replace")
    except OSError:
        return None
    for line in head.splitlines():
        said = endpoint_said(line)
        if said:
            return said
    return None


def _record_endpoint(run_dir: Path, said: tuple[str, int]) -> RunStatus:
    host, port = said
    return update_status(run_dir, master_port=port, rdzv_endpoint=f"{host}:{port}")


def sbatch_script(
    preset: Preset, agent: list[str], env: dict[str, str], cwd: str, run_dir: Path | str
) -> str:
    """The whole job script; ``agent`` carries ``--rdzv_endpoint=$head:$port`` when the job
    chooses the port (then the script's batch step does, on the head node)."""
    for name in env:
        if not _ENV_NAME.fullmatch(name):
            raise BadInput(
                _("launch.env: '{name}' is not a variable name (letters, digits, _)").format(
                    name=name
                )
            )
    lines = ["#!/bin/bash", f"# trainwiz: preset {preset.name}, one torchrun agent per node"]
    lines += [f"#SBATCH {option}" for option in sbatch_options(preset)]
    lines += ["set -euo pipefail"]
    lines += [f"module load {shlex.quote(module)}" for module in preset.launch.slurm.modules]
    public, secret = split_secret_env(env)
    lines += [f"export {name}={shlex.quote(value)}" for name, value in public.items()]
    lines += [
        f"# {name}: from sbatch's environment (trainwiz passes it; never written here)"
        for name in secret
    ]
    lines += [
        # sed, not head -n 1: head leaves early and, with pipefail, scontrol's later write (a
        # long node list) gets SIGPIPE and the script exits 141 (half the tries with 2000 names)
        'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)',
        *(_port_lines(samplers.python_beside(agent[0])) if _ENDPOINT in agent else []),
        f"cd {shlex.quote(cwd)}",
        f"mkdir -p {shlex.quote(str(Path(run_dir) / NODE_LOGS))}",
        *samplers.slurm_lines(agent[0], run_dir, env, preset.launch.nnodes),
    ]
    tasks = preset.launch.slurm.ntasks_per_node  # one agent per task; %t: the task's number
    srun = ["srun", f"--nodes={preset.launch.nnodes}", f"--ntasks-per-node={tasks}"]
    srun += ["--kill-on-bad-exit=1", f"--output={Path(run_dir) / NODE_LOGS}/node%t-%N.log"]
    words = [shlex.quote(w) for w in srun] + [_word(w) for w in agent]
    command = words[0]
    for word in words[1:]:  # one option (with its value) per line, as people write them
        command += (" \\\n    " if word.startswith(("--", "'--")) else " ") + word
    lines.append(command)
    return "\n".join(lines) + "\n"


def sbatch_argv(run_dir: Path | str, run_id: str, cwd: str) -> list[str]:
    for path in (str(run_dir), cwd):
        if "%" in path:
            raise BadInput(
                _("{path}: Slurm reads '%' in a path as a pattern: use another path").format(
                    path=path
                )
            )
    return [
        "sbatch",
        "--parsable",
        f"--job-name=trainwiz-{run_id}",
        f"--output={run_dir}/slurm-%j.out",
        f"--comment=trainwiz-run={run_dir}",  # how `attach JOBID` finds it from any login
        f"--chdir={cwd}",
        str(Path(run_dir) / SCRIPT),
    ]


_query = slurm_states.query  # attach by job id (jobs.py) reads Slurm through it too
job_info = slurm_states.job_info
_exit_code = slurm_states.exit_code


class _Tail:
    """New complete lines of a growing file."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset, self.partial = path, 0, b""

    def lines(self, final: bool = False) -> list[str]:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except OSError:
            return []
        self.offset += len(data)
        data = self.partial + data
        *complete, self.partial = data.split(b"\n")
        if final and self.partial:
            complete.append(self.partial)
            self.partial = b""
        return [c.decode("utf-8", errors="replace") for c in complete]


class _Follower:
    """Copies the batch log and every node's log into train.log, the node named."""

    def __init__(self, run_dir: Path, nlog: NodeLog, job_id: str) -> None:
        self.run_dir, self.nlog, self.job_id = run_dir, nlog, job_id
        self.batch = _Tail(run_dir / f"slurm-{job_id}.out")
        self.tails: dict[Path, tuple[_Tail, NodeState]] = {}

    def poll(self, final: bool = False) -> None:
        for line in self.batch.lines(final):
            self.nlog.tagged(f"slurm {self.job_id}", line)
            said = endpoint_said(line)
            if said:  # the port the job chose: status.json's master_port and rdzv_endpoint
                _record_endpoint(self.run_dir, said)
        for path in RunDir(self.run_dir).node_logs():
            if path not in self.tails:
                match = re.fullmatch(r"node(\d+)-(.+)\.log", path.name)
                if not match:
                    continue
                node = NodeState(index=int(match[1]), host=match[2], state="running")
                self.nlog.nodes.append(node)
                self.tails[path] = (_Tail(path), node)
            tail, node = self.tails[path]
            for line in tail.lines(final):
                self.nlog.line(node, line)


def run(run_dir: Path, spec: dict[str, Any], log: IO[bytes]) -> tuple[int, str, str | None]:
    """Submit the job, follow it to its end; ``stop`` (a stop marker) becomes ``scancel``."""
    nlog = NodeLog(log, [])
    nlog.note(f"sbatch: {shlex.join(spec['sbatch'])}")
    secrets = read_secret_env(run_dir)  # sbatch exports its environment to the job
    proc = subproc.probe(spec["sbatch"], 120, env={**os.environ, **secrets} if secrets else None)
    if proc.error is not None:
        raise proc.error  # no sbatch, or no answer: the watcher records it, as it always did
    if proc.code != 0:
        nlog.note(f"sbatch refused the job: {proc.stderr.strip()}")
        return 1, f"sbatch refused the job: {proc.stderr.strip()}", "slurm_refused"
    job_id = proc.stdout.strip().split(";")[0]
    update_status(
        run_dir,
        slurm_job_id=job_id,
        slurm_state="PENDING",
        step="train",
        message=f"slurm job {job_id} pending",
    )
    nlog.note(f"slurm job {job_id} submitted")
    follower = _Follower(run_dir, nlog, job_id)
    last: dict[str, str] = {}
    cancelled = False
    while True:
        info = job_info(job_id)
        if info != last:
            _record_live(run_dir, nlog, job_id, info, spec)
            last = info
        follower.poll()
        if samplers.refresh(run_dir, nlog.nodes) or nlog.changed.is_set():
            nlog.changed.clear()
            update_status(run_dir, nodes=nlog.records())
        if (run_dir / STOP_REQUEST).exists() and not cancelled:
            cancelled = True
            nlog.note(f"stop requested: scancel {job_id}")
            _scancel(job_id)
        if info["state"] not in ACTIVE and info["state"] != "UNKNOWN":
            break
        time.sleep(1.0)
    time.sleep(0.5)
    follower.poll(final=True)
    info = slurm_states.final_info(job_id) if info.get("source") == "squeue" else info
    nlog.note(f"slurm job {job_id} ended: {info['state']} (from {info.get('source')})")
    for node in nlog.nodes:  # the job's end is every node's end
        node.state = "exited"
    samplers.finish(run_dir, nlog.nodes)
    update_status(run_dir, nodes=nlog.records(), slurm_state=info["state"])
    return _ended(run_dir, nlog, job_id, info, spec)


def _record_live(
    run_dir: Path, nlog: NodeLog, job_id: str, info: dict[str, str], spec: dict[str, Any]
) -> None:
    changes: dict[str, Any] = {"slurm_state": info["state"], "slurm_nodes": info["nodes"]}
    if info["state"] == "RUNNING":
        changes.update(state="running", message=f"slurm job {job_id} on {info['nodes']}")
    elif info["state"] == "PENDING":
        words = slurm_states.pending_words(
            info.get("reason", ""), int(spec.get("nnodes", 1)), spec.get("partition")
        )
        changes.update(
            slurm_reason=info.get("reason", ""), message=f"slurm job {job_id} pending: {words}"
        )
    update_status(run_dir, **changes)
    nlog.note(f"slurm job {job_id}: {info['state']} {info['nodes']}".rstrip())


def _ended(
    run_dir: Path, nlog: NodeLog, job_id: str, info: dict[str, str], spec: dict[str, Any]
) -> tuple[int, str, str | None]:
    kind, message, why = slurm_states.ending(info, job_id, spec.get("time_limit"))
    if kind == "finished":
        return 0, "", None
    if kind == "stopped":
        if (run_dir / STOP_REQUEST).exists():  # trainwiz's own stop: "stopped on request"
            return 1, "", "stopped"
        message += ", not by trainwiz: recorded as stopped"  # the user's own scancel
        nlog.note(message)
        (run_dir / STOP_REQUEST).touch()
        return 1, message, "stopped"
    code = slurm_states.exit_code(info)
    if kind == "failed":
        return code, message, why
    nodes = sorted(nlog.nodes, key=lambda n: n.index)
    found = finding(nodes, int(spec.get("join_timeout", 0))) if nodes else "no node started"
    return code, f"{message}: {found}", cause(nodes)


def cancel(status: RunStatus) -> None:
    job_id = (status.model_extra or {}).get("slurm_job_id")
    if job_id:
        _scancel(str(job_id))


def _scancel(job_id: str) -> None:
    done = subproc.probe(["scancel", job_id], 60)  # its answer is not needed: the state says
    if done.error is not None:
        raise done.error  # no scancel, or no answer: raised, as it always was


def refresh_job(run_dir: Path, status: RunStatus) -> RunStatus:
    """The state from Slurm itself, for a run whose watcher is gone or on another login."""
    job_id = str((status.model_extra or {}).get("slurm_job_id"))
    said = endpoint_in_log(run_dir, job_id)
    if said and (status.model_extra or {}).get("rdzv_endpoint") != f"{said[0]}:{said[1]}":
        status = _record_endpoint(run_dir, said)  # the port the job chose, said in its log
    info = job_info(job_id)
    if info["state"] in ACTIVE or info["state"] == "UNKNOWN":
        if info["state"] != (status.model_extra or {}).get("slurm_state"):
            return update_status(run_dir, slurm_state=info["state"], slurm_nodes=info["nodes"])
        return status
    kind, message, why = slurm_states.ending(info, job_id, None)
    code = slurm_states.exit_code(info)
    stopped = (run_dir / STOP_REQUEST).exists() or kind == "stopped"
    state = "stopped" if stopped else ("finished" if kind == "finished" else "failed")
    return update_status(
        run_dir,
        state=state,
        exit_code=code,
        ended_at=time.time(),
        slurm_state=info["state"],
        cause="stopped" if stopped else (why or ("exit_code" if code else None)),
        message=(f"slurm job {job_id} {info['state']}" if kind == "finished" else message)
        + " (read from Slurm: the watcher is not here)",
    )
