"""The host runner's environment: a venv with the same pins, built the same way as the image.

It lives in ``envs_dir()/<hash>``, where the hash covers the same plan as the image tag plus the
interpreter; a finished venv holds a ``trainwiz-env.json`` marker, so a half-built one (crash,
cancel) is rebuilt rather than trusted. Built in ``<hash>.partial`` and renamed when complete.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from backend import subproc
from backend.errors import TrainwizError
from backend.i18n import _
from backend.images.events import LogLine
from backend.images.host import HostGpus
from backend.images.plan import EnvPlan, plan_environment
from backend.paths import envs_dir
from backend.preset.schema import Preset

MARKER = "trainwiz-env.json"
CANCEL_GRACE_S = 5.0  # pip killed mid-install leaves only the .partial venv, removed after


@dataclass
class VenvResult:
    path: str
    python: str
    ok: bool
    cached: bool
    log_tail: list[str] = field(default_factory=list)
    error: str | None = None
    versions: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


def venv_hash(plan: EnvPlan, python: str) -> str:
    done = subproc.probe([python, "-c", "import sys; print(sys.version)"], None)
    if isinstance(done.error, OSError):
        raise done.error  # a python that cannot run has no hash
    version = done.stdout.strip()
    blob = json.dumps([plan.inputs_hash(), version, "venv-1"]).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def venv_path(preset: Preset, host: HostGpus | None = None, python: str | None = None) -> Path:
    plan = plan_environment(preset, host)
    return envs_dir() / venv_hash(plan, python or sys.executable)


PipCommand = tuple[list[str], dict[str, str]]


def _pip_commands(plan: EnvPlan, py: str) -> list[PipCommand]:
    """The same installs as the Dockerfile, in the same order: (argv, extra environment).

    The index URLs go in the environment (PIP_INDEX_URL, PIP_EXTRA_INDEX_URL), never in argv:
    ``/proc/<pid>/cmdline`` is readable by every user of the host, a process's environment only
    by its own user, and a mirror URL may carry a password.

    ``--no-compile``: pip would byte-compile every module of torch and transformers (a third of
    the build's CPU); the trainer compiles the few it imports on its first start instead, into
    this same writable venv.
    """
    pip = [py, "-m", "pip", "install", "--no-compile"]
    common = plan.indexes.host_argv()
    for folder in plan.find_links:
        common += ["--find-links", str(folder)]
    if plan.pip_cert:
        common += ["--cert", str(plan.pip_cert)]
    env = plan.indexes.pip_env()
    cmds: list[PipCommand] = [([*pip, *common, "--upgrade", "pip", "setuptools", "wheel"], env)]
    cmds.append(([*pip, *common, plan.torch_spec or "torch"], env))
    if plan.fastchat_editable:
        cmds.append(([*pip, *common, "-e", plan.fastchat_editable[1]], env))
    install = [*plan.requirements]
    if plan.fastchat_spec:
        install.insert(0, plan.fastchat_spec)
    cmds.append(([*pip, *common, *install], env))
    if plan.flash_attn:
        cmds.append(([*pip, *common, "ninja", "packaging", "psutil"], env))
        fa_argv = [*pip, *plan.indexes.host_argv(flash_attn=True), "--no-build-isolation"]
        cmds.append(([*fa_argv, "flash-attn"], plan.indexes.pip_env(flash_attn=True)))
    return cmds


def _run(
    argv: list[str],
    lines: list[str],
    progress: Callable[..., None] | None,
    cancel: threading.Event | None,
    env: dict[str, str] | None = None,
) -> int:
    """One step of the build; its exit code, -1 when it was cancelled (pip and the compilers
    it started are stopped together: ``subproc``'s process group)."""
    lines.append("$ " + " ".join(argv))

    def line(text: str) -> None:
        lines.append(text)
        if progress is not None:
            progress(LogLine(text))

    done = subproc.run(argv, env=env, cancel=cancel, on_line=line, grace=CANCEL_GRACE_S)
    return -1 if done.code is None else done.code


def build_host_env(
    preset: Preset,
    *,
    progress: Callable[..., None] | None = None,
    cancel: threading.Event | None = None,
    host: HostGpus | None = None,
    python: str | None = None,
) -> VenvResult:
    """Build (or reuse) the host venv for ``preset``; a failed pip leaves no venv behind."""
    started = time.monotonic()
    py = python or sys.executable
    plan = plan_environment(preset, host)
    target = envs_dir() / venv_hash(plan, py)
    vpy = str(target / "bin" / "python")
    if (target / MARKER).is_file():
        versions = json.loads((target / MARKER).read_text(encoding="utf-8")).get("versions", {})
        return VenvResult(str(target), vpy, True, True, versions=versions, notes=plan.notes)
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.rmtree(target, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []
    # Built under '.partial' and renamed only when complete; _repoint fixes the embedded paths.
    code = _run([py, "-m", "venv", str(partial)], lines, progress, cancel)
    ppy = str(partial / "bin" / "python")
    env = dict(os.environ, MAX_JOBS=str(plan.max_jobs), PIP_DISABLE_PIP_VERSION_CHECK="1")
    for argv, index_env in _pip_commands(plan, ppy):
        if code != 0 or (cancel is not None and cancel.is_set()):
            break
        code = _run(argv, lines, progress, cancel, {**env, **index_env})
    if code == 0 and not (cancel is not None and cancel.is_set()):
        probe = subproc.probe(
            [
                ppy,
                "-c",
                "import json, importlib;"
                "print(json.dumps({m: getattr(importlib.import_module(m), '__version__', '?')"
                " for m in ('torch', 'transformers', 'accelerate', 'fastchat')}))",
            ],
            None,
        )
        if isinstance(probe.error, OSError):
            raise probe.error
        assert probe.code is not None
        code = probe.code
        lines.extend((probe.stdout + probe.stderr).splitlines())
    if code != 0 or (cancel is not None and cancel.is_set()):
        shutil.rmtree(partial, ignore_errors=True)
        error = "cancelled" if cancel is not None and cancel.is_set() else f"exit status {code}"
        return VenvResult(
            str(target), vpy, False, False, lines[-40:], error, seconds=time.monotonic() - started
        )
    versions = json.loads(probe.stdout.strip().splitlines()[-1])
    partial.rename(target)
    _repoint(partial, target)
    (target / MARKER).write_text(
        json.dumps({"preset": preset.name, "versions": versions, "python": py}, indent=2),
        encoding="utf-8",
    )
    return VenvResult(
        str(target),
        vpy,
        True,
        False,
        lines[-40:],
        versions=versions,
        seconds=round(time.monotonic() - started, 1),
        notes=plan.notes,
    )


def _repoint(old: Path, new: Path) -> None:
    """Rewrite the old prefix in bin/ scripts and pyvenv.cfg after the rename."""
    old_b, new_b = str(old).encode(), str(new).encode()
    for path in [*(new / "bin").iterdir(), new / "pyvenv.cfg"]:
        if path.is_symlink() or not path.is_file():
            continue
        data = path.read_bytes()
        if old_b in data:
            path.write_bytes(data.replace(old_b, new_b))


def ensure_host_env(preset: Preset, **kwargs: object) -> str:
    """The venv's python, building the venv first if needed; raises if the build fails."""
    result = build_host_env(preset, **kwargs)  # type: ignore[arg-type]
    if not result.ok:
        raise TrainwizError(
            _("host environment build failed ({error}): {value}").format(
                error=result.error, value=result.log_tail[-1:]
            )
        )
    return result.python
