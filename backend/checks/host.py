"""Host resources: disk, RAM, /dev/shm and the memlock limit.

Numbers are what the kernel reports now (statvfs, /proc/meminfo, getrlimit, a real bind), set
against what this preset will ask for, so a user learns of a full disk before a 26 GB download
or a 150 GB checkpoint, not after.
"""

from __future__ import annotations

import os
import resource
import shutil
from pathlib import Path
from typing import Any

from backend.checks.context import IMAGE_DISK_ESTIMATE, CheckContext, Needs
from backend.checks.docker_checks import docker_facts, socket_path
from backend.checks.model import STEPS, CheckResult, Status, Step, finding
from backend.checks.sizing import human, parse_size
from backend.i18n import _


def _existing_ancestor(path: Path) -> Path:
    """df needs an existing path: the nearest existing parent of one not created yet."""
    current = path.absolute()
    while current != current.parent:
        try:
            current.stat()
            return current
        except OSError:  # missing, or a parent we may not search: look further up
            current = current.parent
    return current


def _disk_locations(ctx: CheckContext) -> list[tuple[str, Path, int, Step, str]]:
    """(purpose, path, bytes needed, step blocked, how the need was reckoned)."""
    needs = ctx.needs
    p = needs.params
    out: list[tuple[str, Path, int, Step, str]] = []
    if needs.model_dir is not None:
        need = 0
        how = _("weights already there") if needs.model_bytes_present else _("size unknown")
        if not needs.model_bytes_present and p and needs.model_source in ("hf", "git_lfs"):
            need = 2 * p
            how = _("2 bytes × {params} B params (fp16 weights)").format(params=f"{p / 1e9:.2f}")
            if needs.model_source == "git_lfs":
                need = 4 * p
                how += _(", ×2 because git-lfs keeps a copy in .git/lfs")
        elif not needs.model_bytes_present and p:
            need, how = 4 * p, _("fp32 weights made locally")
        out.append(("model", needs.model_dir, need, "model", how))
    if needs.output_dir is not None:
        need, how = _output_need(needs)
        if needs.checkpoints is None and ctx.judged and needs.save_strategy != "no":
            how += _("; no save_total_limit, so every checkpoint stays: counted one")
        out.append(("output", needs.output_dir, need, "launch", how))
    if needs.runner == "docker":
        facts = docker_facts(ctx)
        info = facts.get("info") or {}
        root = info.get("DockerRootDir")
        # A tcp:// or ssh:// daemon keeps its data on another machine: not measurable here.
        if root and socket_path(ctx.targets.docker_host) is not None:
            need = 0 if facts.get("image_local") else IMAGE_DISK_ESTIMATE
            how = _("image already local") if need == 0 else _("~20 GiB for a CUDA devel image")
            out.append(("docker data root", Path(root), need, "image", how))
    return out


def _output_need(needs: Needs) -> tuple[int, str]:
    """Bytes the output directory will hold at its peak, and how that was reckoned.

    A new checkpoint is complete before the oldest is deleted (docs/checkpoints.md), so a save
    briefly holds kept + 1; with no checkpoints, only the final output. The sizes are the
    planner's when it knows the preset's method (a LoRA checkpoint is its adapters, not 7 B).
    """
    kept = needs.checkpoints if needs.checkpoints is not None else 1
    planned = needs.planned
    if planned is not None:
        if kept:
            return (kept + 1) * planned.checkpoint_bytes, _(
                "{kept} checkpoint(s) kept + 1 being written; {why}"
            ).format(kept=kept, why=planned.why)
        return planned.final_bytes, _("final output only (no checkpoints); {why}").format(
            why=planned.why
        )
    p = needs.params
    if not p:
        return 0, _("size unknown")
    if kept:
        return (kept + 1) * 12 * p, _(
            "{kept} checkpoint(s) kept + 1 being written × 12 bytes/param (fp32 weights + "
            "Adam state; FSDP shards sum to the same), P={params} B"
        ).format(kept=kept, params=f"{p / 1e9:.2f}")
    return 4 * p, _("final fp32 model only (no checkpoints), P={params} B").format(
        params=f"{p / 1e9:.2f}"
    )


