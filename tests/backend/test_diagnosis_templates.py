"""A modern tokenizer on FastChat's vicuna-only path is diagnosed, and the fix trains with the
model's own template through the trainwiz entry (never "check the data against vicuna").

The log lines are the shapes transformers and FastChat print (written here from their source's
messages, with this test's own paths and numbers), plus the entry's own refusal line.
"""

from __future__ import annotations

import pytest

from backend.diagnosis import apply_fixes, diagnose_text
from backend.preset.loader import load_preset
from backend.preset.schema import Preset

NO_PAD = """\
  File "/opt/conda/lib/python3.11/site-packages/transformers/tokenization_utils_base.py", line 2923, in _get_padding_truncation_strategies
    raise ValueError(
ValueError: Asking to pad but the tokenizer does not have a padding token. Please select a token to use as `pad_token` `(tokenizer.pad_token = tokenizer.eos_token e.g.)` or add a new pad token via `tokenizer.add_special_tokens({'pad_token': '[PAD]'})`.
[2026-11-02 10:14:01,221] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: 1) local_rank: 0 (pid: 4411) of binary: /usr/bin/python
"""
NO_LEGACY = """\
  File "/workspace/FastChat/fastchat/train/train.py", line 143, in preprocess
    if i != 0 and not tokenizer.legacy:
AttributeError: 'PreTrainedTokenizerFast' object has no attribute 'legacy'
"""
REFUSED = (
    "[trainwiz-entry] chat template qwen-7b-chat: 180 of 200 conversations cannot be masked "
    "exactly (turn 1: the tokens before/through this reply are not a prefix); nothing was trained.\n"
)


@pytest.fixture()
def seed_like() -> Preset:
    preset = load_preset("vicuna-7b-4xa100-40g")
    return preset.model_copy(
        update={
            "launch": preset.launch.model_copy(update={"entry": "fastchat"}),
        }
    )


@pytest.mark.parametrize("log", [NO_PAD, NO_LEGACY], ids=["no-pad-token", "no-legacy"])
def test_a_modern_tokenizer_on_fastchats_path_gets_the_template_fix(
    log: str, seed_like: Preset
) -> None:
    top = diagnose_text(log, preset=seed_like).top
    assert top is not None and top.category == "chat_template_mask", top
    fix = top.fixes[0]
    changes = {c.path: c.value for c in fix.changes}
    assert changes == {"launch.entry": "trainwiz"}
    fixed = apply_fixes(seed_like, fix)
    assert fixed.launch.entry == "trainwiz" and fixed.training.chat_template == "auto"


def test_the_entrys_refusal_is_diagnosed_with_the_template_and_a_way_to_see_the_masks() -> None:
    preset = load_preset("qwen2.5-7b-lora-1x24g")
    preset = preset.model_copy(
        update={"training": preset.training.model_copy(update={"chat_template": "qwen-7b-chat"})}
    )
    top = diagnose_text(REFUSED, preset=preset).top
    assert top is not None and top.category == "chat_template_mask"
    assert top.fixes[0].changes[0].path == "training.chat_template"
    assert top.fixes[0].changes[0].value == "auto"
    assert any("data check --model" in f.reason for f in top.fixes)
