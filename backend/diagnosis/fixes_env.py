"""Fixes for failures of the environment: flash-attn, container options, argument names.

Split from fixes.py to keep modules small; same conventions (cheapest fix first, concrete
preset changes only when a preset is given).
"""

from __future__ import annotations

import re
import shlex
from typing import TYPE_CHECKING, Any

from backend.diagnosis.model import Fix, PresetChange
from backend.i18n import _

if TYPE_CHECKING:
    from backend.preset.schema import Preset

_RLIMITS = [
    "cpu",
    "fsize",
    "data",
    "stack",
    "core",
    "rss",
    "nproc",
    "nofile",
    "memlock",
    "as",
    "locks",
    "sigpending",
    "msgqueue",
    "nice",
    "rtprio",
    "rttime",
]  # Linux RLIMIT_* numbering
# (old flag, new flag, first transformers version with the new name, last accepting the old one)
# (old flag, new flag, first version trainwiz writes the new name for, version to name when the
# old name is rejected, version to name when the new one is unknown); see backend/plan/hf_flags.
_RENAMES = [
    ("evaluation_strategy", "eval_strategy", "4.41.0", "4.57.6", "4.40.2"),
    ("fsdp_transformer_layer_cls_to_wrap", "fsdp_config", "5.0.0", "5.0.0", "4.57.6"),
]


def _change(path: str, value: Any, reason: str) -> PresetChange:
    return PresetChange(path=path, value=value, reason=reason)


def flash_fixes(preset: Preset | None, match: str, runtime: bool) -> list[Fix]:
    env = preset.environment if preset else None
    no_iso = Fix(
        _("Build flash-attn with --no-build-isolation"),
        _("pip's isolated build environment has no torch ('No module named torch')"),
        [
            _change(
                "environment.flash_attn.no_build_isolation", True, _("build sees the image's torch")
            )
        ]
        if env
        else [],
    )
    devel = None
    if env is None or "devel" not in env.image:
        new_image = (
            env.image.replace("runtime", "devel") if env and "runtime" in env.image else None
        )
        devel = Fix(
            _("Use a -devel image (it has nvcc and CUDA headers)"),
            _("-runtime images have no compiler"),
            [_change("environment.image", new_image, _("same torch/CUDA, with nvcc"))]
            if new_image
            else [],
        )
    jobs = Fix(
        _("Limit parallel nvcc jobs (MAX_JOBS=2)"),
        _("each nvcc job can take several GB of RAM"),
        [_change("environment.flash_attn.max_jobs", 2, _("fewer compilers at once"))]
        if env
        else [],
    )
    sdpa = Fix(
        _("Train with PyTorch SDPA attention, without flash-attn"),
        _("no compilation; SDPA is fast on recent torch, a little more memory"),
        [
            _change("training.attn_implementation", "sdpa", _("no flash-attn needed")),
            _change("environment.flash_attn.install", "never", _("skip the build")),
        ]
        if env
        else [],
    )
    rebuild = Fix(
        _("Rebuild flash-attn against this image's torch"),
        _("the wheel was built for another torch ABI"),
        [
            _change("environment.flash_attn.install", "always", _("build here")),
            _change("environment.flash_attn.no_build_isolation", True, _("use the image's torch")),
        ]
        if env
        else [],
    )
    if runtime:
        order = [rebuild, sdpa] if "undefined symbol" in match else [sdpa, rebuild]
    elif re.search(r"No module named", match):
        if env is not None and env.flash_attn.no_build_isolation:
            # Isolation is already off, so torch was missing from the environment itself.
            return [
                Fix(
                    _("Install torch before flash-attn"),
                    _(
                        "--no-build-isolation is already on: the build found no torch in the "
                        "environment itself; install torch first, then flash-attn"
                    ),
                ),
                sdpa,
            ]
        order = [no_iso, sdpa]
    elif re.search(r"nvcc|CUDA_HOME|No CUDA runtime", match):
        order = [devel, sdpa] if devel else [sdpa]
    elif "Killed" in match:
        order = [jobs, sdpa]
    else:
        order = [no_iso, devel, jobs, sdpa] if devel else [no_iso, jobs, sdpa]
    return [f for f in order if f is not None and (f.changes or preset is None)]


