"""The full fine-tune's speed tools on a LoRA model, as the entry runs them (tiny CPU Llama with
PEFT adapters): packed rows give each conversation its own attention through PEFT's wrapper,
the per-layer options (selective recompute, regional compile) find the decoder layers inside
it and leave the adapters' gradients unchanged, and Liger stays off when an adapter sits on
lm_head (its fused loss would read lm_head's base weight and skip the adapter).

tune proposes these for LoRA/QLoRA (backend/planner/method_search.py); the H100 measured them
by hand at 6.74B (docs/performance.md "LoRA with packed rows"). Liger's kernels need a GPU: on
the CPU only the gate is checked here."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from tests.training_side import on_first_use

torch = on_first_use("torch")
transformers = on_first_use("transformers")
peft = on_first_use("peft")

from backend.entry import ENTRY_SOURCE  # noqa: E402

if str(ENTRY_SOURCE.parent) not in sys.path:  # torchrun puts the entry's folder first
    sys.path.insert(0, str(ENTRY_SOURCE.parent))
import kernels  # noqa: E402
import packing  # noqa: E402
import regional  # noqa: E402

lora = on_first_use("lora")  # imports torch and transformers at its top

IGNORE = packing.IGNORE_INDEX


def _lora_model(layers: int = 2) -> Any:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=layers, num_attention_heads=4,
        vocab_size=128, max_position_embeddings=64, attn_implementation="sdpa", use_cache=False,
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(config)
    adapters = peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, task_type="CAUSAL_LM",
                               target_modules=["q_proj", "v_proj", "down_proj"])  # fmt: skip
    model = peft.get_peft_model(model, adapters)
    for name, param in model.named_parameters():  # B starts at zero: give it a gradient path
        if "lora_B" in name:
            torch.nn.init.normal_(param, std=0.02)
    return model


def _documents() -> list[tuple[Any, Any]]:
    torch.manual_seed(1)
    out = []
    for n in (10, 14, 5):
        ids = torch.randint(3, 128, (n,))
        labels = ids.clone()
        labels[0] = IGNORE  # as packing.preprocess_each: never learn across a row's documents
        out.append((ids, labels))
    return out


def _summed(model: Any, batches: list[dict[str, Any]]) -> tuple[float, dict[str, Any]]:
    """The summed token loss over the batches and the adapters' gradients."""
    model.zero_grad(set_to_none=True)
    total = sum(model(**b, num_items_in_batch=1).loss for b in batches)
    total.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    assert grads and all("lora_" in n for n in grads)  # the base is frozen
    return float(total.detach()), grads


def _packed_batch() -> dict[str, Any]:
    rows = packing.build_rows(_documents(), 32, pad_id=0)
    assert len(rows) == 1  # all three in one row, with filler
    return packing.collate([packing.PackedDataset(rows)[0]])


def _separately() -> tuple[float, dict[str, Any]]:
    docs = [{"input_ids": i[None], "labels": lab[None]} for i, lab in _documents()]
    return _summed(_lora_model(), docs)


def test_packed_rows_through_peft_equal_each_conversation_alone() -> None:
    loss, grads = _separately()
    packed_loss, packed_grads = _summed(_lora_model(), [_packed_batch()])
    assert packed_loss == pytest.approx(loss, rel=1e-5)
    for name, grad in grads.items():
        torch.testing.assert_close(packed_grads[name], grad, atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.slow  # dynamo tracing of two layers: ~15 s of CPU
def test_layer_options_reach_the_layers_inside_peft_and_keep_the_adapter_gradients() -> None:
    """Selective recompute and regional compile (dynamo + AOT autograd: the tracing the entry's
    inductor compile also does, without its C++ build on this CPU) over the LoRA layers."""
    _loss, grads = _summed(_lora_model(), [_packed_batch()])
    model = _lora_model()
    layers = regional.decoder_layers(model, torch)
    assert [type(m).__name__ for m in layers] == ["LlamaDecoderLayer"] * 2
    active = regional.apply(model, torch, compile_layers=False, recompute_layers=1,
                            gradient_checkpointing=False)  # fmt: skip
    assert active == {"recompute_layers": 1}
    for layer in layers:
        layer.compile(backend="aot_eager")
    _loss2, got = _summed(model, [_packed_batch()])
    assert got.keys() == grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(got[name], grad, atol=1e-5, rtol=1e-4, msg=name)


def test_liger_stays_off_when_an_adapter_sits_on_lm_head(capsys: pytest.CaptureFixture) -> None:
    from train_entry import TrainingArguments, pop_option

    on_head = lora.LoraArguments(lora_target_modules=["q_proj", "lm_head"])
    assert lora.adapts_lm_head(on_head) and not lora.adapts_lm_head(lora.LoraArguments())
    assert not lora.adapts_lm_head(None)
    argv = ["--use_liger_kernel", "True", "--optim", "adamw_torch_fused"]
    active = kernels.gate(argv, pop_option, TrainingArguments, torch, lm_head_adapter=True)
    assert "use_liger_kernel" not in active and "--use_liger_kernel" not in argv
    assert active["optim"] == "adamw_torch_fused"
    assert "LoRA adapts lm_head" in capsys.readouterr().out
