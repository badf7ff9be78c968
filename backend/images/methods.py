"""What a training method adds to the environment: its own module, so that both the planners
(image, venv) and the environment's readiness read one list without importing each other."""

from __future__ import annotations

from backend.preset.schema import Preset


def method_packages(preset: Preset) -> list[str]:
    """What the training method adds to the environment: deepspeed for ZeRO (or when
    environment.deepspeed asks), bitsandbytes for QLoRA's 4-bit base (peft is always there)."""
    packages = []
    if preset.environment.deepspeed or preset.training.zero is not None:
        packages.append("deepspeed")
    if preset.training.method == "qlora":
        packages.append("bitsandbytes")
    return packages