def container_fixes(preset: Preset | None, match: str, folder: str | None = None) -> list[Fix]:
    """Drop the option the host refused; if the preset does not ask for it, say where it
    comes from instead of proposing a change that changes nothing. ``folder``: the path of a
    permission error, whose fix is that folder's owner, not a docker option."""
    if folder:  # a folder another user owns (the signature's path group), not a docker option
        return [
            Fix(
                _("Make {path} yours, or write elsewhere").format(path=folder),
                _(
                    "`sudo chown -R $(id -u):$(id -g) {path}`; or point HF_HOME (the Hub cache) "
                    "or training.output_dir at a folder you own; in Docker, mount a folder the "
                    "container's user may write"
                ).format(path=shlex.quote(folder)),  # a path from the log: quoted for a shell
            )
        ]
    rlimit = re.search(r"rlimit type (\d+)", match)
    number = int(rlimit.group(1)) if rlimit else -1
    name = _RLIMITS[number] if 0 <= number < len(_RLIMITS) else None
    fixes: list[Fix] = []
    if rlimit or "ulimit" in match:
        title = (
            _("Drop the {name} ulimit").format(name=name) if name else _("Drop the raised ulimit")
        )
        if preset is None or name is None:
            fixes.append(Fix(title, _("this host does not allow raising it")))
        elif any(u.name == name for u in preset.container.ulimits):
            keep = [u.model_dump() for u in preset.container.ulimits if u.name != name]
            fixes.append(
                Fix(
                    title,
                    _("this host does not allow raising it"),
                    [
                        _change(
                            "container.ulimits", keep, _("drop --ulimit {name}").format(name=name)
                        )
                    ],
                )
            )
        else:
            fixes.append(
                Fix(
                    _("The {name} limit does not come from this preset").format(name=name),
                    _("look for the daemon's --default-ulimit or the tool that ran docker"),
                )
            )
    if re.search(r"(?i)caps|capabilit|privileged", match) or not fixes:
        title = _("Run without --privileged / --cap-add")
        if preset is None:
            fixes.append(Fix(title, _("the host refuses extra capabilities")))
        elif preset.container.privileged or preset.container.cap_add:
            fixes.append(
                Fix(
                    title,
                    _("the host refuses extra capabilities"),
                    [
                        _change("container.privileged", False, _("no extra capabilities")),
                        _change("container.cap_add", [], _("no extra capabilities")),
                    ],
                )
            )
        else:
            fixes.append(
                Fix(
                    _("This preset asks for no extra capabilities"),
                    _("the refusal came from another docker run (or a rootless daemon's policy)"),
                )
            )
    return fixes


def hf_fixes(preset: Preset | None, groups: dict[str, Any]) -> list[Fix]:
    if "best" in groups:  # TrainingArguments' load_best_model_at_end check
        same = preset is not None and preset.training.eval_strategy in ("steps", "epoch")
        return [
            Fix(
                _("Save on the evaluation schedule"),
                _("load_best_model_at_end needs a checkpoint at every evaluation"),
                [
                    _change(
                        "training.save_strategy",
                        preset.training.eval_strategy,
                        _("the same schedule as eval_strategy"),
                    )
                ]
                if same and preset is not None
                else [],
            )
        ]
    flags = " ".join(str(groups.get(k, "")) for k in ("args", "kw", "unrec"))
    fixes: list[Fix] = []
    for old, new, first_new, newer, older in _RENAMES:
        if re.search(rf"\b{old}\b", flags):
            fixes.append(
                Fix(
                    _("Use --{new} (the installed transformers >= {version})").format(
                        new=new, version=first_new
                    ),
                    _(
                        "--{old} was renamed; trainwiz writes the name of environment.transformers"
                    ).format(old=old),
                    [
                        _change(
                            "environment.transformers",
                            newer,
                            _("flags named for >= {version}").format(version=first_new),
                        )
                    ]
                    if preset
                    else [],
                )
            )
        elif re.search(rf"\b{new}\b", flags):
            fixes.append(
                Fix(
                    _("Use --{old} (the installed transformers is older than {version})").format(
                        old=old, version=first_new
                    ),
                    _(
                        "--{new} does not exist before {version}; set the version the image has"
                    ).format(new=new, version=first_new),
                    [
                        _change(
                            "environment.transformers",
                            older,
                            _("flags named for the older version"),
                        )
                    ]
                    if preset
                    else [],
                )
            )
    if not fixes:
        fixes.append(
            Fix(
                _("Set environment.transformers to the version the image has"),
                _("trainwiz names flags for that version"),
            )
        )
    return fixes
