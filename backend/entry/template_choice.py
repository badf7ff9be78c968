"""Which chat template a run trains with: one decision, made the same way by the plan and the entry.

Standard library only: the wizard imports it to print the choice in the form, the plan and
``data check``, and the launcher copies it next to ``train_entry.py``, which decides again from
the model directory it actually loads (the two agree because they are this one function).

``training.chat_template``:

- ``auto``: a tokenizer that carries a chat template (``tokenizer_config.json`` ``chat_template``
  or ``chat_template.jinja``) trains with it; a Llama/Vicuna model without one keeps FastChat's
  vicuna path exactly as FastChat trains it; another family without one gets FastChat's own
  template for that family when FastChat has one, else vicuna (said so).
- ``vicuna``: FastChat's ``train.py`` data code, unchanged.
- ``model``: the tokenizer's own template (an error when the model has none).
- any other name: that FastChat conversation template (``fastchat.conversation``).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

SETTINGS = ("auto", "vicuna", "model")

# fastchat.conversation's registry in fschat 0.2.36 (tests compare it with the installed one).
FASTCHAT_TEMPLATES = frozenset(
    """
    Nous-Hermes-2-Mixtral-8x7B-DPO OpenHermes-2.5-Mistral-7B ReaLM-7b-v1 Robin TinyLlama
    Yi-34b-chat airoboros_v1 airoboros_v2 airoboros_v3 alpaca aquila aquila-chat aquila-legacy
    aquila-v1 baichuan-chat baichuan2-chat baize bard billa catppt chatglm chatglm2 chatglm3
    chatgpt chinese-alpaca2 claude codegeex cutegpt deepseek-chat deepseek-coder dolly_v2
    dolphin-2.2.1-mistral-7b falcon falcon-chat gemini h2ogpt internlm-chat koala_v1
    lemur-70b-chat llama-2 llama2-chinese manticore metamath metharme mistral
    mistral-7b-openorca mpt-30b-chat mpt-30b-instruct mpt-7b-chat oasst_llama oasst_pythia
    one_shot open-orca openbuddy openchat_3.5 orca-2 phind phoenix polyglot_changgpt pplxai
    qwen-7b-chat raw redpajama-incite rwkv snoozy solar stable-vicuna stablelm starchat steerlm
    tenyxchat tigerbot tulu vicuna_v1.1 vigogne_chat_v2 vigogne_chat_v3 vigogne_instruct xdan-v1
    xgen yuan yuan2 zephyr zero_shot
    """.split()  # noqa: SIM905 - a list literal of 83 names would read worse
)

# A model without a chat template, by config.json model_type: FastChat's template for the family.
FASTCHAT_FOR_MODEL_TYPE = {
    "mistral": "mistral",
    "mixtral": "mistral",
    "qwen": "qwen-7b-chat",
    "qwen2": "qwen-7b-chat",
    "qwen2_moe": "qwen-7b-chat",
    "qwen3": "qwen-7b-chat",
    "baichuan": "baichuan2-chat",
    "chatglm": "chatglm3",
    "internlm": "internlm-chat",
    "yi": "Yi-34b-chat",
    "falcon": "falcon",
}
VICUNA_MODEL_TYPES = ("llama",)


class TemplateError(ValueError):
    """A setting that cannot be honoured for this model (the message names the fix)."""


@dataclass(frozen=True)
class TemplateChoice:
    setting: str  # what the preset asked: auto, vicuna, model, or a FastChat name
    template: str  # what trains: "vicuna", "model", or a FastChat template name
    reason: str  # one sentence a person reads in the form, the plan and the run record

    @property
    def is_vicuna(self) -> bool:
        """FastChat's own train.py data path (the seed's behaviour, byte for byte)."""
        return self.template == "vicuna"

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def valid_setting(setting: str) -> bool:
    return setting in SETTINGS or setting in FASTCHAT_TEMPLATES


def setting_error(setting: str) -> str:
    return (
        f"chat_template {setting!r} is not auto, vicuna, model or a FastChat template name "
        f"(e.g. {', '.join(sorted(FASTCHAT_TEMPLATES & {'llama-2', 'mistral', 'qwen-7b-chat'}))})"
    )


def _read_json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def model_chat_template(model_dir: str) -> str | None:
    """The tokenizer's own Jinja chat template, as transformers would load it, or None."""
    jinja = os.path.join(model_dir, "chat_template.jinja")
    try:
        with open(jinja, encoding="utf-8") as handle:
            text = handle.read()
        if text.strip():
            return text
    except OSError:
        pass
    found = _read_json(os.path.join(model_dir, "tokenizer_config.json")).get("chat_template")
    if isinstance(found, list):  # named templates: transformers uses "default"
        named = {t.get("name"): t.get("template") for t in found if isinstance(t, dict)}
        found = named.get("default")
    return found if isinstance(found, str) and found.strip() else None


