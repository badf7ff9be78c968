"""Tune's filters on predicted candidates before ranking: selective recompute only where it is
needed, regional compile only once measured on the GPU kind, and the one line for candidates
over the compile budget. Apart from tune.py so each stays small; tune.py decides the order."""

from __future__ import annotations

from typing import Any

from backend.planner.estimate import Estimate


def selective_where_needed(estimates: list[Estimate]) -> list[Estimate]:
    """Selective recompute only where the same configuration without recompute does not fit
    (comfortably): elsewhere it only adds a recompute pass."""
    roomy = {
        e.settings for e in estimates if not e.settings.checkpointing and e.memory.fits
        and not e.memory.tight
    }  # fmt: skip
    return [
        e for e in estimates
        if not e.settings.recompute_layers or e.settings.with_(recompute_layers=0) not in roomy
    ]  # fmt: skip


def measured_compile_only(
    estimates: list[Estimate], calibration: list[dict[str, Any]], gpu_name: str
) -> tuple[list[Estimate], str]:
    """Regional compile is priced by an estimate, not a fit, and compile with flex + Liger has
    crashed before (whole-model torch.compile, torch 2.11): a prediction alone picks it only
    once a probe measured a compiled row on this GPU kind. Until then it is left to the probe
    (``probe_pool``), with a note saying so."""
    compiled = [e for e in estimates if e.settings.compile_layers]
    if not compiled or any((r.get("settings") or {}).get("compile_layers") for r in calibration):
        return estimates, ""
    note = (
        f"{len(compiled)} candidate(s) with regional torch.compile (training.compile_layers): "
        f"not measured on {gpu_name} yet, so not picked on a prediction; a probe on such a GPU "
        "measures them (trainwiz tune there)"
    )
    return [e for e in estimates if not e.settings.compile_layers], note


def dropped_note(dropped: list[tuple[Estimate, str]], budget_s: float) -> str:
    """One line for the candidates over the compile budget: which rows, which compile."""
    rows = sorted({e.settings.row for e, _why in dropped})
    compiled = sum(1 for e, _why in dropped if e.settings.compile_layers or e.settings.compile)
    what = f"; {compiled} of them with torch.compile" if compiled else ""
    return (
        f"{len(dropped)} candidate(s) dropped: predicted compile over the {budget_s:.0f} s "
        f"budget (rows of {', '.join(map(str, rows))}{what}; --compile-budget to allow)"
    )
