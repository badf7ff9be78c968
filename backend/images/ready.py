"""Whether a preset's training environment exists here, and which binaries it trains with.

The one answer for the launch (its spec and preflight), the step table, replay and the
screens: the host runner's torchrun (the preset's venv, else the one beside this Python, else
PATH, else the venv ``trainwiz env build`` makes), the docker runner's image (the environment
image of ``mode: image``, else the base).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from backend import subproc
from backend.errors import BadInput
from backend.i18n import _
from backend.images.methods import method_packages
from backend.preset.schema import Preset

# Whether each name imports, as the training Python sees it (no import: deepspeed's takes 10 s).
_FIND_SPECS = (
    "import importlib.util, sys; "
    "print(' '.join(n for n in sys.argv[1:] if importlib.util.find_spec(n) is None))"
)


def training_bin(preset: Preset, name: str = "torchrun") -> Path:
    """The host training environment's ``name`` (torchrun, python), in this order: the preset's
    ``environment.venv``; trainwiz's own environment; PATH; the venv ``trainwiz env build``
    made for this preset. The plan's environment step and the launch read the same order, so
    a venv the plan builds is the one the run trains in (``trains_in_built_venv``)."""
    venv = preset.environment.venv
    if venv:
        candidate = Path(venv).expanduser() / "bin" / name
        if candidate.is_file():
            return candidate
        raise BadInput(
            _(
                "environment.venv: {candidate} does not exist: point venv at an environment "
                "with torch and fschat, or empty it to train in the one 'trainwiz env build "
                "{name}' makes"
            ).format(candidate=candidate, name=preset.name)
        )
    found = _installed_bin(name)
    if found is not None:
        return found
    built, complete = built_venv(preset)
    if complete and (built / "bin" / name).is_file():
        return built / "bin" / name
    raise BadInput(
        _(
            "no training environment here (no {name} beside trainwiz or on PATH): build it "
            "('trainwiz env build {name2}', made in {built}) or set environment.venv to a venv "
            "with torch"
        ).format(name=name, name2=preset.name, built=built)
    )


def _installed_bin(name: str) -> Path | None:
    """``name`` beside this Python (trainwiz installed with its training extra), else on PATH."""
    own = Path(sys.executable).parent / name
    if own.is_file():
        return own
    found = shutil.which(name)
    return Path(found) if found else None


def built_venv(preset: Preset) -> tuple[Path, bool]:
    """Where ``trainwiz env build`` puts (or put) this preset's host venv, and whether a
    build finished there (its marker: a half-built venv is never trained in)."""
    from backend.images.venv import MARKER, venv_path  # deferred: reads the host's GPUs

    path = venv_path(preset)
    return path, (path / MARKER).is_file()


def trains_in_built_venv(preset: Preset) -> bool:
    """A host run trains in the venv ``trainwiz env build`` makes: ``environment.venv`` is
    empty and trainwiz's own environment (or PATH) has no torchrun. Only then does the plan
    hold an environment step; otherwise the venv it built would go unused."""
    return (
        preset.launch.runner == "host"
        and not preset.environment.venv
        and _installed_bin("torchrun") is None
    )


def missing_method_packages(preset: Preset) -> tuple[str, list[str]]:
    """(the host training environment's python, the method's packages it lacks). A host run
    trains with an existing environment (the preset's venv, else trainwiz's own) that no step
    installs into, so ZeRO without deepspeed failed only once torchrun started the trainer.
    Nothing is missing where it cannot be told (no environment yet, another runner)."""
    needed = method_packages(preset)
    if preset.launch.runner != "host" or not needed:
        return "", []
    try:
        python = training_bin(preset, "python")
    except BadInput:
        return "", []  # no environment yet: the launch's preflight says so itself
    done = subproc.probe([str(python), "-c", _FIND_SPECS, *needed], timeout=60)
    if done.code != 0:
        return str(python), []
    return str(python), done.stdout.split()


def refuse_missing_method_packages(preset: Preset) -> None:
    """BadInput naming the preset field whose method needs what the environment lacks."""
    python, missing = missing_method_packages(preset)
    if not missing:
        return
    field = "training.zero" if "deepspeed" in missing else "training.method"
    raise BadInput(
        _(
            "{field} needs {packages} in the training environment ({python}), and it is not "
            "installed there: {python} -m pip install {packages}, or set environment.venv to "
            "one that has it"
        ).format(field=field, packages=" ".join(missing), python=python)
    )


def image_for(preset: Preset) -> str:
    """The image the run's container starts from: the environment image (``mode: image``,
    tagged by a hash of its inputs) or the preset's base image (``in_container``)."""
    if preset.environment.mode == "image":
        from backend.images.build import env_image_tag  # deferred: the image planner is large

        return env_image_tag(preset)
    return preset.environment.image


def image_exists(image: str) -> bool:
    from backend.images.docker_client import docker_client  # deferred: imports the docker SDK

    try:
        docker_client().images.get(image)
    except Exception:
        return False
    return True


def environment_ready(preset: Preset) -> bool:
    if preset.launch.runner == "host":
        try:
            training_bin(preset)
        except BadInput:
            return False
        return True
    return image_exists(image_for(preset))