def model_type(model_dir: str) -> str | None:
    found = _read_json(os.path.join(model_dir, "config.json")).get("model_type")
    return found if isinstance(found, str) else None


def decide(setting: str, model_dir: str | None) -> TemplateChoice:
    """The template a run with ``setting`` trains with on the model in ``model_dir``.

    ``model_dir`` None (or not downloaded yet): ``auto`` cannot look, so the choice says the
    entry decides when the model is there. Raises TemplateError for a setting this model cannot
    honour.
    """
    present = bool(model_dir) and os.path.isfile(os.path.join(str(model_dir), "config.json"))
    own = model_chat_template(str(model_dir)) if present else None
    kind = model_type(str(model_dir)) if present else None
    sentencepiece = present and os.path.isfile(os.path.join(str(model_dir), "tokenizer.model"))
    return decide_from(setting, own, kind, present, str(model_dir), sentencepiece)


def decide_from(
    setting: str,
    own: str | None,
    kind: str | None,
    present: bool,
    where: str = "the model",
    sentencepiece: bool = True,
) -> TemplateChoice:
    """``decide`` on facts already read: the tokenizer's template, config.json's model_type,
    whether the tokenizer is Llama-1/2's sentencepiece (``tokenizer.model``).

    FastChat's vicuna path masks with Llama-1/2 sentencepiece arithmetic: a ``llama`` model
    whose tokenizer is not sentencepiece (a Llama-3 base) gets the same vicuna_v1.1 text
    through trainwiz's exact masks instead."""
    if not valid_setting(setting):
        raise TemplateError(setting_error(setting))
    if setting == "vicuna":
        return TemplateChoice(
            setting, "vicuna", "chosen in the preset: FastChat's vicuna data path"
        )
    if setting not in SETTINGS:
        return TemplateChoice(setting, setting, f"chosen in the preset: FastChat's {setting!r}")
    if setting == "model":
        if present and own is None:
            raise TemplateError(
                f"chat_template model: {where} has no chat template (neither "
                "tokenizer_config.json chat_template nor chat_template.jinja); use auto or a "
                "FastChat template name"
            )
        return TemplateChoice(setting, "model", "chosen in the preset: the tokenizer's own")
    if not present:
        return TemplateChoice(
            setting, "auto", "auto: the model is not here yet; the entry decides from its tokenizer"
        )
    if own is not None:
        return TemplateChoice(setting, "model", "auto: the tokenizer carries a chat template")
    kind = kind or "unknown"
    if kind in VICUNA_MODEL_TYPES and sentencepiece:
        return TemplateChoice(
            setting,
            "vicuna",
            "auto: a Llama/Vicuna model without a chat template: FastChat's vicuna",
        )
    if kind in VICUNA_MODEL_TYPES:
        return TemplateChoice(
            setting, "vicuna_v1.1", "auto: a Llama model without a chat template or a "
            "sentencepiece tokenizer: the vicuna_v1.1 text, masked exactly",
        )  # fmt: skip
    fastchat = FASTCHAT_FOR_MODEL_TYPE.get(kind)
    if fastchat:
        return TemplateChoice(
            setting, fastchat, f"auto: no chat template; FastChat's {fastchat!r} for {kind} models"
        )
    return TemplateChoice(
        setting, "vicuna_v1.1", f"auto: no chat template and no FastChat template for {kind}: "
        "the vicuna_v1.1 text, masked exactly",
    )  # fmt: skip
