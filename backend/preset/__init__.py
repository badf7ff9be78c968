"""Presets: the schema and its YAML loader/saver."""

from backend.preset.loader import (
    list_shipped,
    load_preset,
    parse_preset_text,
    preset_to_yaml,
    resolve_preset_path,
    save_preset,
)
from backend.preset.schema import (
    ContainerConfig,
    EnvironmentConfig,
    LaunchConfig,
    ModelSource,
    Preset,
    TinyModelSpec,
    TrainingArgs,
    Ulimit,
    Volume,
    map_container_path,
    map_host_path,
)

__all__ = [
    "ContainerConfig",
    "EnvironmentConfig",
    "LaunchConfig",
    "ModelSource",
    "Preset",
    "TinyModelSpec",
    "TrainingArgs",
    "Ulimit",
    "Volume",
    "list_shipped",
    "load_preset",
    "map_container_path",
    "map_host_path",
    "parse_preset_text",
    "preset_to_yaml",
    "resolve_preset_path",
    "save_preset",
]
