"""The chat template a run trained with, as ``trainwiz chat`` and ``trainwiz serve`` use it.

The training entry writes the template into the run's metrics ``start`` line
(``"chat_template"``: ``vicuna``, ``model`` or a FastChat conversation template name); a run
made before that field existed trained on FastChat's vicuna path. Chat passes it to the results
worker (``--template``); serve gives FastChat's model worker the matching ``--conv-template``
and, for ``model`` (a Jinja template FastChat cannot render), has the API server
(``serve_api.py``) render each conversation with the run's tokenizer instead.
"""

from __future__ import annotations

from pathlib import Path

from backend.monitor.world import trainer_start
from backend.results.weights import Weights

VICUNA = "vicuna"  # FastChat's train.py data path: its "vicuna" conversation is vicuna_v1.1
VICUNA_CONV = "vicuna_v1.1"
MODEL = "model"  # the tokenizer's own Jinja template (apply_chat_template)
# The API server's switch (serve_api.py): the run's tokenizer folder and template.
TOKENIZER_ENV = "TRAINWIZ_SERVE_TOKENIZER"
TEMPLATE_ENV = "TRAINWIZ_SERVE_TEMPLATE"


def run_template(run_dir: Path) -> str:
    """The template the run trained with (its latest attempt's ``start`` line); ``vicuna`` for a
    run from before the field, or one whose trainer never started."""
    found = (trainer_start(run_dir) or {}).get("chat_template")
    return found.strip() if isinstance(found, str) and found.strip() else VICUNA


def worker_conv_template(template: str) -> str:
    """FastChat's model worker's ``--conv-template`` for a run's template. ``model``: ``raw``
    (no roles, no separators, no stop string), since the API server replaces the prompt."""
    if template == VICUNA:
        return VICUNA_CONV
    return "raw" if template == MODEL else template


def tokenizer_dir(source: Weights | None, model_path: Path) -> Path:
    """The tokenizer the served model uses: a LoRA run's own (saved beside its adapter), an
    FSDP-sharded checkpoint's base (where its consolidation copies it from), else the served
    folder's."""
    if source is not None and source.adapter_base is not None:
        if (source.path / "tokenizer_config.json").is_file():
            return source.path
        return source.adapter_base
    if source is not None and source.base is not None:
        return source.base
    return model_path


def api_env(template: str, tokenizer: Path) -> dict[str, str]:
    """What the API server's environment needs to render prompts as the run trained: nothing on
    the vicuna path (FastChat's own, as before)."""
    if template == VICUNA:
        return {}
    return {TOKENIZER_ENV: str(tokenizer), TEMPLATE_ENV: template}
