"""The values HF's TrainingArguments accepts for its enum options, checked at plan time.

``lr_scheduler_type``, ``optim`` and ``report_to`` are free text in the preset (they are HF's
names), so a typo or an 8,192-character value used to plan fine and kill the run minutes later
with argparse's "invalid choice". The lists come from transformers' own enums
(``SchedulerType``, ``OptimizerNames``, ``INTEGRATION_TO_CALLBACK``) of the versions trainwiz
installs and of 4.31 (the seed recipe's); for another target version the union of the known names is used (a typo is still
caught; a name from a version trainwiz does not know is refused with the list to pick from).
"""

from __future__ import annotations

from backend.errors import BadInput
from backend.i18n import _
from backend.preset.schema import Preset

# transformers 4.57.6 (the default environment.transformers), read from the installed enums.
_SCHEDULERS_457 = (
    "linear", "cosine", "cosine_with_restarts", "polynomial", "constant",
    "constant_with_warmup", "inverse_sqrt", "reduce_lr_on_plateau", "cosine_with_min_lr",
    "cosine_warmup_with_min_lr", "warmup_stable_decay",
)  # fmt: skip
_OPTIMS_457 = (
    "adamw_torch", "adamw_torch_fused", "adamw_torch_xla", "adamw_torch_npu_fused",
    "adamw_apex_fused", "adafactor", "adamw_anyprecision", "adamw_torch_4bit", "adamw_torch_8bit",
    "ademamix", "sgd", "adagrad", "adamw_bnb_8bit", "adamw_8bit", "ademamix_8bit", "lion_8bit",
    "lion_32bit", "paged_adamw_32bit", "paged_adamw_8bit", "paged_ademamix_32bit",
    "paged_ademamix_8bit", "paged_lion_32bit", "paged_lion_8bit", "rmsprop", "rmsprop_bnb",
    "rmsprop_bnb_8bit", "rmsprop_bnb_32bit", "galore_adamw", "galore_adamw_8bit",
    "galore_adafactor", "galore_adamw_layerwise", "galore_adamw_8bit_layerwise",
    "galore_adafactor_layerwise", "lomo", "adalomo", "grokadamw", "schedule_free_radam",
    "schedule_free_adamw", "schedule_free_sgd", "apollo_adamw", "apollo_adamw_layerwise",
    "stable_adamw",
)  # fmt: skip
_REPORTERS_457 = (
    "azure_ml", "comet_ml", "mlflow", "neptune", "tensorboard", "trackio", "wandb",
    "codecarbon", "clearml", "dagshub", "flyte", "dvclive", "swanlab", "all", "none",
)  # fmt: skip
# transformers 4.31.0 (FastChat's Vicuna v1.3 era, the seed recipe's), read from that release's
# source (trainer_utils.SchedulerType, training_args.OptimizerNames, integrations'
# INTEGRATION_TO_CALLBACK plus "all" and "none", which TrainingArguments resolves itself).
_SCHEDULERS_431 = (
    "linear", "cosine", "cosine_with_restarts", "polynomial", "constant",
    "constant_with_warmup", "inverse_sqrt", "reduce_lr_on_plateau",
)  # fmt: skip
_OPTIMS_431 = (
    "adamw_hf", "adamw_torch", "adamw_torch_fused", "adamw_torch_xla", "adamw_apex_fused",
    "adafactor", "adamw_anyprecision", "sgd", "adagrad", "adamw_bnb_8bit", "adamw_8bit",
    "lion_8bit", "lion_32bit", "paged_adamw_32bit", "paged_adamw_8bit", "paged_lion_32bit",
    "paged_lion_8bit",
)  # fmt: skip
_REPORTERS_431 = (
    "azure_ml", "comet_ml", "mlflow", "neptune", "tensorboard", "wandb", "codecarbon",
    "clearml", "dagshub", "flyte", "all", "none",
)  # fmt: skip
# Names older transformers releases had (FastChat's own scripts were written against them).
_OLDER = {"optim": ("adamw_hf",), "report_to": ("ray", "sigopt")}
KNOWN = {
    "4.57": {"lr_scheduler_type": _SCHEDULERS_457, "optim": _OPTIMS_457,
             "report_to": _REPORTERS_457},
    "4.31": {"lr_scheduler_type": _SCHEDULERS_431, "optim": _OPTIMS_431,
             "report_to": _REPORTERS_431},
}  # fmt: skip


def choices(field: str, target: str | None) -> tuple[str, ...]:
    """The accepted names of ``field`` for transformers ``target`` (major.minor known), else
    every name any known version accepts."""
    minor = ".".join((target or "").split(".")[:2])
    if minor in KNOWN:
        return KNOWN[minor][field]
    union = {name for table in KNOWN.values() for name in table[field]}
    return tuple(sorted(union | set(_OLDER.get(field, ()))))


def check_hf_choices(preset: Preset, target: str | None) -> None:
    """BadInput naming each enum field whose value the target transformers would refuse."""
    problems = []
    for field in ("lr_scheduler_type", "optim", "report_to"):
        value = getattr(preset.training, field)
        if value is None:
            continue
        allowed = choices(field, target)
        if value not in allowed:
            shown = value if len(value) <= 60 else value[:57] + "..."
            problems.append(
                _(
                    "training.{field}: '{value}' is not one of transformers {version}'s: {names}"
                ).format(
                    field=field,
                    value=shown,
                    version=target or _("(any known version)"),
                    names=", ".join(allowed),
                )
            )
    if problems:
        raise BadInput(problems)
