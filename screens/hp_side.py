"""What the Hyperparameters step's values imply: pure functions, run in its side worker's
thread (never on the UI thread), so typing never waits for the planner or the plan."""

from __future__ import annotations

from backend.i18n import _
from backend.model.placeholders import resolve_placeholders
from backend.planner import GpuSpec, ModelShape, derive, shape_for_preset
from backend.planner.fields import cross_checks
from backend.planner.gpu import ALIASES
from backend.planner.methods import estimate_preset
from backend.planner.report import estimate_lines
from backend.preset import Preset
from backend.preset.schema import map_container_path


def shape_of(preset: Preset) -> ModelShape | None:
    try:
        return shape_for_preset(preset)
    except Exception:  # a malformed config.json: the memory panel says so
        return None


def derived_text(preset: Preset, records_info: tuple[str, int | None, str]) -> str:
    world = preset.launch.nproc_per_node * preset.launch.nnodes
    records, note = records_info[1], records_info[2]
    d = derive(preset.training, world, records, note)

    def show(value: int | None) -> str:
        return f"{value:,}" if value is not None else _("unknown (dataset size unknown)")

    t = preset.training
    lines = [
        _("global batch: {batch} = {per_device} x {accum} accumulation x {world} GPU(s)").format(
            batch=d.global_batch, per_device=t.per_device_train_batch_size,
            accum=t.gradient_accumulation_steps, world=world),
        _("tokens per step: {tokens} (every sample padded to {length})").format(
            tokens=f"{d.tokens_per_step:,}", length=t.model_max_length),
        _("dataset: {note}").format(note=_(note)),
        _("steps per epoch: {n}").format(n=show(d.steps_per_epoch)),
        _("total steps: {n}").format(n=show(d.total_steps)),
        _("warmup steps: {n}").format(n=show(d.warmup_steps)),
    ]  # fmt: skip
    return "\n".join(lines)


def memory_text(preset: Preset, shape: ModelShape | None, gpu: GpuSpec | None) -> str:
    if preset.launch.device == "cpu":
        return _(
            "The preset trains on the CPU (launch.device: cpu): there is no GPU memory to "
            "plan, so Tune has nothing to do. A GPU preset can be planned here: choose "
            "its GPU."
        )
    if shape is None:
        return _(
            "Model shape unknown: {dir} has no config.json yet (fetch the model in the Model step)."
        ).format(dir=preset.model.dir)
    if gpu is None:
        return _("No GPU found here: choose one above to see the memory plan.")
    # the preset's own method (LoRA/QLoRA adapters, ZeRO): the same estimate as the checks'
    est = estimate_preset(shape, preset, gpu)
    return "\n".join(estimate_lines(est, shape, gpu))


def command_text(preset: Preset) -> str:
    from backend.runs.spec import plan_spec  # deferred: worker thread, not at first paint

    try:  # the launch's own argv (its port, its torchrun), as the Launch step and trainwiz plan
        return plan_spec(preset).plan.step("train").display()
    except Exception as exc:  # an unresolvable placeholder: say why instead of a command
        return f"command unavailable: {exc}"


NO_GPU = "__none__"  # the GPU list's "no GPU chosen"
LOCAL_GPU = "__local__"  # and "this machine's GPU", whatever its name


def gpu_options(local_gpu: GpuSpec | None) -> list[tuple[str, str]]:
    """The "Plan for GPU" list: none, this machine's GPU when one was found, every alias."""
    options = [(_("no GPU chosen"), NO_GPU)]
    if local_gpu is not None:
        label = _("this machine: {count} x {name}").format(
            count=local_gpu.count, name=local_gpu.name
        )
        options.append((label, LOCAL_GPU))
    options += [(f"{alias}: {name}", alias) for alias, name in ALIASES.items()]
    return options


def gpu_choice(gpu: GpuSpec | None, local_gpu: GpuSpec | None) -> str:
    """The list's value that shows ``gpu``."""
    if gpu is None:
        return NO_GPU
    if local_gpu is not None and gpu == local_gpu:
        return LOCAL_GPU
    for alias, name in ALIASES.items():
        if name == gpu.name:
            return alias
    return NO_GPU


def data_path_of(preset: Preset) -> str:
    """The training data file as this machine sees it (a container path mapped back)."""
    path = resolve_placeholders(preset.training.data_path, None)
    if preset.launch.runner == "docker":
        path = map_container_path(path, preset.container.volumes, preset.launch.workdir)
    return path


def cross_by_path(
    preset: Preset, gpu: GpuSpec | None, shape: ModelShape | None, visible: int | None
) -> dict[str, tuple[str, str]]:
    """Each field's most severe cross-field message: (text, level)."""
    by_path: dict[str, tuple[str, str]] = {}
    rank = {"error": 0, "warning": 1, "info": 2}
    for issue in sorted(cross_checks(preset, gpu, shape, visible), key=lambda i: rank[i.level]):
        by_path.setdefault(issue.path, (issue.message, issue.level))
    return by_path
