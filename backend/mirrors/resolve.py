"""From a preset's ``mirrors`` profile and what the probes saw, the preset the plan renders.

``resolve_mirrors`` is pure: the same preset and probe report always give the same preset, so
``trainwiz plan`` and a launch render exactly the URLs and image names that were chosen, and
tests can feed it any report. ``apply_mirrors`` (apply.py) is the impure glue: probes, daemon.
"""

from __future__ import annotations

import ipaddress
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlparse

from backend.mirrors.candidates import CandidateLists, load_candidate_lists
from backend.mirrors.messages import text
from backend.mirrors.probe import (
    DOCKER_HUB,
    KINDS,
    Candidate,
    Kind,
    ProbeReport,
    ProbeResult,
    candidate,
)
from backend.preset.schema import Preset

# Once every kind has a correct answer, candidates still running get this much longer: a near
# tie is still measured, a black-holed endpoint no longer holds the choice up.
SETTLE_S = 0.25


@dataclass
class MirrorChoice:
    kind: Kind
    chosen: str | None
    reason: str
    candidates: list[str] = field(default_factory=list)
    latency_ms: float | None = None
    answered: int = 0


def _dedup(urls: list[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for url in urls:
        key = url.rstrip("/")
        if key and key not in seen:
            seen.add(key)
            out.append(key)
    return out


def _origin(url: str) -> str | None:
    parsed = urlparse(url)
    return f"{parsed.scheme}://{parsed.netloc}" if parsed.scheme and parsed.netloc else None


def is_docker_hub_image(image: str) -> bool:
    first, sep, _ = image.partition("/")
    return not (sep and ("." in first or ":" in first or first == "localhost"))


def mirror_image(image: str, registry: str) -> str:
    """``pytorch/pytorch:tag`` on ``registry``: ``registry/pytorch/pytorch:tag``."""
    host = registry.split("://", 1)[-1].rstrip("/")
    path = image if "/" in image else f"library/{image}"
    return f"{host}/{path}"


def _own(preset: Preset, kind: Kind) -> str | None:
    """The URL the preset itself names for ``kind`` (always a candidate too)."""
    if kind == "pypi":
        return preset.environment.pip_index_url
    if kind == "modelscope":
        return preset.model.endpoint if preset.model.source == "modelscope" else None
    if kind == "hub":
        if preset.model.endpoint:
            return preset.model.endpoint
        if preset.model.source == "git_lfs" and preset.model.git_url:
            return _origin(preset.model.git_url)
    return None


def _needed(preset: Preset, kind: Kind, lists: CandidateLists) -> bool:
    if kind == "pypi":
        return not (preset.launch.runner == "host" and preset.environment.venv)
    if kind == "hub":
        model = preset.model
        if model.source == "hf":
            return True
        if model.source != "git_lfs" or not model.repo:
            return False
        known = {u.rstrip("/") for u in lists.official.get("hub", []) + lists.cn.get("hub", [])}
        origin = _origin(model.git_url) if model.git_url else None
        return model.git_url is None or origin in known or origin == _own(preset, "hub")
    if kind == "registry":
        return preset.launch.runner == "docker" and is_docker_hub_image(preset.environment.image)
    return preset.model.source == "modelscope"


def candidate_urls(preset: Preset, kind: Kind, lists: CandidateLists) -> list[str]:
    """The URLs tried for ``kind``, in preference order (auto and cn: the preset's own first)."""
    cfg = preset.mirrors
    if cfg.profile == "none" or not _needed(preset, kind, lists):
        return []
    if cfg.profile == "custom":  # exactly the user's lists; an empty list leaves the kind alone
        return _dedup(list(getattr(cfg.custom, kind)) if cfg.custom else [])
    own = _own(preset, kind)
    listed = lists.cn.get(kind, [])
    if cfg.profile == "auto":
        listed = lists.official.get(kind, []) + listed
    return _dedup(([own] if own else []) + listed)


def probe_candidates(preset: Preset, lists: CandidateLists) -> list[Candidate]:
    repo = preset.model.repo
    return [
        candidate(kind, url, package=lists.probe_package, repo=repo)
        for kind in KINDS
        for url in candidate_urls(preset, kind, lists)  # type: ignore[arg-type]
    ]


def mirror_choices(
    preset: Preset, report: ProbeReport, lists: CandidateLists
) -> list[MirrorChoice]:
    """Per kind the preset needs: the fastest candidate that answered correctly, else the first."""
    choices: list[MirrorChoice] = []
    for kind in KINDS:
        urls = candidate_urls(preset, kind, lists)  # type: ignore[arg-type]
        if not urls:
            continue
        image = preset.environment.image
        if kind == "registry" and preset.mirrors.profile != "custom":
            if report.image_local:
                choices.append(
                    MirrorChoice(kind, DOCKER_HUB, text("reason.image_local", image=image), urls)
                )
                continue
            if report.registry_mirrors:
                mirrors = ", ".join(report.registry_mirrors)
                reason = text("reason.daemon_mirrors", mirrors=mirrors)
                choices.append(MirrorChoice(kind, DOCKER_HUB, reason, urls))
                continue
        probed = [r for r in report.for_kind(kind) if r.url.rstrip("/") in urls]  # type: ignore[arg-type]
        answered = sorted((r for r in probed if r.ok), key=lambda r: r.latency_ms or 0.0)
        if answered:
            best = answered[0]
            reason = text(
                "reason.fastest", answered=len(answered), latency_ms=best.latency_ms or 0.0
            )
            choices.append(
                MirrorChoice(
                    kind, best.url.rstrip("/"), reason, urls, best.latency_ms, len(answered)
                )
            )
        elif not probed:
            choices.append(
                MirrorChoice(kind, urls[0], text("reason.not_probed", url=urls[0]), urls)
            )
        else:
            key = (
                "reason.none_answered_keep"
                if preset.mirrors.profile == "auto"
                else ("reason.none_answered_first")
            )
            choices.append(MirrorChoice(kind, urls[0], text(key, url=urls[0]), urls))
    return choices


def _trusted_host(url: str) -> str | None:
    """pip refuses a plain-http index unless trusted; loopback it already trusts."""
    parsed = urlparse(url)
    if parsed.scheme != "http" or not parsed.hostname:
        return None
    if parsed.hostname == "localhost":
        return None
    try:
        if ipaddress.ip_address(parsed.hostname).is_loopback:
            return None
    except ValueError:
        pass
    return parsed.hostname


@dataclass
class MirrorsRecord:
    """mirrors.json: the profile, each choice with its reason, and every probe's timing."""

    profile: str
    choices: list[MirrorChoice]
    probes: ProbeReport

    def to_dict(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "choices": [asdict(c) for c in self.choices],
            "probes": self.probes.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MirrorsRecord:
        probes = dict(data.get("probes") or {})
        results = [ProbeResult(**r) for r in probes.pop("results", [])]
        return cls(
            profile=str(data.get("profile", "")),
            choices=[MirrorChoice(**c) for c in data.get("choices", [])],
            probes=ProbeReport(results=results, **probes),
        )

    def header(self) -> str:
        return text(
            "plan.header",
            profile=self.profile,
            count=len(self.probes.results),
            elapsed_ms=self.probes.elapsed_ms,
        )

    def lines(self) -> list[str]:
        """Human lines for `trainwiz check` and logs: each kind's choice and why."""
        out = [self.header()]
        for c in self.choices:
            out.append(
                text("plan.line", kind=text(f"kind.{c.kind}"), chosen=c.chosen, reason=c.reason)
            )
        return out


def plan_lines(preset: Preset) -> list[str]:
    """For `trainwiz plan`: the exact ``-i``, ``HF_ENDPOINT`` and image name the plan uses."""
    record = mirrors_record(preset)
    if record is None:
        return []
    out = [record.header()]
    for c in record.choices:
        if c.kind == "pypi":
            out.append(text("plan.pypi", url=preset.environment.pip_index_url, reason=c.reason))
        elif c.kind == "hub":
            out.append(text("plan.hub", url=preset.model.endpoint, reason=c.reason))
        elif c.kind == "modelscope":
            out.append(text("plan.modelscope", url=preset.model.endpoint, reason=c.reason))
        elif c.kind == "registry":
            out.append(text("plan.registry", image=preset.environment.image, reason=c.reason))
    return out


def resolve_mirrors(
    preset: Preset, report: ProbeReport, lists: CandidateLists | None = None
) -> Preset:
    """A copy of ``preset`` with the chosen index, Hub endpoint and image names written in,
    and the choice with every probe's timing recorded in ``mirrors.resolved``."""
    if preset.mirrors.profile == "none":
        return preset
    lists = lists or load_candidate_lists()
    picked = mirror_choices(preset, report, lists)
    choices = {c.kind: c for c in picked}
    out = preset.model_copy(deep=True)
    cfg = out.mirrors.model_copy(deep=True)
    cfg.resolved = MirrorsRecord(preset.mirrors.profile, picked, report).to_dict()
    out.mirrors = cfg
    pypi = choices.get("pypi")
    env = out.environment.model_copy(deep=True)
    if pypi and pypi.chosen:
        env.pip_index_url = pypi.chosen
        host = _trusted_host(pypi.chosen)
        if host and host not in env.pip_trusted_hosts:
            env.pip_trusted_hosts = [*env.pip_trusted_hosts, host]
    registry = choices.get("registry")
    if registry and registry.chosen and registry.chosen != DOCKER_HUB:
        env.image = mirror_image(env.image, registry.chosen)
    if pypi or registry:
        out.environment = env
    modelscope = choices.get("modelscope")
    if modelscope and modelscope.chosen:
        source = out.model.model_copy(deep=True)
        source.endpoint = modelscope.chosen  # an assignment: the field counts as set when saved
        out.model = source
    hub = choices.get("hub")
    if hub and hub.chosen:
        model = out.model.model_copy(deep=True)
        old = _own(preset, "hub")
        model.endpoint = hub.chosen
        if model.source == "git_lfs" and model.git_url:
            origin = _origin(model.git_url)
            if origin and origin == old:
                model.git_url = hub.chosen + model.git_url[len(origin) :]
        if not _token_may_go_to(hub.chosen, preset, lists):
            model.token_env = MIRROR_TOKEN_ENV
        out.model = model
    return out


# The Hub token is sent only where the user said, over https (the house rules): to a mirror
# trainwiz picked itself, only a token the user puts in this variable for that purpose.
MIRROR_TOKEN_ENV = "TRAINWIZ_HUB_MIRROR_TOKEN"


def _token_may_go_to(endpoint: str, preset: Preset, lists: CandidateLists) -> bool:
    if not endpoint.startswith("https://"):
        return False
    named = {u.rstrip("/") for u in lists.official.get("hub", [])}
    own = _own(preset, "hub")
    if own:
        named.add(own.rstrip("/"))
    if preset.mirrors.profile == "custom" and preset.mirrors.custom:
        named.update(u.rstrip("/") for u in preset.mirrors.custom.hub)
    return endpoint.rstrip("/") in named


def mirrors_record(preset: Preset) -> MirrorsRecord | None:
    """What the probes chose for a resolved preset (None: not resolved)."""
    data = preset.mirrors.resolved
    return MirrorsRecord.from_dict(data) if data else None
