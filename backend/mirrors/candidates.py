"""The candidate mirrors of each profile: data in candidates.yaml, never hard-coded.

``TRAINWIZ_MIRRORS_FILE`` names another file of the same layout: tests substitute loopback
servers this way, and a site with its own internal mirrors can list them once for every preset.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from backend.errors import BadInput
from backend.mirrors.probe import KINDS, Kind

DEFAULT_FILE = Path(__file__).with_name("candidates.yaml")
ENV_FILE = "TRAINWIZ_MIRRORS_FILE"


@dataclass
class CandidateLists:
    probe_package: str = "pip"
    official: dict[Kind, list[str]] = field(default_factory=dict)
    cn: dict[Kind, list[str]] = field(default_factory=dict)


def _lists(data: object, where: str) -> dict[Kind, list[str]]:
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise BadInput(f"{where}: a mapping of {', '.join(KINDS)} to lists of URLs")
    out: dict[Kind, list[str]] = {}
    for kind in KINDS:
        urls = data.get(kind) or []
        if not isinstance(urls, list) or not all(isinstance(u, str) for u in urls):
            raise BadInput(f"{where}.{kind}: a list of URLs")
        out[kind] = list(urls)
    unknown = set(data) - set(KINDS)
    if unknown:
        raise BadInput(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    return out


def load_candidate_lists(path: Path | None = None) -> CandidateLists:
    """The lists from ``path``, else $TRAINWIZ_MIRRORS_FILE, else the shipped candidates.yaml."""
    chosen = path or Path(os.environ.get(ENV_FILE) or DEFAULT_FILE)
    try:
        data = yaml.safe_load(chosen.read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise BadInput(
            f"{chosen}: cannot read the mirror list ({exc.strerror}): fix {ENV_FILE}"
        ) from exc
    except yaml.YAMLError as exc:
        raise BadInput(f"{chosen}: not valid YAML ({exc}): fix the mirror list") from exc
    if not isinstance(data, dict):
        raise BadInput(f"{chosen}: a mapping with probe_package, official and cn")
    return CandidateLists(
        probe_package=str(data.get("probe_package") or "pip"),
        official=_lists(data.get("official"), f"{chosen}: official"),
        cn=_lists(data.get("cn"), f"{chosen}: cn"),
    )
