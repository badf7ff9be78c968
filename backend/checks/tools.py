"""Host tools and the rendezvous port: git, git-lfs (and its hooks), master_port.

The port is probed with a real bind, the way torchrun's TCPStore will bind it, and the process
holding it is named where the kernel lets us see it.
"""

from __future__ import annotations

import errno
import shutil
import socket

import psutil

from backend import subproc
from backend.checks.context import CheckContext
from backend.checks.model import CheckResult, finding
from backend.i18n import _
from backend.plan.rdzv import port_chosen_in_job, port_moves_here
from backend.ports import claimed_ports, live_run_ports, next_free_port


def port_free(port: int, host: str = "") -> tuple[bool, str]:
    """Bind the way torchrun's TCPStore will; (free, the error when taken)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            return False, f"{errno.errorcode.get(exc.errno or 0, 'error')}: {exc.strerror}"
    return True, ""


def port_holder(port: int) -> str | None:
    """Which process listens on the port, where the kernel lets us see it."""
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return None
    for conn in conns:
        if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN:
            if conn.pid is None:
                return _("another user's process")
            try:
                proc = psutil.Process(conn.pid)
                return f"pid {conn.pid} ({proc.name()}, {proc.username()})"
            except (psutil.Error, KeyError):
                return f"pid {conn.pid}"
    return None


def _own_run_on(port: int) -> tuple[str, int] | None:
    """(run id, the port the next launch takes instead) when a live trainwiz run chose ``port``."""
    run_id = live_run_ports().get(port)
    if run_id is None:
        return None
    return run_id, next_free_port(port, claimed_ports())


def check_port(ctx: CheckContext) -> CheckResult:
    needs = ctx.needs
    port = needs.master_port
    why = _(
        "torchrun's rendezvous binds master_port; a taken port fails with 'EADDRINUSE' at start."
    )
    if ctx.preset is not None and port_chosen_in_job(ctx.preset):
        return finding(
            "skip",
            _(
                "the rendezvous port is chosen in the Slurm job on its head node (one free there "
                "at that moment), not launch.master_port"
            ),
            why=why,
            data={"port": None},
        )
    if ctx.judged and needs.node_rank > 0:
        return finding(
            "skip",
            _("node {rank}: the rendezvous port is bound on the master node").format(
                rank=needs.node_rank
            ),
            why=why,
            data={"port": port},
        )
    if ctx.judged and needs.runner == "docker" and not needs.host_network:
        return finding(
            "skip",
            _("port {port} is inside the container's own network namespace").format(port=port),
            why=why,
            data={"port": port},
        )
    free, error = port_free(port)
    owner = _own_run_on(port) if ctx.judged and needs.nnodes == 1 else None
    if free and owner is None:
        return finding(
            "ok",
            _("master_port {port} is free").format(port=port),
            why=why,
            data={"port": port, "free": True},
        )
    if owner is not None:  # a run of ours: launch moves to a free port on its own
        run_id, next_port = owner
        return finding(
            "ok",
            _("master_port {port} is in use by your run {run}; the next launch uses {next}").format(
                port=port, run=run_id, next=next_port
            ),
            why=why,
            data={"port": port, "free": False, "run": run_id, "next_port": next_port},
        )
    holder = port_holder(port)
    if ctx.preset is not None and port_moves_here(ctx.preset):
        # the launch spec's own rule: it takes the next free port, so nothing is blocked
        next_port = next_free_port(port, claimed_ports())
        return finding(
            "ok",
            _("master_port {port} is taken{by}; the launch uses {next}").format(
                port=port,
                by=_(" by {holder}").format(holder=holder) if holder else "",
                next=next_port,
            ),
            why=why,
            data={"port": port, "free": False, "next_port": next_port},
        )
    return finding(
        ctx.severity("fail"),
        _("master_port {port} is taken ({error})").format(port=port, error=error)
        + (_(" by {holder}").format(holder=holder) if holder else ""),
        why=why,
        fix=_(
            "pick another launch.master_port, or see who holds it: sudo ss -ltnp 'sport = :{port}'"
        ).format(port=port),
        blocks=["launch"],
        data={"port": port, "free": False},
    )


def _version(argv: list[str]) -> str | None:
    done = subproc.probe(argv, 3)
    return done.stdout.strip().splitlines()[0] if done.code == 0 and done.stdout else None


def check_git(ctx: CheckContext) -> CheckResult:
    needs = ctx.needs
    needed = needs.model_source == "git_lfs" or (needs.runner == "host" and needs.fastchat_editable)
    version = _version(["git", "--version"]) if shutil.which("git") else None
    why = _("git clones the model (git-lfs source) and FastChat (editable install).")
    if version:
        return finding("ok", version, why=why, data={"version": version})
    if ctx.judged and not needed:
        return finding(
            "skip", _("git not found; this preset does not need it on the host"), why=why
        )
    return finding(
        ctx.severity("fail"),
        _("git not found"),
        why=why,
        fix=_("sudo apt-get install -y git"),
        blocks=["model"] if needs.model_source == "git_lfs" else ["image"],
    )


def check_git_lfs(ctx: CheckContext) -> CheckResult:
    needs = ctx.needs
    needed = needs.model_source == "git_lfs"
    why = _(
        "Without git-lfs (or without `git lfs install`), a clone of a Hub repo holds ~130-byte "
        "pointer files instead of weights, and loading fails much later."
    )
    version = _version(["git", "lfs", "version"]) if shutil.which("git") else None
    if not version:
        if ctx.judged and not needed:
            return finding(
                "skip",
                _("git-lfs not found; not needed (model source {source})").format(
                    source=needs.model_source
                ),
                why=why,
            )
        return finding(
            ctx.severity("fail"),
            _("git-lfs not found"),
            why=why,
            fix=_("sudo apt-get install -y git-lfs && git lfs install"),
            blocks=["model"],
        )
    hooked = _version(["git", "config", "--get", "filter.lfs.process"])
    if not hooked:
        return finding(
            ctx.severity("fail") if needed else "warn",
            _("{version}, but `git lfs install` was not run").format(version=version),
            why=why,
            fix=_("git lfs install"),
            blocks=["model"] if needed else [],
            data={"version": version},
        )
    return finding("ok", version, why=why, data={"version": version})
