"""Checks between the nodes of a multi-node run (``launch.scheduler: ssh``).

What only matters once there are several machines: can node 0 reach every node over SSH the
way the launcher will (BatchMode, the preset's key and known_hosts), do the nodes agree (GPU
count, driver family, the same torchrun), do they see the run directory (the launcher puts
the entry and the metrics file there, so it must be a shared file system), can each node reach
the rendezvous port on node 0, and which network interface NCCL/gloo would pick. Each node
answers one probe over one ssh call, memoized for all checks of a run.
"""

from __future__ import annotations

import re
import secrets
import shlex
import socket
import threading
from pathlib import Path
from typing import Any

from backend import paths, subproc
from backend.checks.context import CheckContext
from backend.checks.model import CheckResult, finding
from backend.errors import BadInput
from backend.i18n import _
from backend.images.ready import training_bin
from backend.plan.rdzv import rdzv_host_port
from backend.plan.ssh_argv import ssh_base

_PROBE_TIMEOUT = 40.0


def _multinode(ctx: CheckContext) -> bool:
    return ctx.preset is not None and ctx.preset.launch.scheduler == "ssh"


def _skip() -> CheckResult:
    return finding("skip", _("single-node preset (launch.scheduler is not 'ssh')"))


_DOCKER = "docker"  # what the probe checks instead of torchrun for launch.runner: docker


def _probe_script(torchrun: str, token_path: str, endpoint: tuple[str, int] | None) -> str:
    # runner docker: the agent's torchrun is the image's; the node needs a usable docker.
    usable = "docker version" if torchrun == _DOCKER else f"test -x {shlex.quote(torchrun)}"
    parts = [
        "echo trainwiz-probe",
        "nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null"
        " | sed 's/^/gpu=/' || true",
        f"{usable} >/dev/null 2>&1 && echo torchrun=ok || echo torchrun=missing",
        f"cat {shlex.quote(token_path)} 2>/dev/null | sed 's/^/token=/' || true",
        # The training environment's versions: the same preset must train the same code.
        f"{shlex.quote(str(Path(torchrun).parent / 'python'))} -c "
        + shlex.quote(
            "import torch, transformers; print('env=' + torch.__version__ + ' transformers ' "
            "+ transformers.__version__)"
        )
        + " 2>/dev/null || echo env=none",
        "df -Pk /dev/shm 2>/dev/null | awk 'NR==2 {print \"shm_kib=\" $2}'",
    ]
    if endpoint:
        host, port = endpoint
        target = shlex.quote(f"/dev/tcp/{host}/{port}")
        parts.append(
            f"(timeout 5 bash -c 'exec 3<>\"$1\"' _ {target} 2>/dev/null"
            " && echo rdzv=ok || echo rdzv=closed)"
        )
    return "; ".join(parts)


def _torchrun(ctx: CheckContext) -> str:
    assert ctx.preset is not None
    if ctx.preset.launch.runner == "docker":
        return _DOCKER
    try:
        return str(training_bin(ctx.preset))
    except BadInput:
        return "torchrun"


def _endpoint(ctx: CheckContext) -> tuple[str, int]:
    assert ctx.preset is not None
    return rdzv_host_port(ctx.preset, ctx.preset.launch.master_port)


def probe_nodes(ctx: CheckContext) -> list[dict[str, Any]]:
    """One ssh probe per node, in parallel, while node 0 listens on the rendezvous port."""

    def compute() -> list[dict[str, Any]]:
        assert ctx.preset is not None
        launch = ctx.preset.launch
        home = paths.runs_dir().parent
        home.mkdir(parents=True, exist_ok=True)
        token = secrets.token_hex(8)
        token_file = home / f".nodecheck-{token}"
        token_file.write_text(token + "\n", encoding="utf-8")
        endpoint = _endpoint(ctx)
        listener = _listen(endpoint[1])
        script = _probe_script(_torchrun(ctx), str(token_file), endpoint if listener else None)
        results: list[dict[str, Any]] = [{} for _ in launch.nodes]

        def one(index: int, node: str) -> None:
            argv = [*ssh_base(launch.ssh, node), script]
            done = subproc.probe(argv, _PROBE_TIMEOUT)
            if isinstance(done.error, OSError):
                raise done.error  # no ssh client: raised, as it always was
            if done.timed_out:
                out, err, code = "", f"no answer within {_PROBE_TIMEOUT:.0f} s", 255
            else:
                assert done.code is not None
                out, err, code = done.stdout, done.stderr, done.code
            facts = dict(re.findall(r"^(torchrun|token|rdzv|env|shm_kib)=(.*)$", out, re.M))
            results[index] = {
                "node": node,
                "reached": "trainwiz-probe" in out,
                "error": err.strip().splitlines()[-1] if err.strip() else f"exit code {code}",
                "gpus": [g.strip() for g in re.findall(r"^gpu=(.*)$", out, re.M)],
                "torchrun": facts.get("torchrun", ""),
                "shared": facts.get("token", "") == token,
                "rdzv": facts.get("rdzv", "unknown" if listener is None else "closed"),
                "env": facts.get("env", ""),
                "shm_gib": round(int(facts.get("shm_kib", "0") or 0) / 1024**2, 1),
            }

        threads = [
            threading.Thread(target=one, args=(i, n), daemon=True)
            for i, n in enumerate(launch.nodes)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(_PROBE_TIMEOUT + 5)
        token_file.unlink(missing_ok=True)
        if listener is not None:
            listener.close()
        return results

    return ctx.memo("nodes-probe", compute)  # type: ignore[no-any-return]


def _listen(port: int) -> socket.socket | None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("", port))
        sock.listen(64)
    except OSError:
        sock.close()
        return None
    return sock


