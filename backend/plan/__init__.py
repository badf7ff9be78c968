"""The command plan: a preset turned into the exact argv of every step."""

from backend.plan.commands import ENTRY_FILE, Plan, PlanStep, build_plan
from backend.plan.hf_flags import format_value, training_flags, version_tuple

__all__ = [
    "ENTRY_FILE",
    "Plan",
    "PlanStep",
    "build_plan",
    "format_value",
    "training_flags",
    "version_tuple",
]
