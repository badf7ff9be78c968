"""The Slurm launcher: an sbatch script (shown exactly by ``trainwiz plan``), sbatch, follow.

The script asks for N nodes with one task each; ``srun`` starts one torchrun agent per node and
torchrun's c10d rendezvous runs on the first node of the allocation (``scontrol show hostnames``).
Every value in the script comes from a validated preset field and is written with
``shlex.quote``; the only unquoted words are Slurm's own variables. Each node writes its own
log (srun ``--output=.../node%n-%N.log``, the run directory being on the cluster's shared file
system, as Slurm homes are); the watcher copies those into ``train.log`` with the node named.
The job id, state and node list go into status.json, so a run started from one login can be
followed and stopped (``scancel``) from another (``squeue``, then ``scontrol``/``sacct``).
"""

from __future__ import annotations

import re
import shlex
import subprocess
import time
from pathlib import Path
from typing import IO, Any

from backend.errors import BadInput
from backend.i18n import _
from backend.preset.schema import Preset
from backend.runs.multinode import samplers
from backend.runs.multinode.agents import NodeLog, NodeState, finding
from backend.runs.rundir import STOP_REQUEST, RunStatus, update_status

SCRIPT = "job.sbatch"
NODE_LOGS = "nodes"
ACTIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING")
_HEAD = "--rdzv_endpoint=$head"  # the one word built from a Slurm variable (see _word)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _word(arg: str) -> str:
    if arg.startswith(_HEAD):
        return f'--rdzv_endpoint="$head"{shlex.quote(arg[len(_HEAD) :])}'
    return shlex.quote(arg)


def sbatch_options(preset: Preset) -> list[str]:
    slurm = preset.launch.slurm
    options = [f"--nodes={preset.launch.nnodes}", "--ntasks-per-node=1"]
    for flag, value in (
        ("partition", slurm.partition),
        ("account", slurm.account),
        ("qos", slurm.qos),
        ("time", slurm.time_limit),
        ("gpus-per-node", slurm.gpus_per_node),
        ("cpus-per-task", slurm.cpus_per_task),
        ("mem", slurm.mem),
    ):
        if value is not None:
            options.append(f"--{flag}={value}")
    return [*options, *slurm.extra_options]


def sbatch_script(
    preset: Preset, agent: list[str], env: dict[str, str], cwd: str, run_dir: Path | str
) -> str:
    """The whole job script; ``agent`` carries ``--rdzv_endpoint=$head:PORT`` when defaulted."""
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
    lines += [f"export {name}={shlex.quote(value)}" for name, value in env.items()]
    lines += [
        'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        f"cd {shlex.quote(cwd)}",
        f"mkdir -p {shlex.quote(str(Path(run_dir) / NODE_LOGS))}",
        *samplers.slurm_lines(agent[0], run_dir, env, preset.launch.nnodes),
    ]
    srun = ["srun", f"--nodes={preset.launch.nnodes}", "--ntasks-per-node=1"]
    srun += ["--kill-on-bad-exit=1", f"--output={Path(run_dir) / NODE_LOGS}/node%n-%N.log"]
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


def _query(argv: list[str]) -> str:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return proc.stdout.strip() if proc.returncode == 0 else ""


def job_info(job_id: str) -> dict[str, str]:
    """``{"state", "nodes", "exit"}`` from squeue (live), else scontrol, else sacct."""
    live = _query(["squeue", "-h", "-j", job_id, "-o", "%T|%N"])
    if live:
        state, _, nodes = live.splitlines()[0].partition("|")
        return {"state": state, "nodes": nodes, "exit": ""}
    shown = _query(["scontrol", "-o", "show", "job", job_id])
    if shown:
        fields = dict(re.findall(r"(\w+)=(\S*)", shown))
        state = fields.get("JobState", "UNKNOWN")
        return {
            "state": state,
            "nodes": fields.get("NodeList", ""),
            "exit": fields.get("ExitCode", ""),
        }
    acct = _query(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "State,NodeList,ExitCode"])
    if acct:
        state, nodes, code = [*acct.splitlines()[0].split("|"), "", "", ""][:3]
        return {"state": state.split()[0], "nodes": nodes, "exit": code}
    return {"state": "UNKNOWN", "nodes": "", "exit": ""}


