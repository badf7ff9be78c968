"""The explicit yes that dangerous container options need before ``launch`` and ``replay``.

The options themselves are found by the backend (``backend.preset.safety.container_risks``);
this only asks. Without a terminal there is nobody to ask, so a missing ``--yes`` is bad input
(exit 2) naming the fields, never a silent start.
"""

from __future__ import annotations

import sys

from backend.errors import BadInput
from backend.i18n import _
from backend.preset.safety import container_risks, risk_summary
from backend.preset.schema import Preset


def confirm_risks(preset: Preset, yes: bool, *, ask: bool = True) -> None:
    """Return when the user accepted every risk (or there is none); raise BadInput otherwise.
    ``ask=False`` (the MCP server: its terminal, if any, is not the agent's user) never asks:
    without ``yes`` the refusal is the same as a script's."""
    risks = container_risks(preset)
    if not risks:
        return
    for risk in risks:
        print(_("trainwiz: warning: {line}").format(line=risk.line()), file=sys.stderr)
    if yes:
        print(_("trainwiz: --yes given: going ahead with these options"), file=sys.stderr)
        return
    if ask and sys.stdin.isatty():
        answer = input(
            _("preset {name} asks for the options above; run it? [y/N] ").format(name=preset.name)
        )
        if answer.strip().lower() in ("y", "yes"):
            return
        raise BadInput(
            _("not confirmed: {risk_summary} (nothing was started)").format(
                risk_summary=risk_summary(risks)
            )
        )
    raise BadInput(
        _(
            "preset {name} sets {risk_summary}, which give the run power over this host: "
            "pass --yes to accept them, or remove them from the preset (nothing was started)"
        ).format(name=preset.name, risk_summary=risk_summary(risks))
    )
