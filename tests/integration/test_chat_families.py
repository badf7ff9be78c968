"""Today's chat-model families end to end on the CPU: made, trained through `trainwiz launch` with
their own chat template, masked exactly, and answering in `trainwiz chat`.

Each family is a tiny random-weight model whose tokenizer behaves like the family's (made by the
product's own tiny-model code: byte-level BPE without BOS for Qwen, BPE with BOS and no unk/pad
for Llama-3, sentencepiece-like with BOS for Mistral and Gemma-2) with the family's chat template
in the tokenizer. The mask check is independent of the entry's code: it decodes every trained
token span of the run's own tokenizer and compares it with the assistant turns of the data.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import yaml

from tests.trainwiz_cli import cli

pytestmark = [pytest.mark.training, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "presets" / "data" / "sample_conversations.json"
# The token that ends an assistant turn in each family's template (trained on, as in the
# families' own recipes: the model must learn to stop).
END_OF_TURN = {
    "llama3": "<|eot_id|>",
    "qwen2": "<|im_end|>",
    "mistral": "</s>",
    "gemma2": "<end_of_turn>",
}
STEPS = 30


def family_preset(tmp: Path, family: str) -> Path:
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["name"] = f"tiny-{family}"
    data["model"]["dir"] = f"@home/models/tiny-{family}"
    data["model"]["tiny"]["family"] = family
    data["training"]["max_steps"] = STEPS
    path = tmp / f"tiny-{family}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def metric_lines(run_dir: Path) -> list[dict]:
    text = (run_dir / "metrics.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def trained_spans(labels: list[int]) -> list[tuple[int, int]]:
    spans, start = [], None
    for i, label in enumerate([*labels, -100]):
        if label != -100 and start is None:
            start = i
        elif label == -100 and start is not None:
            spans.append((start, i))
            start = None
    return spans


def assert_exact_masks(model_dir: Path, family: str) -> None:
    """Every conversation: the trained spans decode to exactly its assistant replies, each with
    the family's end-of-turn token; nothing of the system/user turns or the role headers."""
    import sys

    import transformers

    sys.path.insert(0, str(ROOT / "backend" / "entry"))
    try:
        import chat_masks
    finally:
        sys.path.remove(str(ROOT / "backend" / "entry"))
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    renderer = chat_masks.renderer_for("model", tokenizer)
    records = json.loads(SAMPLE.read_text())
    checked = 0
    for record in records[:40]:
        messages = chat_masks.to_messages(record)
        ids, labels = chat_masks.mask_conversation(messages, renderer, tokenizer)
        replies = [m["content"] for m in messages if m["role"] == "assistant"]
        spans = trained_spans(labels)
        assert len(spans) == len(replies), (record.get("id"), spans)
        for (a, b), reply in zip(spans, replies, strict=True):
            text = tokenizer.decode(ids[a:b])
            assert text.strip() == reply.strip() + END_OF_TURN[family], (record.get("id"), text)
        # Every user turn is in the masked (untrained) text.
        masked = tokenizer.decode(
            [t for t, label in zip(ids, labels, strict=True) if label == -100]
        )
        for message in messages:
            if message["role"] == "user":
                assert message["content"].strip() in masked, (record.get("id"), masked)
        checked += 1
    assert checked == 40


@pytest.mark.parametrize("family", sorted(END_OF_TURN))
def test_family_trains_with_its_own_template_masked_exactly_and_chats(
    family: str, tmp_path: Path, tiny_families: dict[str, Path]
) -> None:
    home = Path(os.environ["TRAINWIZ_HOME"])
    shutil.copytree(tiny_families[family], home / "models" / f"tiny-{family}")
    cli("launch", str(family_preset(tmp_path, family)), timeout=600)  # exit 0: finished
    (run_dir,) = (Path(os.environ["TRAINWIZ_HOME"]) / "runs").iterdir()
    log = (run_dir / "train.log").read_text()
    lines = metric_lines(run_dir)
    start = lines[0]
    assert start["chat_template"] == "model", start
    assert "tokenizer carries a chat template" in start["chat_template_reason"]
    # No sample dropped: every conversation of the data is trained on.
    assert "200 of 200 conversations trained; 0 unmaskable" in log, log[-3000:]
    steps = [line for line in lines if line["kind"] == "step"]
    assert len(steps) == STEPS
    losses = [s["loss"] for s in steps]
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.5, losses
    assert all(0 < s["tokens_nonpad"] <= s["tokens"] for s in steps)
    model_dir = run_dir / "output"
    assert_exact_masks(model_dir, family)
    # The exported folder keeps the template the run trained with.
    assert (
        json.loads((model_dir / "tokenizer_config.json").read_text()).get("chat_template")
        or (model_dir / "chat_template.jinja").is_file()
    )
    chat = cli("chat", run_dir.name, "--prompt", "Hello", "--max-new-tokens", "6", "--json")
    answer = json.loads(chat.stdout)
    assert answer["template"] == "model", answer
    assert isinstance(answer["turns"][0]["reply"], str), answer


def test_a_template_that_cannot_mask_the_data_is_refused_before_training(
    tmp_path: Path, tiny_families: dict[str, Path]
) -> None:
    """A template that renders earlier turns differently once later ones exist (here: the turn
    count in a header, as templates that strip earlier reasoning do) cannot be masked: the
    launch fails before the first step, naming the template, and diagnose says what to do."""
    preset = family_preset(tmp_path, "qwen2")
    home = Path(os.environ["TRAINWIZ_HOME"])
    shutil.copytree(tiny_families["qwen2"], home / "models" / "tiny-qwen2")
    template = home / "models" / "tiny-qwen2" / "chat_template.jinja"
    template.write_text("{{ messages | length }} turns\n" + template.read_text())
    failed = cli("launch", str(preset), check=False, timeout=600)
    assert failed.returncode == 1, failed.stdout[-2000:] + failed.stderr[-2000:]
    (run_dir,) = (home / "runs").iterdir()
    log = (run_dir / "train.log").read_text()
    assert "200 of 200 conversations cannot be masked exactly" in log, log[-3000:]
    lines = metric_lines(run_dir)
    assert not [line for line in lines if line["kind"] == "step"]
    assert lines[-1]["ok"] is False and lines[-1]["reason"] == "unmaskable"
    found = json.loads(cli("diagnose", run_dir.name, "--json", check=False).stdout)
    assert found["findings"][0]["category"] == "chat_template_mask", found