def _exit_code(info: dict[str, str]) -> int:
    code, _, sig = info["exit"].partition(":")
    if code.isdigit() and int(code):
        return int(code)
    if sig.isdigit() and int(sig):
        return 128 + int(sig)
    return 0 if info["state"] == "COMPLETED" else 1


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
        for path in sorted((self.run_dir / NODE_LOGS).glob("node*-*.log")):
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


def run(run_dir: Path, spec: dict[str, Any], log: IO[bytes]) -> tuple[int, str]:
    """Submit the job, follow it to its end; ``stop`` (a stop marker) becomes ``scancel``."""
    nlog = NodeLog(log, [])
    nlog.note(f"sbatch: {shlex.join(spec['sbatch'])}")
    proc = subprocess.run(spec["sbatch"], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        nlog.note(f"sbatch refused the job: {proc.stderr.strip()}")
        return proc.returncode or 1, f"sbatch refused the job: {proc.stderr.strip()}"
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
            running = info["state"] == "RUNNING"
            changes: dict[str, Any] = {"slurm_state": info["state"], "slurm_nodes": info["nodes"]}
            if running:
                changes.update(state="running", message=f"slurm job {job_id} on {info['nodes']}")
            update_status(run_dir, **changes)
            nlog.note(f"slurm job {job_id}: {info['state']} {info['nodes']}".rstrip())
            last = info
        follower.poll()
        if samplers.refresh(run_dir, nlog.nodes) or nlog.changed.is_set():
            nlog.changed.clear()
            update_status(run_dir, nodes=nlog.records())
        if (run_dir / STOP_REQUEST).exists() and not cancelled:
            cancelled = True
            nlog.note(f"stop requested: scancel {job_id}")
            subprocess.run(["scancel", job_id], capture_output=True, timeout=60)
        if info["state"] not in ACTIVE and info["state"] != "UNKNOWN":
            break
        time.sleep(1.0)
    time.sleep(0.5)
    follower.poll(final=True)
    code = _exit_code(info)
    for node in nlog.nodes:  # the job's end is every node's end
        node.state = "exited"
    samplers.finish(run_dir, nlog.nodes)
    update_status(run_dir, nodes=nlog.records())
    if code == 0:
        return 0, ""
    nodes = sorted(nlog.nodes, key=lambda n: n.index)
    why = finding(nodes, int(spec.get("join_timeout", 0))) if nodes else "no node started"
    return code, f"slurm job {job_id} {info['state']}: {why}"


def cancel(status: RunStatus) -> None:
    job_id = (status.model_extra or {}).get("slurm_job_id")
    if job_id:
        subprocess.run(["scancel", str(job_id)], capture_output=True, timeout=60)


def refresh_job(run_dir: Path, status: RunStatus) -> RunStatus:
    """The state from Slurm itself, for a run whose watcher is gone or on another login."""
    job_id = str((status.model_extra or {}).get("slurm_job_id"))
    info = job_info(job_id)
    if info["state"] in ACTIVE or info["state"] == "UNKNOWN":
        if info["state"] != (status.model_extra or {}).get("slurm_state"):
            return update_status(run_dir, slurm_state=info["state"], slurm_nodes=info["nodes"])
        return status
    code = _exit_code(info)
    stopped = (run_dir / STOP_REQUEST).exists() or info["state"].startswith("CANCELLED")
    state = "stopped" if stopped else ("finished" if code == 0 else "failed")
    return update_status(
        run_dir,
        state=state,
        exit_code=code,
        ended_at=time.time(),
        slurm_state=info["state"],
        message=f"slurm job {job_id} {info['state']} (read from Slurm: the watcher is not here)",
    )
