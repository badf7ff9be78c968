"""Token lengths and loss masks of FastChat conversations under the run's chat template.

Self-contained: run as ``python _token_stats.py JOB_JSON`` with the training environment's
interpreter (the wizard never imports transformers). JOB_JSON = {"data", "model", "max_length",
"skip": [record indexes to ignore], "chat_template": the setting (default "auto")}. Prints one
JSON object.

The template is decided by ``template_choice.decide``, the entry's own decision (``../entry``).
The vicuna template mirrors FastChat's ``preprocess`` (slow tokenizer, pad = unk, truncation at
model_max_length, the masking walk that yields "tokenization mismatch") without torch. Any other
template masks with ``chat_masks``, the entry's own code (fast tokenizer, ``ensure_pad_token``),
and returns the unmaskable records and, for a few samples, which text is trained on.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

# Appended, not first: the entry's siblings (kernels.py, lora.py, ...) must not shadow packages.
sys.path.append(str(Path(__file__).resolve().parent.parent / "entry"))
import chat_masks  # the entry's masks; no torch at import
import template_choice  # the entry's decision; standard library only

SAMPLES = 3  # maskable records shown with their trained and masked text

SYSTEM = (
    "A chat between a curious user and an artificial intelligence assistant. "
    "The assistant gives helpful, detailed, and polite answers to the user's questions."
)


def _template() -> tuple[str, Any, str, str, str]:
    """FastChat's own template when installed, else an identical replica of vicuna_v1.1."""
    try:
        # The template FastChat's preprocess gets via get_conversation_template("vicuna"); the
        # light module, since model_adapter imports torch and every model family.
        from fastchat.conversation import get_conv_template

        conv = get_conv_template("vicuna_v1.1")
        return conv.system_message, conv.roles, conv.sep, conv.sep2, "fastchat"
    except Exception:
        return SYSTEM, ("USER", "ASSISTANT"), " ", "</s>", "replica"


def _prompt(source: list[dict[str, Any]], system: str, roles: Any, sep: str, sep2: str) -> str:
    names = {"human": roles[0], "gpt": roles[1]}
    if names[source[0]["from"]] != roles[0]:
        source = source[1:]
    ret = system + sep
    for j, turn in enumerate(source):
        msg = turn["value"]
        ret += names[turn["from"]] + ": " + msg + (sep, sep2)[j % 2] if msg else roles[j % 2] + ":"
    return ret


def _mismatch(
    conversation: str,
    ids: list[int],
    tokenizer: Any,
    max_length: int,
    roles: Any,
    sep: str,
    sep2: str,
) -> bool:
    """FastChat's masking walk: True when its lengths disagree (the sample then trains on nothing)."""
    truncated = ids[:max_length]
    total_len = sum(1 for t in truncated if t != tokenizer.pad_token_id)
    split_sep = sep + roles[1] + ": "
    cur_len = 1
    legacy = getattr(tokenizer, "legacy", True)
    for i, turn in enumerate(conversation.split(sep2)):
        if turn == "":
            break
        turn_len = len(tokenizer(turn).input_ids)
        if len(turn.split(split_sep)) != 2:
            break
        cur_len += turn_len
        if i != 0 and not legacy:
            cur_len -= 1
    return cur_len < max_length and cur_len != total_len


def _load(model: str, max_length: int, fast: bool) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(
        model, use_fast=fast, model_max_length=max_length, padding_side="right"
    )


def vicuna_stats(job: dict[str, Any], records: list[Any]) -> dict[str, Any]:
    """FastChat's own data path: lengths, truncation and its tokenization mismatches."""
    tokenizer = _load(job["model"], job["max_length"], False)
    tokenizer.pad_token = tokenizer.unk_token
    system, roles, sep, sep2, source = _template()
    skip = set(job.get("skip", []))
    max_length = job["max_length"]
    lengths, truncated, mismatched = [], [], []
    for index, record in enumerate(records):
        if index in skip:
            continue
        conversation = _prompt(record["conversations"], system, roles, sep, sep2)
        ids = tokenizer(conversation).input_ids
        lengths.append(len(ids))
        if len(ids) > max_length:
            truncated.append(index)
        elif _mismatch(conversation, ids, tokenizer, max_length, roles, sep, sep2):
            mismatched.append(index)
    return {
        "template_source": source,
        "tokenizer_class": type(tokenizer).__name__,
        "lengths": lengths,
        "truncated": truncated,
        "mismatched": mismatched,
    }


