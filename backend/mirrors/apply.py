"""The impure half of the mirror chain: ask the candidates and the Docker daemon, then resolve.

``apply_mirrors`` is what the commands and the launch call; ``resolve_mirrors`` (pure, in
resolve.py) does the choosing, so tests can feed it any probe report.
"""

from __future__ import annotations

import threading
from typing import Any

from backend.mirrors.candidates import CandidateLists, load_candidate_lists
from backend.mirrors.probe import ProbeReport, probe_all
from backend.mirrors.resolve import SETTLE_S, probe_candidates, resolve_mirrors
from backend.preset.schema import Preset


def daemon_facts(image: str | None, timeout_s: float) -> tuple[list[str] | None, bool | None]:
    """(the daemon's registry-mirrors, whether ``image`` is local); (None, None) without one."""
    found: dict[str, Any] = {}

    def ask() -> None:
        try:
            import docker

            client = docker.from_env(timeout=max(1, int(timeout_s)))
            info = client.info()
            found["mirrors"] = [
                str(m) for m in (info.get("RegistryConfig") or {}).get("Mirrors") or []
            ]
            if image:
                try:
                    client.images.get(image)
                    found["local"] = True
                except Exception:
                    found["local"] = False
        except Exception:
            return

    thread = threading.Thread(target=ask, name="mirror-daemon", daemon=True)
    thread.start()
    thread.join(timeout_s)
    return found.get("mirrors"), found.get("local")


def probe_preset(preset: Preset, lists: CandidateLists | None = None) -> ProbeReport:
    """Probe every candidate the preset's profile names (and ask the daemon, for images)."""
    lists = lists or load_candidate_lists()
    cfg = preset.mirrors
    cands = probe_candidates(preset, lists)
    daemon: dict[str, Any] = {}
    thread = None
    if any(c.kind == "registry" for c in cands):

        def ask() -> None:
            daemon["facts"] = daemon_facts(preset.environment.image, cfg.probe_budget_s)

        thread = threading.Thread(target=ask, name="mirror-daemon-wait", daemon=True)
        thread.start()
    report = probe_all(
        cands, cfg.probe_timeout_s, cfg.probe_budget_s, lists.probe_package, SETTLE_S
    )
    if thread is not None:
        thread.join(0.2)
        report.registry_mirrors, report.image_local = daemon.get("facts", (None, None))
    return report


def apply_mirrors(preset: Preset, lists: CandidateLists | None = None) -> Preset:
    """Probe and resolve; unchanged when the profile is none or the preset is already resolved."""
    if preset.mirrors.profile == "none" or preset.mirrors.resolved is not None:
        return preset
    lists = lists or load_candidate_lists()
    return resolve_mirrors(preset, probe_preset(preset, lists), lists)
