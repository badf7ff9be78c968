"""Mirror profiles: probe PyPI indexes, Hub endpoints and registries; write the fastest in."""

from backend.mirrors.apply import apply_mirrors, probe_preset
from backend.mirrors.candidates import CandidateLists, load_candidate_lists
from backend.mirrors.probe import Candidate, ProbeReport, ProbeResult, probe_all
from backend.mirrors.resolve import (
    MirrorChoice,
    MirrorsRecord,
    candidate_urls,
    mirror_choices,
    mirror_image,
    mirrors_record,
    plan_lines,
    resolve_mirrors,
)

__all__ = [
    "Candidate",
    "CandidateLists",
    "MirrorChoice",
    "MirrorsRecord",
    "ProbeReport",
    "ProbeResult",
    "apply_mirrors",
    "candidate_urls",
    "load_candidate_lists",
    "mirror_choices",
    "mirror_image",
    "mirrors_record",
    "plan_lines",
    "probe_all",
    "probe_preset",
    "resolve_mirrors",
]
