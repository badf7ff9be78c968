"""Docker: the daemon, this user's right to use it, the NVIDIA runtime, and a GPU probe.

The daemon is asked once per run (``docker_facts`` is memoised on the context) and every Docker
check reads that answer, so a dead socket costs one timeout, not four. ``DOCKER_HOST`` is
honoured, which is also how tests aim the checks at a socket with no daemon behind it.
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import stat
from typing import Any

from backend.checks.context import CheckContext
from backend.checks.model import CheckResult, finding
from backend.i18n import _

INSTALL_DOCKER = (
    "sudo apt-get update && sudo apt-get install -y docker.io && sudo systemctl enable --now docker"
)
INSTALL_TOOLKIT = (
    "curl -fsSL https://nvidia.github.io/libnvidia-container/gpgkey | sudo gpg --dearmor -o "
    "/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg\n"
    "curl -s -L https://nvidia.github.io/libnvidia-container/stable/deb/nvidia-container-toolkit.list"
    " | sed 's#deb https://#deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg]"
    " https://#g' | sudo tee /etc/apt/sources.list.d/nvidia-container-toolkit.list\n"
    "sudo apt-get update && sudo apt-get install -y nvidia-container-toolkit\n"
    "sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl restart docker"
)


def socket_path(docker_host: str) -> str | None:
    """The unix socket a DOCKER_HOST names (None for tcp:// and ssh:// daemons)."""
    if docker_host.startswith("unix://"):
        return docker_host[len("unix://") :]
    if docker_host.startswith("/"):
        return docker_host
    return None


def _probe(ctx: CheckContext) -> dict[str, Any]:
    host = ctx.targets.docker_host
    facts: dict[str, Any] = {"host": host, "reachable": False}
    sock = socket_path(host)
    if sock is not None:
        if not os.path.exists(sock):
            facts.update(error=_("no socket at {path}").format(path=sock), kind="no_socket")
            return facts
        if not os.access(sock, os.R_OK | os.W_OK):
            facts.update(
                error=_("permission denied on {path}").format(path=sock), kind="permission"
            )
            return facts
    try:
        import docker  # only once a daemon may be there: a host without Docker needs no SDK
    except ImportError:
        facts.update(error=_("the 'docker' Python package is missing"), kind="sdk")
        return facts
    try:
        client = docker.DockerClient(base_url=host, version="auto", timeout=3)
        version = client.version()
        info = client.info()
    except Exception as exc:  # the SDK wraps refused / timeout / TLS errors alike
        text = str(exc)
        kind = "refused" if "refused" in text.lower() else "other"
        facts.update(error=text.splitlines()[0][:300], kind=kind)
        return facts
    facts.update(
        reachable=True,
        version=version.get("Version", "?"),
        api_version=version.get("ApiVersion", "?"),
        info=info,
        runtimes=sorted((info.get("Runtimes") or {}).keys()),
        client=client,
    )
    image = ctx.needs.image
    if image:
        try:
            client.images.get(image)
            facts["image_local"] = True
        except Exception:
            facts["image_local"] = False
    return facts


def docker_facts(ctx: CheckContext) -> dict[str, Any]:
    result: dict[str, Any] = ctx.memo("docker", lambda: _probe(ctx))
    return result


def _not_applicable(ctx: CheckContext) -> CheckResult | None:
    if ctx.judged and ctx.needs.runner != "docker":
        return finding("skip", _("not needed: this preset runs on the host (launch.runner: host)"))
    return None


def check_docker_daemon(ctx: CheckContext) -> CheckResult:
    skipped = _not_applicable(ctx)
    if skipped:
        return skipped
    facts = docker_facts(ctx)
    why = _("The environment image is built and the training container runs through this daemon.")
    if facts["reachable"]:
        info = facts["info"]
        detail = (
            f"DOCKER_HOST {facts['host']}\nserver {facts['version']} (API {facts['api_version']}), "
            f"storage {info.get('Driver', '?')}, data root {info.get('DockerRootDir', '?')}, "
            f"cgroup v{info.get('CgroupVersion', '?')}"
        )
        return finding(
            "ok",
            _("Docker {version} reachable at {host}").format(
                version=facts["version"], host=facts["host"]
            ),
            detail=detail,
            why=why,
            data={
                "version": facts["version"],
                "api_version": facts["api_version"],
                "data_root": info.get("DockerRootDir"),
            },
        )
    kind = facts.get("kind")
    if kind == "sdk":
        fix = _("pip install 'docker>=7.0' (a trainwiz dependency) into trainwiz's environment")
    elif kind == "permission":
        fix = _("see docker_access: add yourself to the docker group")
    elif kind == "no_socket":
        fix = (
            INSTALL_DOCKER if not shutil.which("dockerd") else "sudo systemctl enable --now docker"
        )
    else:
        fix = "sudo systemctl restart docker && sudo journalctl -u docker -n 50"
    return finding(
        ctx.severity("fail"),
        _("Docker daemon not reachable: {error}").format(error=facts["error"]),
        detail=f"DOCKER_HOST {facts['host']}",
        why=why,
        fix=fix,
        blocks=["image", "launch"],
        data={"host": facts["host"], "error": facts["error"]},
    )


def check_docker_access(ctx: CheckContext) -> CheckResult:
    skipped = _not_applicable(ctx)
    if skipped:
        return skipped
    sock = socket_path(ctx.targets.docker_host)
    why = _("Without rights on the socket every docker call fails with 'permission denied'.")
    if sock is None:
        return finding(
            "skip",
            _("remote daemon {host}: no local socket rights to check").format(
                host=ctx.targets.docker_host
            ),
            why=why,
        )
    if not os.path.exists(sock):
        return finding(
            "skip", _("no socket at {path} (see docker_daemon)").format(path=sock), why=why
        )
    st = os.stat(sock)
    uid = os.getuid()
    user = pwd.getpwuid(uid).pw_name if _has_pw(uid) else str(uid)
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    mode = stat.filemode(st.st_mode)
    detail = f"{sock}: {mode} owner uid {st.st_uid} group {group}; you: {user} (uid {uid})"
    data = {"socket": sock, "user": user, "group": group, "mode": mode}
    if uid == 0:
        return finding("ok", _("running as root"), detail=detail, why=why, data=data)
    if st.st_uid == uid:
        return finding(
            "ok",
            _("{user} owns the socket (rootless Docker)").format(user=user),
            detail=detail,
            why=why,
            data=data,
        )
    in_session = st.st_gid in os.getgroups()
    if in_session and st.st_mode & 0o060 == 0o060:
        return finding(
            "ok",
            _("{user} is in group {group}").format(user=user, group=group),
            detail=detail,
            why=why,
            data=data,
        )
    try:
        listed = user in grp.getgrgid(st.st_gid).gr_mem
    except KeyError:
        listed = False
    if listed:
        return finding(
            ctx.severity("fail"),
            _("{user} was added to {group} but this login predates it").format(
                user=user, group=group
            ),
            detail=detail,
            why=why,
            fix=_("log out and back in (or run `newgrp docker`)"),
            blocks=["image", "launch"],
            data=data,
        )
    return finding(
        ctx.severity("fail"),
        _("{user} may not use {path}").format(user=user, path=sock),
        detail=detail,
        why=why,
        fix=_("sudo usermod -aG {group} {user}, then log out and back in").format(
            group=group, user=user
        ),
        blocks=["image", "launch"],
        data=data,
    )


def _has_pw(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


def _wants_gpus(ctx: CheckContext) -> bool:
    return not ctx.judged or (ctx.needs.device == "cuda" and ctx.needs.container_gpus)


def check_nvidia_runtime(ctx: CheckContext) -> CheckResult:
    skipped = _not_applicable(ctx)
    if skipped:
        return skipped
    why = _(
        "`docker run --gpus all` needs the NVIDIA Container Toolkit; without it Docker says "
        "'could not select device driver \"\" with capabilities: [[gpu]]'."
    )
    if not _wants_gpus(ctx):
        return finding("skip", _("not needed: the container gets no GPUs"), why=why)
    facts = docker_facts(ctx)
    if not facts["reachable"]:
        return finding("skip", _("daemon not reachable (see docker_daemon)"), why=why)
    runtimes = facts["runtimes"]
    hook = shutil.which("nvidia-container-runtime-hook")
    data = {"runtimes": runtimes, "hook": hook}
    if "nvidia" in runtimes or hook:
        how = (
            _("runtime 'nvidia' registered")
            if "nvidia" in runtimes
            else _("hook at {path}").format(path=hook)
        )
        detail = _("daemon runtimes: {runtimes}").format(runtimes=", ".join(runtimes))
        return finding("ok", how, detail=detail, why=why, data=data)
    return finding(
        ctx.severity("fail"),
        _("NVIDIA container runtime missing"),
        detail=_("daemon runtimes: {runtimes}").format(runtimes=", ".join(runtimes) or "none")
        + _("; no nvidia-container-runtime-hook on PATH"),
        why=why + _(" (nvidia-docker2 is retired: the toolkit replaces it)"),
        fix=INSTALL_TOOLKIT,
        blocks=["launch"],
        data=data,
    )


def _probe_image(facts: dict[str, Any], wanted: str | None) -> str | None:
    """The preset's image when local, else any local image that looks like CUDA."""
    client = facts["client"]
    if wanted and facts.get("image_local"):
        return wanted
    try:
        images = client.images.list()
    except Exception:
        return None
    for image in images:
        for tag in image.tags:
            if "cuda" in tag or "pytorch" in tag:
                return str(tag)
    return None


def check_gpu_probe(ctx: CheckContext) -> CheckResult:
    skipped = _not_applicable(ctx)
    if skipped:
        return skipped
    why = _("Proves end to end that a container sees the GPUs, before a long image build.")
    if not _wants_gpus(ctx):
        return finding("skip", _("not needed: the container gets no GPUs"), why=why)
    facts = docker_facts(ctx)
    if not facts["reachable"]:
        return finding("skip", _("daemon not reachable (see docker_daemon)"), why=why)
    if "nvidia" not in facts["runtimes"] and not shutil.which("nvidia-container-runtime-hook"):
        return finding("skip", _("no NVIDIA runtime (see nvidia_runtime)"), why=why)
    image = _probe_image(facts, ctx.needs.image)
    if image is None:
        return finding(
            "skip", _("no CUDA image local yet: the Images step pulls one, then re-run"), why=why
        )
    return _run_probe(facts["client"], image, why)


def _run_probe(client: Any, image: str, why: str) -> CheckResult:
    import docker

    request = docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])
    argv = ["docker", "run", "--rm", "--gpus", "all", "--entrypoint", "nvidia-smi", image, "-L"]
    container = None
    try:
        container = client.containers.run(
            image, ["-L"], entrypoint="nvidia-smi", device_requests=[request], detach=True
        )
        status = container.wait(timeout=20)
        logs = container.logs().decode(errors="replace").strip()
    except Exception as exc:
        text = str(exc).splitlines()[0][:400]
        return finding(
            "fail",
            _("a GPU container did not start"),
            detail=f"{' '.join(argv)}\n{text}",
            why=why,
            fix=_(
                "sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl restart docker; "
                "an 'NVML: Driver/library version mismatch' needs a reboot after a driver update"
            ),
            blocks=["launch"],
        )
    finally:
        if container is not None:
            try:
                container.remove(force=True)
            except Exception:
                pass
    code = int(status.get("StatusCode", 1))
    gpus = [line for line in logs.splitlines() if line.startswith("GPU ")]
    if code == 0 and gpus:
        return finding(
            "ok",
            _("{count} GPU(s) visible in {image}").format(count=len(gpus), image=image),
            detail=logs,
            why=why,
            data={"image": image, "gpus": gpus},
        )
    return finding(
        "fail",
        _("GPU probe in {image} exited {code}").format(image=image, code=code),
        detail=logs,
        why=why,
        fix=_("read the output above; reboot after a driver update"),
        blocks=["launch"],
    )
