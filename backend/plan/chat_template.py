"""The chat template a plan trains with, said in the plan's train step (template_choice decides).

The entry decides again from the model it loads, with the same function, so what the plan says
is what trains; the run's ``start`` line records the entry's choice.
"""

from __future__ import annotations

from backend.entry.template_choice import TemplateChoice, TemplateError, decide
from backend.errors import BadInput
from backend.i18n import _
from backend.model.placeholders import resolve_placeholders
from backend.preset.schema import Preset


def template_choice(preset: Preset) -> TemplateChoice:
    """The choice for this preset's model directory; BadInput names the field and the fix."""
    setting = preset.training.chat_template
    if preset.launch.entry != "trainwiz":
        if setting not in ("auto", "vicuna"):
            raise BadInput(
                _(
                    "training.chat_template: {setting} needs launch.entry: trainwiz (FastChat's "
                    "train_mem.py trains only the vicuna template); set launch.entry: trainwiz "
                    "or chat_template: auto"
                ).format(setting=setting)
            )
        return TemplateChoice(setting, "vicuna", _("FastChat's train.py: the vicuna template"))
    try:
        model_dir: str | None = resolve_placeholders(str(preset.model.dir), None)
    except BadInput:  # @run has no meaning before a launch: the entry decides
        model_dir = None
    try:
        return decide(setting, model_dir)
    except TemplateError as exc:
        raise BadInput(f"training.{exc}") from None


def template_note(preset: Preset) -> str:
    choice = template_choice(preset)
    return _("chat template: {template} ({reason})").format(
        template=choice.template, reason=choice.reason
    )
