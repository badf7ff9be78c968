"""Where a run may write its weights: ``training.output_dir`` checked before anything starts.

The trainer writes config, weights and tokenizer files into ``output_dir`` as whoever runs
trainwiz (often root), overwriting what is there. So a preset may only name: a folder inside the
run directory (``@run/...``), a folder that does not exist yet (trainwiz makes it and leaves a
marker file in it), an existing empty folder, or a folder trainwiz made before (it holds the
marker). Anything else (``/etc``, ``/``, the home directory, a folder of the user's files,
``@run/..``, a path with ``..``, a new folder under a system tree) is refused naming the field.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from backend.errors import BadInput
from backend.i18n import _
from backend.model.placeholders import resolve_placeholders
from backend.preset.schema import Preset
from backend.preset.schema_container import map_container_path

MARKER = ".trainwiz-output"
FIELD = "training.output_dir"
# New folders may not be made below these (the system's own trees; /root and /home are
# users' homes, where a new folder is the user's business).
_SYSTEM = ("/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/boot", "/proc", "/sys",
           "/dev", "/var", "/run", "/snap", "/opt/containerd")  # fmt: skip


def _under_system(path: Path) -> bool:
    text = str(path)
    return text == "/" or any(text == s or text.startswith(s + "/") for s in _SYSTEM)


def host_output_dir(preset: Preset, run_dir: Path | None, cwd: Path | None = None) -> Path | None:
    """The host folder the run's output_dir is, or None when it lives only inside the
    container (a docker path no volume maps) or inside the run directory."""
    value = preset.training.output_dir
    if value == "@run" or value.startswith("@run/"):
        return None
    resolved = resolve_placeholders(value, run_dir)
    if preset.launch.runner == "docker":
        mapped = map_container_path(resolved, preset.container.volumes, preset.container.workdir)
        if mapped == resolved and not any(
            resolved == v.container or resolved.startswith(v.container.rstrip("/") + "/")
            for v in preset.container.volumes
        ):
            return None  # the container's own file system
        if mapped == "@run" or mapped.startswith("@run/"):
            return None  # a volume of the run dir: inside it
        resolved = resolve_placeholders(mapped, run_dir)
    path = Path(resolved).expanduser()
    if not path.is_absolute():
        base = cwd or Path(preset.launch.workdir or os.getcwd()).expanduser()
        path = base / path
    return Path(os.path.abspath(path))


def output_dir_problem(preset: Preset, run_dir: Path | None = None) -> str | None:
    value = preset.training.output_dir
    if value == "@run" or value.startswith("@run/"):
        if ".." in PurePosixPath(value[4:]).parts:
            return _(
                "'{value}' leaves the run directory: name a folder inside it, e.g. @run/output"
            ).format(value=value)
        return None
    if ".." in PurePosixPath(value).parts:
        return _(
            "'{value}' holds '..': name the folder directly (an absolute path or @run/NAME)"
        ).format(value=value)
    path = host_output_dir(preset, run_dir)
    if path is None:
        return None
    try:
        real = Path(os.path.realpath(path))
        if real.exists():
            if not real.is_dir():
                return _("{path} is a file, not a folder").format(path=real)
            if (real / MARKER).is_file():
                return None  # made by trainwiz for an earlier run
            if real == Path("/") or any(real.iterdir()):
                return _(
                    "{path} holds files trainwiz did not make (the trainer would overwrite them): "
                    "use @run/output, an empty folder or a new one"
                ).format(path=real)
            return None
        if _under_system(real):
            return _(
                "{path} is inside a system directory: use @run/output or a folder of yours"
            ).format(path=real)
    except OSError as exc:
        return _("{path} cannot be used: {why}").format(path=path, why=exc.strerror)
    return None


def check_output_dir(preset: Preset, run_dir: Path | None = None) -> None:
    problem = output_dir_problem(preset, run_dir)
    if problem:
        raise BadInput(f"{FIELD}: {problem}")


def claim_output_dir(preset: Preset, run_dir: Path) -> None:
    """Make the output folder (when it is outside the run dir) and mark it as trainwiz's."""
    path = host_output_dir(preset, run_dir)
    if path is None:
        return
    path.mkdir(parents=True, exist_ok=True)
    marker = path / MARKER
    if not marker.exists():
        marker.write_text(f"made by trainwiz for run {run_dir.name}\n", encoding="utf-8")
