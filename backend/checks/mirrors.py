"""Which mirror each download of the chain goes through, and what the probes saw.

With ``mirrors: auto|cn|custom`` the check probes the candidates (or, for a preset already
resolved by `trainwiz check`/`plan`/a launch, reads what was chosen) and shows the choice with
its timing per kind. It also reports the Docker daemon's own ``registry-mirrors``, which make
image names on a mirror registry unnecessary.
"""

from __future__ import annotations

from backend.checks.context import CheckContext
from backend.checks.docker_checks import docker_facts
from backend.checks.model import CheckResult, Status, finding
from backend.mirrors import apply_mirrors, mirrors_record
from backend.mirrors.messages import text

_LIST_KEY = {"pypi": "pypi", "hub": "hub", "registry": "registry", "modelscope": "modelscope"}


def _daemon_mirrors(ctx: CheckContext) -> list[str] | None:
    facts = docker_facts(ctx)
    if not facts.get("reachable"):
        return None
    registry = (facts.get("info") or {}).get("RegistryConfig") or {}
    return [str(m) for m in registry.get("Mirrors") or []]


def check_mirrors(ctx: CheckContext) -> CheckResult:
    why = text("check.why")
    daemon = _daemon_mirrors(ctx)
    daemon_line = (
        text("check.daemon", mirrors=", ".join(daemon))
        if daemon
        else text("check.daemon_none")
        if daemon is not None
        else ""
    )
    data: dict[str, object] = {"registry_mirrors": daemon}
    preset = ctx.preset
    if preset is None or preset.mirrors.profile == "none":
        summary = (
            text("check.off") if preset is not None else daemon_line or text("check.no_preset")
        )
        status: Status = "ok" if daemon else "skip"
        detail = daemon_line if preset is not None else ""
        return finding(status, summary, detail=detail, why=why, data=data)
    record = mirrors_record(apply_mirrors(preset))
    if record is None:  # nothing the preset needs goes through a mirror
        return finding("skip", text("check.off"), detail=daemon_line, why=why, data=data)
    data.update(record.to_dict())
    parts = [f"{c.kind} → {c.chosen}" for c in record.choices]
    summary = text("check.summary", profile=record.profile, choices="; ".join(parts))
    detail_lines = record.lines()
    detail_lines += [
        f"  {r.kind} {r.url}: "
        + ("ok" if r.ok else r.error)
        + (f" ({r.latency_ms:.0f} ms)" if r.latency_ms is not None else "")
        for r in record.probes.results
    ]
    if daemon_line:
        detail_lines.append(daemon_line)
    unanswered = [
        c
        for c in record.choices
        if c.answered == 0 and any(r.kind == c.kind for r in record.probes.results)
    ]
    fix = "\n".join(
        text("check.fix_none_answered", kind=text(f"kind.{c.kind}"), key=_LIST_KEY[c.kind])
        for c in unanswered
    )
    return finding(
        "warn" if unanswered else "ok",
        summary,
        detail="\n".join(detail_lines),
        why=why,
        fix=fix,
        data=data,
    )
