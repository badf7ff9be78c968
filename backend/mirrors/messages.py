"""Every user-facing sentence of the mirror chain, in one place.

Plain format strings keyed by id, so the i18n work (issue 20) can wrap ``text()`` in gettext
and extract these literals without touching the logic that uses them.
"""

from __future__ import annotations

MESSAGES: dict[str, str] = {
    "kind.pypi": "PyPI index",
    "kind.hub": "Hugging Face Hub",
    "kind.registry": "image registry",
    "kind.modelscope": "ModelScope",
    "reason.fastest": "fastest of {answered} answering: {latency_ms:.0f} ms",
    "reason.none_answered_keep": "no candidate answered: keeping {url}",
    "reason.none_answered_first": "no candidate answered: using the first listed, {url}",
    "reason.not_probed": "not probed: using {url}",
    "reason.daemon_mirrors": "the Docker daemon pulls through its registry-mirrors ({mirrors})",
    "reason.image_local": "{image} is already local: nothing to pull",
    "reason.not_docker_hub": "{image} is not a Docker Hub image: left as written",
    "probe.timeout": "no answer within {seconds:.1f} s",
    "probe.budget": "still waiting when the {seconds:.1f} s probe budget ran out",
    "probe.settled": "not waited for: a faster candidate had answered correctly",
    "probe.http": "HTTP {status}",
    "probe.bad_page": "HTTP {status} but not a simple index page listing {package}",
    "probe.bad_hub": "HTTP {status} but not a Hub API answer",
    "probe.bad_registry": "HTTP {status} without the Registry v2 API header",
    "probe.bad_modelscope": "HTTP {status} but not a ModelScope API answer",
    "check.off": "profile none: the preset's own URLs are used",
    "check.no_preset": "no preset: no mirror to choose",
    "check.summary": "profile {profile}: {choices}",
    "check.why": "Every download of the chain (pip, the model, the images) goes through these.",
    "check.fix_none_answered": "no {kind} candidate answered: check the network or proxy "
    "(HTTPS_PROXY), or list a reachable one under mirrors.custom.{key}",
    "check.daemon": "daemon registry-mirrors: {mirrors}",
    "check.daemon_none": "daemon registry-mirrors: none",
    "plan.header": "mirrors: {profile} ({count} candidates probed in {elapsed_ms:.0f} ms)",
    "plan.line": "  {kind}: {chosen} — {reason}",
    "plan.pypi": "  pip:   -i {url}   ({reason})",
    "plan.hub": "  model: HF_ENDPOINT={url}   ({reason})",
    "plan.modelscope": "  model: MODELSCOPE_ENDPOINT={url}   ({reason})",
    "plan.registry": "  image: {image}   ({reason})",
}


def text(message_id: str, /, **values: object) -> str:
    """The message ``message_id`` filled with ``values`` (where a translation will hook in)."""
    return MESSAGES[message_id].format(**values)
