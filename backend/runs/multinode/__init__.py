"""Multi-node runs (docs/multi-node.md): one preset on N machines through torchrun's c10d
rendezvous, its agents started over SSH (``launch.scheduler: ssh``) or by Slurm (``slurm``).

The single-node code keeps its shape: the launcher, the watcher and ``stop`` each hand a
multi-node run to this package with a one-line dispatch, and everything else (the run dir,
status.json, train.log, metrics.jsonl from rank 0) is the same contract.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import IO, Any

from backend.i18n import _
from backend.plan import Plan, PlanStep
from backend.preset.schema import Preset
from backend.runs.multinode import docker_nodes, samplers, slurm, ssh
from backend.runs.multinode.agents import agent_argv
from backend.runs.ports import any_free_port, port_free
from backend.runs.rundir import METRICS, STOP_REQUEST, RunStatus, read_status, update_status

__all__ = ["is_multinode", "launch_spec", "plan_steps", "refresh", "run", "stop_run"]


def is_multinode(status: RunStatus) -> bool:
    return (status.model_extra or {}).get("scheduler") in ("ssh", "slurm")


def _endpoint(preset: Preset, notes: list[str] | None) -> str:
    launch = preset.launch
    if launch.rdzv_endpoint:
        return launch.rdzv_endpoint
    port = launch.master_port
    if launch.scheduler == "slurm":
        return f"$head:{port}"  # the first node of the allocation, known only in the job
    if notes is not None and not port_free(port):  # trainwiz runs on node 0
        port = any_free_port()
        notes.append(
            f"launch.master_port {launch.master_port} is in use here: rendezvous on {port}"
        )
    return f"{ssh.split_node(launch.nodes[0], launch.ssh.port)[1]}:{port}"


def _agent(
    preset: Preset, train: PlanStep, torchrun: str, rdzv_id: str, notes: list[str] | None
) -> list[str]:
    return agent_argv(
        train.argv,
        torchrun=torchrun,
        nnodes=preset.launch.nnodes,
        endpoint=_endpoint(preset, notes),
        rdzv_id=rdzv_id,
        join_timeout=preset.launch.rdzv_timeout,
    )


def _env(train: PlanStep, run_dir: Path | str) -> dict[str, str]:
    # LOGLEVEL=INFO makes torchrun say "Rendezvous complete", which is how a join is seen.
    metrics = str(Path(run_dir) / METRICS)
    return {**train.env, "TRAINWIZ_METRICS": metrics, "PYTHONUNBUFFERED": "1", "LOGLEVEL": "INFO"}


def _torchrun(preset: Preset) -> str:
    """The torchrun the launch will use (so the plan is exact), or plain 'torchrun'."""
    from backend.errors import BadInput
    from backend.runs.launch import training_bin

    if preset.launch.runner == "docker":
        return "torchrun"  # the image's own
    try:
        return str(training_bin(preset))
    except BadInput:
        return "torchrun"


def plan_steps(preset: Preset, run_dir: Path | None, train: PlanStep) -> list[PlanStep]:
    """The plan's per-node steps: each node's ssh command, or the sbatch script and sbatch."""
    base: Path | str = run_dir if run_dir is not None else "<run_dir>"
    rdzv_id = run_dir.name if run_dir is not None else "<run_id>"
    agent = _agent(preset, train, _torchrun(preset), rdzv_id, None)
    env, cwd = _env(train, base), preset.launch.workdir or os.getcwd()
    train.note = _("run on every node by the steps below (c10d rendezvous instead of ranks)")
    if preset.launch.scheduler == "ssh":
        steps = []
        for node in _node_specs(preset, base, agent, env, cwd):
            index, host = node["index"], node["host"]
            steps.append(
                PlanStep(
                    id=f"node{index}",
                    group="train",
                    title=_("Start node {index}'s torchrun agent on {host} over SSH").format(
                        index=index, host=host
                    ),
                    argv=node["argv"],
                )
            )
            steps.append(
                PlanStep(
                    id=f"node{index}-gpus",
                    group="train",
                    title=f"Start node {index}'s GPU sampler on {host} (nodes/node{index}/gpu.jsonl)",
                    argv=node["sampler"],
                )
            )
        return steps
    script = slurm.sbatch_script(preset, agent, env, cwd, base)
    return [
        PlanStep(
            id="slurm-script",
            group="train",
            title=_("The sbatch script trainwiz writes to {path}").format(
                path=f"{base}/{slurm.SCRIPT}"
            ),
            argv=["cat", f"{base}/{slurm.SCRIPT}"],
            note=script.rstrip("\n"),
        ),
        PlanStep(
            id="sbatch",
            group="train",
            title=_("Submit it; trainwiz then follows the job (squeue, scontrol)"),
            argv=slurm.sbatch_argv(base, rdzv_id, cwd),
        ),
    ]


def _node_specs(
    preset: Preset, run_dir: Path | str, agent: list[str], env: dict[str, str], cwd: str
) -> list[dict[str, Any]]:
    """Each node's ssh argv: its agent on the host, or in a container (runner: docker)."""
    if preset.launch.runner == "docker":
        nodes = docker_nodes.node_specs(preset, run_dir, agent, env)
        for node in nodes:  # the sampler runs on the node's host (python3), beside the container
            node["sampler"] = samplers.ssh_argv(
                node["ssh"], "python3", env, node["index"], node["host"]
            )
        return nodes
    return ssh.node_specs(preset, agent, env, cwd)