def check_nodes_reach(ctx: CheckContext) -> CheckResult:
    if not _multinode(ctx):
        return _skip()
    probes = probe_nodes(ctx)
    bad = [p for p in probes if not p.get("reached")]
    why = _(
        "node 0 starts every node's torchrun agent over ssh, without a terminal to ask anything"
    )
    if bad:
        text = "; ".join(f"{p.get('node')}: {p.get('error')}" for p in bad)
        return finding(
            ctx.severity("fail"),
            _("{bad} of {total} nodes cannot be reached over ssh: {errors}").format(
                bad=len(bad), total=len(probes), errors=text
            ),
            why=why,
            fix=_ssh_fix(bad[0].get("error", "")),
            blocks=["launch"],
            data={"nodes": probes},
        )
    missing = [p["node"] for p in probes if p["torchrun"] != "ok"]
    if missing and _torchrun(ctx) == _DOCKER:
        return finding(
            ctx.severity("fail"),
            _("docker is not usable over ssh on {nodes}").format(nodes=", ".join(missing)),
            why=_("every node runs its agent in a container of the same image"),
            fix=_("install docker there and let the ssh user run it (the docker group)"),
            blocks=["launch"],
            data={"nodes": probes},
        )
    if missing:
        return finding(
            ctx.severity("fail"),
            _("torchrun {path} is missing on {nodes}").format(
                path=_torchrun(ctx), nodes=", ".join(missing)
            ),
            why=_("every node runs the same torchrun path as node 0"),
            fix=_("build the same environment.venv at the same path on every node"),
            blocks=["launch"],
            data={"nodes": probes},
        )
    return finding(
        "ok",
        _("all {count} nodes answer over ssh").format(count=len(probes)),
        why=why,
        data={"nodes": probes},
    )


def _ssh_fix(error: str) -> str:
    if "Host key verification failed" in error:
        return _("ssh to each node once by hand to accept its host key (or add it to known_hosts)")
    if "Permission denied" in error:
        return _("install your public key on the node: ssh-copy-id [-p PORT] user@node")
    if "timed out" in error or "No route to host" in error or "no answer" in error:
        return _(
            "the node does not answer: check that it is up and on this network, its address "
            "in launch.nodes, and that no firewall drops ssh (port launch.ssh.port)"
        )
    return _("check the node's name, sshd port (launch.ssh.port or host:port) and that it is up")


def _unreached(ctx: CheckContext, what: str) -> CheckResult | None:
    """A failure naming the nodes ssh did not reach: what they have cannot be known, so the
    check cannot pass ("ok ... every node" about a node never asked would be a lie)."""
    bad = [p for p in probe_nodes(ctx) if not p.get("reached")]
    if not bad:
        return None
    names = "; ".join(f"{p.get('node')} ({p.get('error')})" for p in bad)
    return finding(
        ctx.severity("fail"),
        _("{what} unknown: {count} node(s) not reached over ssh: {names}").format(
            what=what, count=len(bad), names=names
        ),
        fix=_ssh_fix(str(bad[0].get("error", ""))),
        blocks=["launch"],
        data={"unreached": [p.get("node") for p in bad]},
    )


