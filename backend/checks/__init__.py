"""System checks: what the machine has, what this preset needs, and the exact fix for each gap."""

from backend.checks.context import CheckContext, Needs, Targets, build_context, targets_for
from backend.checks.model import STEPS, CheckResult, Status, Step, blocked_steps, worst
from backend.checks.runner import CHECKS, CheckSpec, check_ids, run_checks

__all__ = [
    "CHECKS",
    "STEPS",
    "CheckContext",
    "CheckResult",
    "CheckSpec",
    "Needs",
    "Status",
    "Step",
    "Targets",
    "blocked_steps",
    "build_context",
    "check_ids",
    "run_checks",
    "targets_for",
    "worst",
]