def check_disk(ctx: CheckContext) -> CheckResult:
    groups: dict[int, dict[str, Any]] = {}
    for purpose, path, need, step, how in _disk_locations(ctx):
        anchor = _existing_ancestor(path)
        dev = anchor.stat().st_dev
        usage = shutil.disk_usage(anchor)
        group = groups.setdefault(
            dev, {"anchor": str(anchor), "free": usage.free, "total": usage.total, "items": []}
        )
        group["items"].append(
            {"purpose": purpose, "path": str(path), "need": need, "step": step, "how": how}
        )
    lines: list[str] = []
    short: list[str] = []
    tight: list[str] = []
    blocks: list[Step] = []
    locations = []
    for group in groups.values():
        need = sum(item["need"] for item in group["items"])
        free = group["free"]
        names = " + ".join(item["purpose"] for item in group["items"])
        lines.append(
            _("{names}: {free} free of {total}, needs {need}").format(
                names=names, free=human(free), total=human(group["total"]), need=human(need)
            )
        )
        for item in group["items"]:
            lines.append(
                f"  {item['purpose']}: {item['path']} — {human(item['need'])} ({item['how']})"
            )
            locations.append({**item, "free": free, "filesystem_of": group["anchor"]})
        if free < need:
            short.append(
                _("{names} (needs {need}, {free} free)").format(
                    names=names, need=human(need), free=human(free)
                )
            )
            # Steps run in order (model, image, launch): a step is held back only when what it
            # and the steps before it put on this filesystem exceeds the free space.
            running = 0
            for item in sorted(group["items"], key=lambda it: STEPS.index(it["step"])):
                running += item["need"]
                if item["need"] and running > free:
                    blocks.append(item["step"])
        elif free < need * 1.2:
            tight.append(
                _("{names} (needs {need}, {free} free)").format(
                    names=names, need=human(need), free=human(free)
                )
            )
    data = {"locations": locations}
    why = _(
        "A full disk stops a download half way, or kills training at the first checkpoint "
        "(PytorchStreamWriter failed / No space left on device) after hours of work."
    )
    if short:
        return finding(
            ctx.severity("fail"),
            _("not enough disk for {what}").format(what=", ".join(short)),
            detail="\n".join(lines),
            why=why,
            fix=_(
                "free space (`du -xh --max-depth=1 <dir> | sort -h`), put the directory on a larger "
                "disk, or lower training.save_total_limit; Docker: `docker system prune` or move "
                "data-root in /etc/docker/daemon.json"
            ),
            blocks=sorted(set(blocks)),
            data=data,
        )
    status: Status = "warn" if tight else "ok"
    summary = (
        _("little headroom for {what}").format(what=", ".join(tight))
        if tight
        else _("enough disk for this preset")
    )
    if not ctx.judged:
        summary = "; ".join(lines[:1]) if lines else _("no locations to check")
    return finding(status, summary, detail="\n".join(lines), why=why, data=data)


def read_meminfo(path: str) -> dict[str, int]:
    """/proc/meminfo in bytes."""
    values: dict[str, int] = {}
    with open(path, encoding="ascii") as handle:
        for line in handle:
            key, _, rest = line.partition(":")
            parts = rest.split()
            if parts:
                values[key] = int(parts[0]) * (1024 if parts[-1] == "kB" else 1)
    return values


def check_ram(ctx: CheckContext) -> CheckResult:
    mem = read_meminfo(ctx.targets.meminfo_path)
    total, available = mem.get("MemTotal", 0), mem.get("MemAvailable", mem.get("MemFree", 0))
    data: dict[str, Any] = {"total": total, "available": available}
    facts = _("{total} total, {available} available").format(
        total=human(total), available=human(available)
    )
    needs, p = ctx.needs, ctx.needs.params
    why = _(
        "FastChat loads the model in fp32 in every rank before FSDP shards it (4 bytes/param × "
        "processes), and CPU offload keeps params, grads and Adam state on the host (~16 "
        "bytes/param): too little RAM ends in a SIGKILL from the OOM killer (exit code -9)."
    )
    if not ctx.judged:
        return finding("ok", facts, why=why, data=data)
    if not p:
        return finding(
            "warn",
            facts + _("; model size unknown, cannot estimate need"),
            why=why,
            data=data,
        )
    if needs.planned is not None:  # the planner's host RAM peak, method-aware
        need = needs.planned.host_ram_bytes
        detail = _("the planner's host RAM peak for {method} ({nproc} process(es)): {need}").format(
            method=needs.planned.method, nproc=needs.nproc, need=f"{need / 2**30:.2f} GiB"
        )
    else:
        load = 4 * p * needs.nproc
        extra = 16 * p if (needs.offload or needs.device == "cpu") else 0
        need = load + extra
        detail = _("loading: 4 × {params} B params × {nproc} processes = {load}").format(
            params=f"{p / 1e9:.2f}", nproc=needs.nproc, load=human(load)
        )
        if extra:
            what = "offload" if needs.offload else _("CPU training")
            detail += f"\n{what}: 16 × P = {human(extra)}"
    data["need"] = need
    fix = _(
        "lower launch.nproc_per_node, drop 'offload' from training.fsdp, or add RAM/swap "
        "(`sudo fallocate -l 64G /swapfile && sudo chmod 600 /swapfile && sudo mkswap /swapfile "
        "&& sudo swapon /swapfile`)"
    )
    if total < need:
        return finding(
            "fail",
            _("needs {need}, {facts}").format(need=human(need), facts=facts),
            detail=detail,
            why=why,
            fix=fix,
            blocks=["launch"],
            data=data,
        )
    if available < need:
        return finding(
            "warn",
            _("needs {need}, only {available} available now").format(
                need=human(need), available=human(available)
            ),
            detail=detail,
            why=why,
            fix=_("stop other memory users (`ps aux --sort=-rss | head`) or ") + fix,
            data=data,
        )
    return finding(
        "ok",
        _("needs {need}, {facts}").format(need=human(need), facts=facts),
        detail=detail,
        why=why,
        data=data,
    )