def segments(tokenizer: Any, ids: list[int], labels: list[int]) -> list[dict[str, Any]]:
    """The text of ``ids`` in runs of trained (label set) and masked tokens, in order.

    Each run's text is what decoding through it adds to decoding up to it (spaces a tokenizer
    drops at the start of a text stay where they are); a run that does not decode as an exact
    continuation (a character split across the boundary) is decoded on its own.
    """

    def decode(part: list[int]) -> str:
        return str(
            tokenizer.decode(part, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        )

    out: list[dict[str, Any]] = []
    start, before = 0, ""
    for end in range(1, len(ids) + 1):
        trained = labels[start] != chat_masks.IGNORE_INDEX
        if end < len(ids) and (labels[end] != chat_masks.IGNORE_INDEX) == trained:
            continue
        through = decode(ids[:end])
        text = through[len(before) :] if through.startswith(before) else decode(ids[start:end])
        out.append({"text": text, "trained": trained})
        start, before = end, through
    return out


def template_stats(job: dict[str, Any], records: list[Any], template: str) -> dict[str, Any]:
    """The entry's masks for every record not skipped: lengths, unmaskable records, samples."""
    max_length = job["max_length"]
    tokenizer = _load(job["model"], max_length, True)
    pad = chat_masks.ensure_pad_token(tokenizer)
    renderer = chat_masks.renderer_for(template, tokenizer)
    skip = set(job.get("skip", []))
    indexes = [i for i in range(len(records)) if i not in skip]
    # Untruncated (the lengths are the conversations'), then cut as mask_records cuts.
    masked = chat_masks.mask_records(
        [records[i] for i in indexes], renderer, tokenizer, sys.maxsize
    )
    lengths: list[int] = []
    truncated: list[int] = []
    truncated_away: list[int] = []
    samples: list[dict[str, Any]] = []
    for (ids, labels), kept in zip(masked.examples, masked.kept):
        index = indexes[kept]
        lengths.append(len(ids))
        if len(ids) > max_length:
            truncated.append(index)
        ids, labels = ids[:max_length], labels[:max_length]
        if all(label == chat_masks.IGNORE_INDEX for label in labels):
            truncated_away.append(index)
        elif len(samples) < SAMPLES:
            ident = records[index].get("id")
            samples.append(
                {
                    "index": index,
                    "id": None if ident is None else str(ident),
                    "segments": segments(tokenizer, ids, labels),
                }
            )
    return {
        "template_source": "tokenizer" if template == "model" else "fastchat",
        "tokenizer_class": type(tokenizer).__name__,
        "pad_token": pad,
        "lengths": lengths,
        "truncated": truncated,
        "mismatched": [],
        "truncated_away": truncated_away,
        "unmaskable": [
            {"index": indexes[i], "id": ident, "reason": reason}
            for i, ident, reason in masked.unmaskable
        ],
        "samples": samples,
    }


def main() -> None:
    job = json.loads(sys.argv[1])
    choice = template_choice.decide(job.get("chat_template", "auto"), job["model"])
    if choice.template == "auto":  # no config.json: decide on what loads, as the entry does
        own = getattr(_load(job["model"], job["max_length"], True), "chat_template", None)
        kind = template_choice.model_type(job["model"])
        spm = os.path.isfile(os.path.join(job["model"], "tokenizer.model"))
        choice = template_choice.decide_from(choice.setting, own, kind, True, sentencepiece=spm)
    with open(job["data"], encoding="utf-8") as fh:
        records = json.load(fh)
    if choice.is_vicuna:
        out = vicuna_stats(job, records)
    else:
        out = template_stats(job, records, choice.template)
    out.update(chat_template=choice.template, chat_template_reason=choice.reason)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
