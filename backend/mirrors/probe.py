"""Probe mirror candidates: one short GET each, all at once, the whole set inside a budget.

A candidate counts only when it answers *correctly*, not merely at all: a PyPI index must serve
a simple page listing a known package, a Hub must answer its model API with JSON, a registry
must answer ``/v2/`` with the Registry v2 header. A black-holed mirror (the connection opens and
nothing comes back) costs one ``timeout_s``; the set never takes longer than ``budget_s``
because each probe runs in a daemon thread that is left behind when the budget runs out (a hung
DNS lookup can outlive any socket timeout, see backend/checks/runner.py).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from backend.mirrors.messages import text

Kind = Literal["pypi", "hub", "registry", "modelscope"]
KINDS: tuple[Kind, ...] = ("pypi", "hub", "registry", "modelscope")
DOCKER_HUB = "docker.io"
_MAX_BODY = 256 * 1024  # enough to see a simple page's first links; never a whole big page
_CACHE_TTL_S = 30.0  # one command (check, plan, launch) probes each URL once


@dataclass(frozen=True)
class Candidate:
    """One mirror to try: ``url`` as the preset/candidate list writes it, ``probe_url`` asked."""

    kind: Kind
    url: str
    probe_url: str


@dataclass
class ProbeResult:
    kind: Kind
    url: str
    probe_url: str
    ok: bool
    status: int | None = None
    latency_ms: float | None = None
    error: str = ""


@dataclass
class ProbeReport:
    """What one probing round saw; ``results`` in candidate order."""

    results: list[ProbeResult] = field(default_factory=list)
    elapsed_ms: float = 0.0
    timeout_s: float = 0.0
    budget_s: float = 0.0
    probed_at: float = 0.0
    registry_mirrors: list[str] | None = None  # the daemon's, None when no daemon answered
    image_local: bool | None = None

    def for_kind(self, kind: Kind) -> list[ProbeResult]:
        return [r for r in self.results if r.kind == kind]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def registry_base(url: str) -> str:
    """The registry's API root for a candidate: ``docker.io`` is Docker Hub's registry-1."""
    if url == DOCKER_HUB:
        return "https://registry-1.docker.io"
    if url.startswith(("http://", "https://")):
        return url.rstrip("/")
    return "https://" + url.rstrip("/")


def candidate(kind: Kind, url: str, *, package: str = "pip", repo: str | None = None) -> Candidate:
    """The probe request for ``url``: what a real client would ask first."""
    base = url.rstrip("/")
    if kind == "pypi":
        probe = f"{base}/{package}/"
    elif kind == "hub":
        probe = f"{base}/api/models/{repo}" if repo else f"{base}/api/models?limit=1"
    elif kind == "registry":
        probe = registry_base(url) + "/v2/"
    else:
        probe = f"{base}/api/v1/models/{repo}" if repo else f"{base}/api/v1/models"
    return Candidate(kind=kind, url=url, probe_url=probe)


def _get(url: str, headers: dict[str, str], timeout_s: float) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, at most _MAX_BODY bytes), all within ``timeout_s`` in total."""
    deadline = time.monotonic() + timeout_s
    request = urllib.request.Request(url, headers=headers)
    try:
        response = urllib.request.urlopen(request, timeout=timeout_s)
    except urllib.error.HTTPError as exc:
        response = exc
    with response:
        status = int(response.status if hasattr(response, "status") else response.code)
        got = {k.lower(): v for k, v in response.headers.items()}
        body = b""
        while len(body) < _MAX_BODY:
            if time.monotonic() > deadline:
                raise TimeoutError(text("probe.timeout", seconds=timeout_s))
            chunk = response.read(16384)
            if not chunk:
                break
            body += chunk
    if time.monotonic() > deadline:
        raise TimeoutError(text("probe.timeout", seconds=timeout_s))
    return status, got, body


def _judge(kind: Kind, status: int, headers: dict[str, str], body: bytes, package: str) -> str:
    """'' when the answer is what a working mirror of ``kind`` says, else why not."""
    if kind == "registry":
        api = headers.get("docker-distribution-api-version", "")
        if status in (200, 401) and api.startswith("registry/2"):
            return ""
        return text("probe.bad_registry", status=status)
    if status != 200:
        return text("probe.http", status=status)
    if kind == "pypi":
        page = body.decode("utf-8", "replace").lower()
        listed = f">{package}-" in page or f"/{package}-" in page or f'"{package}-' in page
        if listed and ("<a " in page or '"files"' in page):
            return ""
        return text("probe.bad_page", status=status, package=package)
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if kind == "hub":
        good = (isinstance(data, dict) and ("id" in data or "modelId" in data)) or isinstance(
            data, list
        )
        return "" if good else text("probe.bad_hub", status=status)
    good = isinstance(data, dict) and ("Data" in data or "Code" in data)
    return "" if good else text("probe.bad_modelscope", status=status)


