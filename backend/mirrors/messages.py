"""Every user-facing sentence of the mirror chain, in one place.

Format strings keyed by id, marked ``N_`` for the catalog and translated by ``text()`` when
shown (docs/i18n.md), so the logic that uses them never holds a sentence of its own.
"""

from __future__ import annotations

from backend.i18n import N_, _

MESSAGES: dict[str, str] = {
    "kind.pypi": N_("PyPI index"),
    "kind.hub": N_("Hugging Face Hub"),
    "kind.registry": N_("image registry"),
    "kind.modelscope": N_("ModelScope"),
    "reason.fastest": N_("fastest of {answered} answering: {latency_ms:.0f} ms"),
    "reason.none_answered_keep": N_("no candidate answered: keeping {url}"),
    "reason.none_answered_first": N_("no candidate answered: using the first listed, {url}"),
    "reason.not_probed": N_("not probed: using {url}"),
    "reason.daemon_mirrors": N_("the Docker daemon pulls through its registry-mirrors ({mirrors})"),
    "reason.image_local": N_("{image} is already local: nothing to pull"),
    "reason.not_docker_hub": N_("{image} is not a Docker Hub image: left as written"),
    "probe.timeout": N_("no answer within {seconds:.1f} s"),
    "probe.budget": N_("still waiting when the {seconds:.1f} s probe budget ran out"),
    "probe.settled": N_("not waited for: a faster candidate had answered correctly"),
    "probe.http": N_("HTTP {status}"),
    "probe.bad_page": N_("HTTP {status} but not a simple index page listing {package}"),
    "probe.bad_hub": N_("HTTP {status} but not a Hub API answer"),
    "probe.bad_registry": N_("HTTP {status} without the Registry v2 API header"),
    "probe.bad_modelscope": N_("HTTP {status} but not a ModelScope API answer"),
    "check.off": N_("profile none: the preset's own URLs are used"),
    "check.no_preset": N_("no preset: no mirror to choose"),
    "check.summary": N_("profile {profile}: {choices}"),
    "check.why": N_("Every download of the chain (pip, the model, the images) goes through these."),
    "check.fix_none_answered": N_(
        "no {kind} candidate answered: check the network or proxy "
        "(HTTPS_PROXY), or list a reachable one under mirrors.custom.{key}"
    ),
    "check.daemon": N_("daemon registry-mirrors: {mirrors}"),
    "check.daemon_none": N_("daemon registry-mirrors: none"),
    "plan.header": N_("mirrors: {profile} ({count} candidates probed in {elapsed_ms:.0f} ms)"),
    "plan.line": N_("  {kind}: {chosen} — {reason}"),
    "plan.pypi": N_("  pip:   -i {url}   ({reason})"),
    "plan.hub": N_("  model: HF_ENDPOINT={url}   ({reason})"),
    "plan.modelscope": N_("  model: MODELSCOPE_ENDPOINT={url}   ({reason})"),
    "plan.registry": N_("  image: {image}   ({reason})"),
}


def text(message_id: str, /, **values: object) -> str:
    """The message ``message_id`` filled with ``values`` in the current language."""
    return _(MESSAGES[message_id]).format(**values)