def launch_spec(
    preset: Preset, plan: Plan, run_dir: Path, spec: dict[str, Any], torchrun: str
) -> dict[str, Any]:
    """launch.json for a multi-node run (and, for Slurm, the job script beside it)."""
    train = plan.step("train")
    agent = _agent(preset, train, torchrun, run_dir.name, spec["notes"])
    env, cwd = _env(train, run_dir), preset.launch.workdir or os.getcwd()
    spec.update(scheduler=preset.launch.scheduler, join_timeout=preset.launch.rdzv_timeout)
    samplers.install(run_dir)  # every node's GPU sampler runs from the run dir, like the entry
    if preset.launch.scheduler == "ssh":
        spec["nodes"] = _node_specs(preset, run_dir, agent, env, cwd)
    else:
        (run_dir / slurm.SCRIPT).write_text(
            slurm.sbatch_script(preset, agent, env, cwd, run_dir), encoding="utf-8"
        )
        spec["sbatch"] = slurm.sbatch_argv(run_dir, run_dir.name, cwd)
    return spec


def run(run_dir: Path, spec: dict[str, Any], log: IO[bytes]) -> tuple[int, str]:
    """The watcher's training step for a multi-node run: (exit code, finding if it failed)."""
    update_status(run_dir, scheduler=spec["scheduler"], watcher_host=socket.gethostname())
    if spec["scheduler"] == "ssh" and spec.get("runner") == "docker":
        return docker_nodes.run(run_dir, spec, log)
    if spec["scheduler"] == "ssh":
        return ssh.run(run_dir, spec, log)
    return slurm.run(run_dir, spec, log)


def refresh(run_dir: Path, status: RunStatus, watcher_here: bool) -> RunStatus | None:
    """A Slurm run's state from Slurm when its watcher is not on this machine (another login);
    None: the usual reconstruction applies."""
    extra = status.model_extra or {}
    if not extra.get("slurm_job_id"):
        return None
    if watcher_here and extra.get("watcher_host") == socket.gethostname():
        return status
    return slurm.refresh_job(run_dir, status)


def stop_run(run_dir: Path, timeout: float, wait: float) -> RunStatus:
    """Stop every node: the watcher does it (scancel, or kill on each node over SSH) when it
    is alive; otherwise this does it from what status.json recorded."""
    from backend.runs.control import refresh as refresh_status
    from backend.runs.control import watcher_alive

    (run_dir / STOP_REQUEST).touch()
    status = read_status(run_dir)
    extra = status.model_extra or {}
    if extra.get("slurm_job_id"):
        slurm.cancel(status)  # harmless twice; works from any login of the cluster
    elif not watcher_alive(status):
        _stop_ssh_nodes(run_dir, status)
    deadline = time.monotonic() + timeout + wait
    while time.monotonic() < deadline:
        status = refresh_status(run_dir)
        if status.final:
            break
        time.sleep(0.2)
    nodes = _launched_nodes(run_dir)
    if any(node.get("container") for node in nodes):
        docker_nodes.remove_containers(nodes)  # exactly this run's, by name, on every node
    return status


def _launched_nodes(run_dir: Path) -> list[dict[str, Any]]:
    import json

    from backend.runs.rundir import LAUNCH

    try:
        spec = json.loads((run_dir / LAUNCH).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    nodes = spec.get("nodes", []) if isinstance(spec, dict) else []
    return [n for n in nodes if isinstance(n, dict)]


def _stop_ssh_nodes(run_dir: Path, status: RunStatus) -> None:
    from backend.runs.multinode.agents import NodeState

    states = [NodeState(**n) for n in (status.model_extra or {}).get("nodes", [])]
    nodes = _launched_nodes(run_dir)
    ssh.signal_nodes(nodes, states, "TERM")
    samplers.signal_samplers(nodes, (status.model_extra or {}).get("nodes", []))