def check_nodes_alike(ctx: CheckContext) -> CheckResult:
    if not _multinode(ctx):
        return _skip()
    unreached = _unreached(ctx, _("GPUs, driver and environment"))
    if unreached:
        return unreached
    probes = probe_nodes(ctx)
    counts = {p["node"]: len(p["gpus"]) for p in probes}
    families = {p["node"]: sorted({g.split(".")[0] for g in p["gpus"]}) for p in probes}
    data = {"gpu_counts": counts, "driver_families": families}
    if len(set(counts.values())) > 1 or len({tuple(f) for f in families.values()}) > 1:
        return finding(
            ctx.severity("fail"),
            _("the nodes differ: GPUs {counts}, driver families {families}").format(
                counts=counts, families=families
            ),
            why=_(
                "torchrun starts nproc_per_node workers on every node; NCCL across driver "
                "families is a common cause of hangs"
            ),
            fix=_("use nodes with the same GPUs and driver branch"),
            blocks=["launch"],
            data=data,
        )
    envs = {p["node"]: p["env"] for p in probes}
    data["environments"] = envs
    if len(set(envs.values())) > 1:
        return finding(
            ctx.severity("fail"),
            _("the nodes' training environments differ: {envs}").format(envs=envs),
            why=_(
                "every rank must run the same torch and transformers (a mismatch hangs or "
                "crashes in the first collective, or trains different code)"
            ),
            fix=_(
                "build environment.venv from the same preset on every node "
                "('trainwiz env build PRESET' there)"
            ),
            blocks=["launch"],
            data=data,
        )
    assert ctx.preset is not None
    want = ctx.preset.launch.nproc_per_node
    have = next(iter(counts.values()))
    if ctx.preset.launch.device == "cuda" and have < want:
        return finding(
            ctx.severity("fail"),
            _("each node has {have} GPU(s) but launch.nproc_per_node is {want}").format(
                have=have, want=want
            ),
            fix=_("set launch.nproc_per_node: {have}").format(have=have),
            blocks=["launch"],
            data=data,
        )
    family = ", ".join(next(iter(families.values()))) or _("none")
    env = next(iter(envs.values())) or _("no training env found")
    return finding(
        "ok",
        _("every node has {have} GPU(s), driver family {family}, torch {env}").format(
            have=have, family=family, env=env
        ),
        data=data,
    )


def check_nodes_shared_dir(ctx: CheckContext) -> CheckResult:
    if not _multinode(ctx):
        return _skip()
    unreached = _unreached(ctx, _("the shared run directory"))
    if unreached:
        return unreached
    probes = probe_nodes(ctx)
    apart = [p["node"] for p in probes if not p["shared"]]
    where = str(paths.runs_dir())
    if apart:
        return finding(
            ctx.severity("fail"),
            _("{nodes} cannot see {where}").format(nodes=", ".join(apart), where=where),
            why=_(
                "each node runs the run's entry from the run directory and rank 0 writes the "
                "metrics there"
            ),
            fix=_("put TRAINWIZ_HOME on a file system every node mounts at the same path (NFS)"),
            blocks=["launch"],
        )
    return finding("ok", _("every node sees {where} (shared file system)").format(where=where))


def check_rdzv_port(ctx: CheckContext) -> CheckResult:
    if not _multinode(ctx):
        return _skip()
    host, port = _endpoint(ctx)
    unreached = _unreached(ctx, _("the rendezvous port"))
    if unreached:
        return unreached
    probes = probe_nodes(ctx)
    if probes and all(p["rdzv"] == "unknown" for p in probes):
        return finding(
            "warn", _("port {port} is in use here, so it could not be tried").format(port=port)
        )
    closed = [p["node"] for p in probes if p["rdzv"] != "ok"]
    if closed:
        return finding(
            ctx.severity("fail"),
            _("{nodes} cannot reach the rendezvous at {host}:{port}").format(
                nodes=", ".join(closed), host=host, port=port
            ),
            why=_(
                "every agent joins torchrun's c10d rendezvous on node 0; a blocked port ends "
                "as a rendezvous timeout"
            ),
            fix=_(
                "open TCP {port} on node 0's firewall, or set launch.rdzv_endpoint to an "
                "address all nodes reach"
            ).format(port=port),
            blocks=["launch"],
        )
    return finding(
        "ok", _("every node reaches the rendezvous at {host}:{port}").format(host=host, port=port)
    )


def check_nccl_interface(ctx: CheckContext) -> CheckResult:
    if not _multinode(ctx):
        return _skip()
    assert ctx.preset is not None
    env = ctx.preset.launch.env
    names = [n for n in interfaces() if not n.startswith(("lo", "docker", "veth", "br-", "virbr"))]
    chosen = env.get("NCCL_SOCKET_IFNAME") or env.get("GLOO_SOCKET_IFNAME")
    data = {"interfaces": names, "set": chosen}
    if chosen:
        return finding("ok", f"NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME = {chosen}", data=data)
    if len(names) > 1:
        return finding(
            "warn",
            _("{count} network interfaces ({names}): NCCL may pick the wrong one").format(
                count=len(names), names=", ".join(names)
            ),
            why=_(
                "NCCL and gloo pick an interface by themselves; on a machine with a management "
                "and a fast network the pick can be the slow or unrouted one (hangs at init)"
            ),
            fix=_(
                "set launch.env NCCL_SOCKET_IFNAME (and GLOO_SOCKET_IFNAME) to the fast one, "
                "e.g. {name}"
            ).format(name=names[0]),
            data=data,
        )
    return finding(
        "ok",
        _("one network interface ({names})").format(names=", ".join(names) or _("loopback only")),
        data=data,
    )


def interfaces() -> list[str]:
    net = Path("/sys/class/net")
    if not net.is_dir():
        return []
    up = []
    for entry in sorted(net.iterdir()):
        try:
            state = (entry / "operstate").read_text().strip()
        except OSError:
            continue
        if state in ("up", "unknown"):
            up.append(entry.name)
    return up
