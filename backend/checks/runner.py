"""Run every check at once, each under its own deadline, reporting results as they land.

Each check runs in a daemon thread rather than a ThreadPoolExecutor worker: a DNS lookup on a
dead network can hang past any socket timeout, and an executor's non-daemon threads would hold
the CLI open at exit. A check past its deadline is reported as timed out and left behind.
"""

from __future__ import annotations

import queue
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

from backend.checks import docker_checks, gpu, host, mirrors, network, nodes, slurm_checks, tools
from backend.checks.context import CheckContext, Targets, build_context
from backend.checks.model import CheckResult, Status, Step
from backend.i18n import N_, _
from backend.preset.schema import Preset


@dataclass(frozen=True)
class CheckSpec:
    id: str
    title: str
    func: Callable[[CheckContext], CheckResult]
    timeout_s: float = 5.0
    timeout_status: Status = "warn"
    blocks_on_timeout: list[Step] = field(default_factory=list)


CHECKS: list[CheckSpec] = [
    CheckSpec("nvidia_driver", N_("NVIDIA driver"), gpu.check_driver),
    CheckSpec("gpus", N_("GPUs"), gpu.check_gpus),
    CheckSpec(
        "docker_daemon",
        N_("Docker daemon"),
        docker_checks.check_docker_daemon,
        8.0,
        "fail",
        ["image", "launch"],
    ),
    CheckSpec("docker_access", N_("Docker permissions"), docker_checks.check_docker_access),
    CheckSpec(
        "nvidia_runtime", N_("NVIDIA container runtime"), docker_checks.check_nvidia_runtime, 8.0
    ),
    CheckSpec("gpu_probe", N_("GPU probe container"), docker_checks.check_gpu_probe, 30.0),
    CheckSpec("disk", N_("Disk space"), host.check_disk, 7.0),
    CheckSpec("ram", N_("Host RAM"), host.check_ram),
    CheckSpec("shm", N_("/dev/shm"), host.check_shm),
    CheckSpec("memlock", N_("memlock limit"), host.check_memlock),
    CheckSpec("master_port", N_("master_port"), tools.check_port),
    CheckSpec("git", N_("git"), tools.check_git),
    CheckSpec("git_lfs", N_("git-lfs"), tools.check_git_lfs),
    CheckSpec("hf_endpoint", N_("Hugging Face endpoint"), network.check_hf, 5.0, "fail", ["model"]),
    CheckSpec("pip_index", N_("pip index"), network.check_pip, 5.0, "fail", ["image"]),
    CheckSpec("registry", N_("Image registry"), network.check_registry, 5.0, "fail", ["image"]),
    # Between the nodes of a multi-node preset (backend/checks/nodes.py); skipped otherwise.
    CheckSpec("nodes_ssh", N_("Nodes over SSH"), nodes.check_nodes_reach, 45.0, "fail", ["launch"]),
    CheckSpec("nodes_alike", N_("Nodes alike"), nodes.check_nodes_alike, 45.0),
    CheckSpec("nodes_shared", N_("Shared run dir"), nodes.check_nodes_shared_dir, 45.0),
    CheckSpec("rdzv_port", N_("Rendezvous port"), nodes.check_rdzv_port, 45.0, "fail", ["launch"]),
    CheckSpec("nccl_iface", N_("NCCL interface"), nodes.check_nccl_interface),
    CheckSpec("mirrors", N_("Mirrors"), mirrors.check_mirrors, 10.0),
    # A Slurm preset against the cluster (backend/checks/slurm_checks.py); skipped otherwise.
    CheckSpec(
        "slurm_partition", N_("Slurm partition"), slurm_checks.check_slurm_partition, 30.0, "fail"
    ),
    CheckSpec("slurm_gpus", N_("Slurm GPUs"), slurm_checks.check_slurm_gpus, 30.0),
    CheckSpec("slurm_time", N_("Slurm time limit"), slurm_checks.check_slurm_time, 30.0),
    CheckSpec("slurm_account", N_("Slurm account/QoS"), slurm_checks.check_slurm_account, 30.0),
]


def check_ids() -> list[str]:
    return [spec.id for spec in CHECKS]


def _run_one(spec: CheckSpec, ctx: CheckContext) -> CheckResult:
    started = time.monotonic()
    try:
        result = spec.func(ctx)
    except Exception as exc:  # a broken check reports itself instead of sinking the run
        result = CheckResult(
            id=spec.id,
            status="warn",
            summary=_("check crashed: {error}").format(error=f"{type(exc).__name__}: {exc}"),
            detail=traceback.format_exc(limit=4),
        )
    return result.model_copy(
        update={
            "id": spec.id,
            "title": spec.title,
            "duration_s": round(time.monotonic() - started, 3),
        }
    )


def run_checks(
    preset: Preset | None,
    on_result: Callable[[CheckResult], object] | None = None,
    cancel: threading.Event | None = None,
    *,
    targets: Targets | None = None,
    only: list[str] | None = None,
) -> list[CheckResult]:
    """All checks (or ``only`` those ids) concurrently; results in the fixed order of CHECKS.

    ``on_result`` is called in this thread as each result lands, so a UI worker can forward it.
    """
    specs = [s for s in CHECKS if only is None or s.id in only]
    ctx = build_context(preset, targets)
    landed: queue.Queue[CheckResult] = queue.Queue()
    started = time.monotonic()
    for spec in specs:
        thread = threading.Thread(
            target=lambda s=spec: landed.put(_run_one(s, ctx)), name=f"check-{spec.id}", daemon=True
        )
        thread.start()
    done: dict[str, CheckResult] = {}

    def land(result: CheckResult) -> None:
        if result.id in done:
            return
        done[result.id] = result
        if on_result is not None:
            on_result(result)

    while len(done) < len(specs):
        if cancel is not None and cancel.is_set():
            for spec in specs:
                if spec.id not in done:
                    land(
                        CheckResult(
                            id=spec.id, title=spec.title, status="skip", summary=_("cancelled")
                        )
                    )
            break
        now = time.monotonic() - started
        for spec in specs:
            if spec.id not in done and now > spec.timeout_s:
                land(
                    CheckResult(
                        id=spec.id,
                        title=spec.title,
                        status=ctx.severity(spec.timeout_status),
                        summary=_("no answer within {seconds} s").format(
                            seconds=f"{spec.timeout_s:.0f}"
                        ),
                        detail=_(
                            "the check was still waiting (a hung DNS lookup, daemon or network)"
                        ),
                        blocks=spec.blocks_on_timeout if ctx.judged else [],
                        duration_s=round(now, 3),
                    )
                )
        try:
            land(landed.get(timeout=0.05))
        except queue.Empty:
            continue
    return [done[spec.id] for spec in specs]
