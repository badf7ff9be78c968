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
from backend.i18n import _
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
        raise BadInput(
            _("{where}: a mapping of {items} to lists of URLs").format(
                where=where, items=", ".join(KINDS)
            )
        )
    out: dict[Kind, list[str]] = {}
    for kind in KINDS:
        urls = data.get(kind) or []
        if not isinstance(urls, list) or not all(isinstance(u, str) for u in urls):
            raise BadInput(_("{where}.{kind}: a list of URLs").format(where=where, kind=kind))
        out[kind] = list(urls)
    unknown = set(data) - set(KINDS)
    if unknown:
        raise BadInput(
            _("{where}: unknown key(s) {items}").format(
                where=where, items=", ".join(sorted(unknown))
            )
        )
    return out


def load_candidate_lists(path: Path | None = None) -> CandidateLists:
    """The lists from ``path``, else $TRAINWIZ_MIRRORS_FILE, else the shipped candidates.yaml."""
    chosen = path or Path(os.environ.get(ENV_FILE) or DEFAULT_FILE)
    try:
        data = yaml.safe_load(chosen.read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise BadInput(
            _("{chosen}: cannot read the mirror list ({strerror}): fix {ENV_FILE}").format(
                chosen=chosen, strerror=exc.strerror, ENV_FILE=ENV_FILE
            )
        ) from exc
    except yaml.YAMLError as exc:
        raise BadInput(
            _("{chosen}: not valid YAML ({exc}): fix the mirror list").format(
                chosen=chosen, exc=exc
            )
        ) from exc
    if not isinstance(data, dict):
        raise BadInput(
            _("{chosen}: a mapping with probe_package, official and cn").format(chosen=chosen)
        )
    return CandidateLists(
        probe_package=str(data.get("probe_package") or "pip"),
        official=_lists(data.get("official"), f"{chosen}: official"),
        cn=_lists(data.get("cn"), f"{chosen}: cn"),
    )
