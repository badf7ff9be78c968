"""The preset: the one description of a training job (schema version 1).

A preset says where the model comes from, which data, which image and environment, how the
container runs, how torchrun launches, and every training argument. Field names of
``TrainingArgs`` are FastChat's / Hugging Face's own flag names, so a preset reads like the
seed's command line. Defaults equal FastChat's and HF's, and only fields a preset sets are
rendered as flags (``model_fields_set``), which is how the seed's command is reproduced flag
for flag. Secrets never live here: ``model.token_env`` names an environment variable only.
"""

from __future__ import annotations

from typing import Literal

from pydantic import (
    Field,
    model_validator,
)

from backend.i18n import _
from backend.preset.schema_base import BIG, SCHEMA_VERSION, _Strict
from backend.preset.schema_container import (
    ContainerConfig,
    Ulimit,
    Volume,
    map_container_path,
    map_host_path,
)
from backend.preset.schema_launch import LaunchConfig, SlurmConfig, SshConfig
from backend.preset.schema_model import (
    EnvironmentConfig,
    FastChatInstall,
    FlashAttnPolicy,
    ModelSource,
    TinyModelSpec,
)
from backend.preset.schema_notify import NotifySettings
from backend.preset.schema_training import (
    LORA_BIASES,
    LoraSettings,
    MirrorLists,
    MirrorsConfig,
    TrainingArgs,
    ZeroSettings,
)

__all__ = [
    "BIG",
    "LORA_BIASES",
    "SCHEMA_VERSION",
    "ContainerConfig",
    "EnvironmentConfig",
    "FastChatInstall",
    "FlashAttnPolicy",
    "LaunchConfig",
    "LoraSettings",
    "MirrorLists",
    "MirrorsConfig",
    "ModelSource",
    "Preset",
    "SlurmConfig",
    "SshConfig",
    "TinyModelSpec",
    "TrainingArgs",
    "Ulimit",
    "Volume",
    "ZeroSettings",
    "_Strict",
    "map_container_path",
    "map_host_path",
]


class Preset(_Strict):
    """A whole training job. ``schema`` is the version, so old presets can be migrated."""

    schema_version: Literal[1] = Field(1, alias="schema")
    name: str = Field(..., pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", max_length=100)
    description: str = ""
    model: ModelSource
    environment: EnvironmentConfig = Field(default_factory=EnvironmentConfig)
    container: ContainerConfig = Field(default_factory=ContainerConfig)
    launch: LaunchConfig = Field(default_factory=LaunchConfig)
    training: TrainingArgs
    mirrors: MirrorsConfig = Field(default_factory=MirrorsConfig)
    notify: NotifySettings = Field(default_factory=NotifySettings)  # schema_notify.py

    @model_validator(mode="after")
    def _cross_checks(self) -> Preset:
        # FastChat builds no eval dataset without eval_data_path; HF then raises at start.
        # (The seed's own command has this mismatch; FastChat's train_mem.py tolerates it.)
        if (
            self.training.eval_strategy != "no"
            and not self.training.eval_data_path
            and not self.training.eval_split
            and self.launch.entry == "trainwiz"
        ):
            raise ValueError(
                _(
                    "training.eval_strategy is '{eval_strategy}' but training.eval_data_path is "
                    "empty: set eval_data_path, eval_split (e.g. 0.05) or eval_strategy: 'no'"
                ).format(eval_strategy=self.training.eval_strategy)
            )
        if self.launch.entry != "trainwiz":
            for name in ("eval_split", "save_minutes", "recompute_layers", "compile_layers"):
                if getattr(self.training, name) not in (None, False):
                    raise ValueError(
                        _(
                            "training.{name} needs launch.entry 'trainwiz' (FastChat's train_mem.py has no "
                            "such option): set entry: trainwiz or drop {name}"
                        ).format(name=name)
                    )
        if self.training.eval_split and self.training.eval_data_path:
            raise ValueError(
                _("training.eval_split and training.eval_data_path are both set: choose one")
            )
        if self.training.packing and self.launch.entry != "trainwiz":
            raise ValueError(
                _(
                    "training.packing needs launch.entry 'trainwiz' (FastChat's train_mem.py pads "
                    "every sample): set launch.entry: trainwiz or packing: false"
                )
            )
        if self.launch.device == "cpu" and (self.training.bf16 or self.training.tf32):
            raise ValueError(_("launch.device 'cpu' cannot use bf16/tf32: set them to false"))
        if self.launch.device == "cpu" and self.training.method == "qlora":
            raise ValueError(
                _(
                    "training.method 'qlora' needs a CUDA GPU (bitsandbytes 4-bit weights): use "
                    "method: lora on launch.device 'cpu', or launch.device: cuda"
                )
            )
        if self.launch.device == "cpu" and self.training.zero is not None:
            raise ValueError(
                _(
                    "training.zero (DeepSpeed ZeRO) needs CUDA GPUs: remove zero on "
                    "launch.device 'cpu', or launch.device: cuda"
                )
            )
        return self

    def model_path_for_trainer(self) -> str:
        """The model path as the training process sees it (inside the container if docker)."""
        if self.training.model_name_or_path:
            return self.training.model_name_or_path
        if self.launch.runner == "docker":
            return map_host_path(self.model.dir, self.container.volumes)
        return self.model.dir