def check_shm(ctx: CheckContext) -> CheckResult:
    st = os.statvfs(ctx.targets.shm_path)
    size, free = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
    data: dict[str, Any] = {"path": ctx.targets.shm_path, "size": size, "free": free}
    facts = _("{path}: {size} ({free} free)").format(
        path=ctx.targets.shm_path, size=human(size), free=human(free)
    )
    needs = ctx.needs
    why = _(
        "NCCL passes data between GPUs of one node through /dev/shm and DataLoader workers pass "
        "batches through it; too small ends in 'Bus error' or 'NCCL error: unhandled system error'."
    )
    want = 1024**3 if needs.nproc > 1 else 64 * 1024**2
    if ctx.judged and needs.runner == "docker" and not needs.ipc_host:
        container = parse_size(needs.shm_size) if needs.shm_size else 64 * 1024**2
        data["container_shm"] = container
        where = (
            _("container --shm-size {size}").format(size=needs.shm_size)
            if needs.shm_size
            else _("Docker's default 64 MiB")
        )
        if container is not None and container < want:
            return finding(
                "fail" if needs.nproc > 1 else "warn",
                _("the container gets {where}; {nproc} processes want ≥ {want}").format(
                    where=where, nproc=needs.nproc, want=human(want)
                ),
                detail=facts,
                why=why,
                fix=_("set container.ipc: host (as the seed does) or container.shm_size: 16g"),
                blocks=["launch"] if needs.nproc > 1 else [],
                data=data,
            )
        return finding(
            "ok",
            _("the container gets {where}").format(where=where),
            detail=facts,
            why=why,
            data=data,
        )
    if size < want:
        return finding(
            ctx.severity("fail"),
            _("{facts}, want ≥ {want}").format(facts=facts, want=human(want)),
            why=why,
            fix=_("sudo mount -o remount,size=16G /dev/shm (persist it in /etc/fstab)"),
            blocks=["launch"],
            data=data,
        )
    if free < want:
        return finding(
            "warn",
            _("{facts}: mostly used").format(facts=facts),
            why=why,
            fix=_("remove stale files: ls -la /dev/shm"),
            data=data,
        )
    return finding("ok", facts, why=why, data=data)


def _limit_text(value: int) -> str:
    return _("unlimited") if value == resource.RLIM_INFINITY else human(value)


def check_memlock(ctx: CheckContext) -> CheckResult:
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    data = {"soft": soft, "hard": hard, "unlimited": soft == resource.RLIM_INFINITY}
    facts = _("memlock soft {soft}, hard {hard}").format(
        soft=_limit_text(soft), hard=_limit_text(hard)
    )
    why = _(
        "InfiniBand/RDMA (multi-node NCCL) pins memory and needs an unlimited memlock; the seed "
        "passes --ulimit memlock=-1, which a daemon without that hard limit refuses "
        "('error setting rlimit type 8: operation not permitted')."
    )
    needs = ctx.needs
    if ctx.judged and needs.runner == "docker" and needs.container_memlock:
        wanted = needs.container_memlock.split(":")[-1]
        wanted_n = resource.RLIM_INFINITY if wanted == "-1" else int(wanted)
        if hard != resource.RLIM_INFINITY and (
            wanted_n == resource.RLIM_INFINITY or wanted_n > hard
        ):
            return finding(
                "warn",
                _(
                    "preset asks --ulimit memlock={memlock}; this host's hard limit is {hard}"
                ).format(memlock=needs.container_memlock, hard=_limit_text(hard)),
                detail=facts + "\n" + _("A daemon started with this limit refuses a higher one."),
                why=why,
                fix=_(
                    "drop the memlock ulimit from container.ulimits (single node: not needed), or "
                    "raise the daemon's: `sudo systemctl edit docker` → [Service] LimitMEMLOCK=infinity"
                ),
                data=data,
            )
        return finding(
            "ok",
            _("container gets memlock {memlock}").format(memlock=needs.container_memlock),
            detail=facts,
            why=why,
            data=data,
        )
    if soft != resource.RLIM_INFINITY and needs.nnodes > 1 and ctx.judged:
        return finding(
            "warn",
            facts + _("; multi-node NCCL over RDMA wants unlimited"),
            why=why,
            fix=_("add `* - memlock unlimited` to /etc/security/limits.conf and log in again"),
            data=data,
        )
    return finding(
        "ok",
        facts + ("" if needs.nnodes > 1 else _(" (matters only for RDMA)")),
        why=why,
        data=data,
    )