_ACCEPT = {
    "pypi": "text/html",
    "hub": "application/json",
    "registry": "application/json",
    "modelscope": "application/json",
}
_cache: dict[tuple[str, str], tuple[float, ProbeResult]] = {}
_cache_lock = threading.Lock()


def probe_one(cand: Candidate, timeout_s: float, package: str = "pip") -> ProbeResult:
    """Ask one candidate; never raises (a failure is a result with ``ok`` False)."""
    key = (cand.kind, cand.probe_url)
    with _cache_lock:
        hit = _cache.get(key)
    if hit is not None and time.monotonic() - hit[0] < _CACHE_TTL_S:
        return ProbeResult(**{**asdict(hit[1]), "url": cand.url})
    started = time.monotonic()
    result = ProbeResult(kind=cand.kind, url=cand.url, probe_url=cand.probe_url, ok=False)
    headers = {"Accept": _ACCEPT[cand.kind], "User-Agent": "trainwiz-mirror-probe"}
    try:
        status, got, body = _get(cand.probe_url, headers, timeout_s)
        result.status = status
        result.error = _judge(cand.kind, status, got, body, package)
        result.ok = not result.error
    except TimeoutError:
        result.error = text("probe.timeout", seconds=timeout_s)
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, TimeoutError):
            result.error = text("probe.timeout", seconds=timeout_s)
        else:
            result.error = str(reason) or type(reason).__name__
    except Exception as exc:  # e.g. http.client.InvalidURL: a result, never a thread's traceback
        result.error = str(exc) or type(exc).__name__
    result.latency_ms = round((time.monotonic() - started) * 1000, 1)
    with _cache_lock:
        _cache[key] = (time.monotonic(), result)
    return result


def clear_cache() -> None:
    with _cache_lock:
        _cache.clear()


def probe_all(
    candidates: list[Candidate],
    timeout_s: float,
    budget_s: float,
    package: str = "pip",
    settle_s: float | None = None,
) -> ProbeReport:
    """Probe every candidate concurrently; returns within ``budget_s`` (plus a few ms).

    With ``settle_s``, the round also ends ``settle_s`` after every kind has a correct answer:
    the first correct answer of a kind is its fastest, so waiting out a black-holed official
    endpoint would only delay the choice. Candidates still running are recorded as cut short.
    """
    started = time.monotonic()
    slots: list[ProbeResult | None] = [None] * len(candidates)
    landed = threading.Condition()
    kinds = {c.kind for c in candidates}

    def work(index: int, cand: Candidate) -> None:
        result = probe_one(cand, min(timeout_s, budget_s), package)
        if budget_s < timeout_s and result.error == text("probe.timeout", seconds=budget_s):
            # Its own timeout was the budget's: the same cut, said the same way whichever of
            # the two clocks (this thread's socket, the round's deadline) noticed it first.
            result.error = text("probe.budget", seconds=budget_s)
        with landed:
            slots[index] = result
            landed.notify_all()

    def settled_at() -> float | None:
        answered = {s.kind for s in slots if s is not None and s.ok}
        return time.monotonic() if answered >= kinds else None

    for i, cand in enumerate(candidates):
        threading.Thread(target=work, args=(i, cand), name=f"mirror-probe-{i}", daemon=True).start()
    deadline = started + budget_s
    cut_reason = text("probe.budget", seconds=budget_s)
    with landed:
        while any(s is None for s in slots):
            now = time.monotonic()
            if now >= deadline:
                break
            if settle_s is not None and settled_at() is not None:
                deadline = min(deadline, now + settle_s)
                cut_reason = text("probe.settled")
                settle_s = None  # the grace starts once
                continue
            landed.wait(deadline - now)
        results = list(slots)
    out: list[ProbeResult] = []
    for cand, slot in zip(candidates, results):
        if slot is None:
            slot = ProbeResult(
                kind=cand.kind,
                url=cand.url,
                probe_url=cand.probe_url,
                ok=False,
                error=cut_reason,
            )
        out.append(slot)
    return ProbeReport(
        results=out,
        elapsed_ms=round((time.monotonic() - started) * 1000, 1),
        timeout_s=timeout_s,
        budget_s=budget_s,
        probed_at=time.time(),
    )
