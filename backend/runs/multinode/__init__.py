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
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from backend.i18n import _
from backend.plan import Plan, PlanStep
from backend.plan.rdzv import rdzv_endpoint
from backend.preset.schema import Preset
from backend.redact import split_secret_env, write_secret_env
from backend.rundir import METRICS, STOP_REQUEST, RunDir, RunStatus, read_status, update_status
from backend.runs.multinode import counting, docker_nodes, samplers, slurm, ssh
from backend.runs.multinode.agents import NodeState, agent_argv
from backend.runs.procs import watcher_alive

__all__ = ["is_multinode", "launch_spec", "plan_steps", "refresh", "run", "stop_run"]


def is_multinode(status: RunStatus) -> bool:
    return (status.model_extra or {}).get("scheduler") in ("ssh", "slurm")


def _agent(
    preset: Preset, train: PlanStep, torchrun: str, rdzv_id: str, port: int | None
) -> list[str]:
    """Every node's torchrun agent; ``port`` is the rendezvous port the launch spec decided
    (``backend.runs.spec.decide_port``), the same for the printed plan and launch.json; None:
    the Slurm job chooses it on its head node (``$head:$port``)."""
    agents = preset.launch.nnodes  # rendezvous members: one agent per node (Slurm: per task)
    if preset.launch.scheduler == "slurm":
        agents *= preset.launch.slurm.ntasks_per_node
    return agent_argv(
        train.argv,
        torchrun=torchrun,
        nnodes=agents,
        endpoint=rdzv_endpoint(preset, port),
        rdzv_id=rdzv_id,
        join_timeout=preset.launch.rdzv_timeout,
    )


def _env(train: PlanStep, run_dir: Path | str) -> dict[str, str]:
    # LOGLEVEL=INFO makes torchrun say "Rendezvous complete", which is how a join is seen.
    metrics = str(Path(run_dir) / METRICS)
    return {**train.env, "TRAINWIZ_METRICS": metrics, "PYTHONUNBUFFERED": "1", "LOGLEVEL": "INFO"}


def plan_steps(
    preset: Preset, run_dir: Path | None, train: PlanStep, torchrun: str, port: int | None
) -> list[PlanStep]:
    """The plan's per-node steps: each node's ssh command, or the sbatch script and sbatch.
    ``torchrun`` and ``port`` are the launch spec's decisions, as launch.json gets them."""
    base: Path | str = run_dir if run_dir is not None else "<run_dir>"
    rdzv_id = run_dir.name if run_dir is not None else "<run_id>"
    agent = _agent(preset, train, torchrun, rdzv_id, port)
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
                    title=_(
                        "Start node {index}'s GPU sampler on {host} (nodes/node{index}/gpu.jsonl)"
                    ).format(index=index, host=host),
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
    preset: Preset,
    plan: Plan,
    run_dir: Path,
    spec: dict[str, Any],
    torchrun: str,
    port: int | None,
) -> dict[str, Any]:
    """launch.json for a multi-node run (and, for Slurm, the job script beside it)."""
    train = plan.step("train")
    agent = _agent(preset, train, torchrun, run_dir.name, port)
    env, cwd = _env(train, run_dir), preset.launch.workdir or os.getcwd()
    spec.update(scheduler=preset.launch.scheduler, join_timeout=preset.launch.rdzv_timeout)
    samplers.install(run_dir)  # every node's GPU sampler runs from the run dir, like the entry
    # Secret values reach the nodes over ssh's stdin or in sbatch's environment, from a 0600
    # file: never in launch.json, the job script or a command line (backend/redact.py).
    secrets = split_secret_env({**preset.container.env, **env})[1]
    if secrets:
        write_secret_env(run_dir, secrets)
    if preset.launch.scheduler == "ssh":
        spec["nodes"] = _node_specs(preset, run_dir, agent, env, cwd)
    else:
        (run_dir / slurm.SCRIPT).write_text(
            slurm.sbatch_script(preset, agent, env, cwd, run_dir), encoding="utf-8"
        )
        spec["sbatch"] = slurm.sbatch_argv(run_dir, run_dir.name, cwd)
        config = preset.launch.slurm  # what a pending reason and an ending are told against
        spec.update(
            nnodes=preset.launch.nnodes, partition=config.partition, time_limit=config.time_limit
        )
    return spec


def run(run_dir: Path, spec: dict[str, Any], log: IO[bytes]) -> tuple[int, str, str | None]:
    """The watcher's training step for a multi-node run: (exit code, finding if it failed,
    the record's cause when the nodes name one: node_unreachable, slurm_timeout, ...)."""
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


def stop_run(
    run_dir: Path, timeout: float, wait: float, refresh_status: Callable[[Path], RunStatus]
) -> RunStatus:
    """Stop every node: the watcher does it (scancel, or kill on each node over SSH) when it
    is alive; otherwise this does it from what status.json recorded. ``refresh_status`` is
    ``backend.runs.control.refresh`` (passed in: control is the layer above). The returned
    status says how many processes of the run it ended on every node, and which are left
    (counting.py)."""
    status = read_status(run_dir)
    extra = status.model_extra or {}
    before = _processes(run_dir, status, live=True)
    (run_dir / STOP_REQUEST).touch()
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
    left = _processes(run_dir, status, live=False)
    settle = time.monotonic() + 10
    while left and time.monotonic() < settle:  # the last trainers are on their way out
        time.sleep(0.5)
        left = _processes(run_dir, status, live=False)
    return status.model_copy(
        update={
            "ended_processes": len(before - left),
            "left_processes": [f"{host}:{pid}" for host, pid in sorted(left)],
        }
    )


def _processes(run_dir: Path, status: RunStatus, *, live: bool) -> set[tuple[str, int]]:
    """The run's processes on every node: over ssh, or in the Slurm job while it runs."""
    extra = status.model_extra or {}
    if extra.get("slurm_job_id"):
        found = counting.local(run_dir)  # this login may be one of the job's nodes
        if live and extra.get("slurm_state") == "RUNNING":
            spec = _launch_json(run_dir)
            nnodes = int(spec.get("nnodes") or 1)
            found |= counting.in_slurm_job(run_dir, str(extra["slurm_job_id"]), nnodes)
        return _one_name_per_host(found)
    return counting.over_ssh(run_dir, _launched_nodes(run_dir))


def _one_name_per_host(found: set[tuple[str, int]]) -> set[tuple[str, int]]:
    """This machine seen both locally and through srun: one name (its short hostname)."""
    return {(host.split(".")[0], pid) for host, pid in found}


def _launch_json(run_dir: Path) -> dict[str, Any]:
    return RunDir(run_dir).launch_spec()


def _launched_nodes(run_dir: Path) -> list[dict[str, Any]]:
    nodes = _launch_json(run_dir).get("nodes", [])
    return [n for n in nodes if isinstance(n, dict)]


def _stop_ssh_nodes(run_dir: Path, status: RunStatus) -> None:
    states = [NodeState(**n) for n in (status.model_extra or {}).get("nodes", [])]
    nodes = _launched_nodes(run_dir)
    ssh.signal_nodes(nodes, states, "TERM")
    samplers.signal_samplers(nodes, (status.model_extra or {}).get("nodes", []))
