"""LoRA dropout with a packed mask (the entry's lora_dropout.py): the same function as PEFT's
``A(dropout(x))``, gradients included, eagerly and compiled; under compile the layer keeps the
mask's bits instead of a dropped copy per adapter; installed on a real PEFT model, the adapter's
names, weights and eval behaviour are unchanged."""

from __future__ import annotations

import sys

import pytest

from tests.training_side import on_first_use

torch = on_first_use("torch")
transformers = on_first_use("transformers")

from backend.entry import ENTRY_SOURCE  # noqa: E402

if str(ENTRY_SOURCE.parent) not in sys.path:  # torchrun puts the entry's folder first
    sys.path.insert(0, str(ENTRY_SOURCE.parent))
import lora_dropout  # noqa: E402
import regional  # noqa: E402

P = 0.25


def test_pack_then_unpack_gives_the_mask_back_in_an_eighth_of_the_bytes() -> None:
    keep = torch.rand(3, 5, 64) >= P
    packed = lora_dropout.pack(keep)
    assert packed.dtype == torch.uint8 and packed.shape == (3, 5, 8)
    assert torch.equal(lora_dropout.unpack(packed, keep.shape), keep)


def _reference(x: object, w: object, keep: object, grad: object) -> tuple[object, ...]:
    """PEFT's computation with a given mask: linear(x * keep / (1-p), w), by autograd."""
    x = x.detach().requires_grad_()
    w = w.detach().requires_grad_()
    out = torch.nn.functional.linear(x * keep / (1 - P), w)
    out.backward(grad)
    return out.detach(), x.grad, w.grad


def test_eager_output_and_gradients_equal_dropout_then_linear_with_the_same_mask() -> None:
    x = torch.randn(2, 7, 32, requires_grad=True)
    w = torch.randn(4, 32, requires_grad=True)
    grad = torch.randn(2, 7, 4)
    torch.manual_seed(5)
    out = lora_dropout.DropoutThenLinear.apply(x, w, P)
    out.backward(grad)
    torch.manual_seed(5)  # the same draw the forward made
    keep = torch.rand_like(x, dtype=torch.float32) >= P
    assert 0 < keep.float().mean() < 1
    ref_out, ref_gx, ref_gw = _reference(x, w, keep, grad)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(x.grad, ref_gx)
    torch.testing.assert_close(w.grad, ref_gw)


class _FourAdapters(torch.nn.Module):
    """q, k, v read one normed input, o another: an attention block's adapters as PEFT runs
    them in a bf16 model (float32 adapters, the input cast to float32, autocast's bf16 matmul),
    with PEFT's dropout (``peft``) or the packed function (``packed``)."""

    def __init__(self, mode: str) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(64).bfloat16()
        self.a = torch.nn.ModuleList(torch.nn.Linear(64, 8, bias=False) for _ in range(4))
        self.drop = torch.nn.Dropout(P)
        self.mode = mode

    def adapter(self, i: int, x: object) -> object:
        if self.mode == "packed":
            return lora_dropout.DropoutThenLinear.apply(x, self.a[i].weight, P)
        return self.a[i](self.drop(x.float()))

    def forward(self, x: object) -> object:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = self.norm(x)
            h = self.adapter(0, y) + self.adapter(1, y) * self.adapter(2, y)
            return self.adapter(3, torch.tanh(y)) + h


def _kept_bytes(module: object, x: object) -> int:
    """Bytes of the distinct storages autograd keeps for the backward (the input excluded)."""
    storages: dict[int, int] = {}

    def keep(t: object) -> object:
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
        out = module(x)
    storages.pop(x.untyped_storage().data_ptr(), None)
    out.float().sum().backward()
    return sum(storages.values())


@pytest.mark.slow
def test_compiled_layer_keeps_the_bits_not_a_copy_per_adapter_and_gradients_match_its_mask() -> (
    None
):
    torch.manual_seed(0)
    x = torch.randn(1, 256, 64).bfloat16().requires_grad_()
    kept = {}
    for mode in ("peft", "packed"):
        torch.manual_seed(1)
        compiled = torch.compile(_FourAdapters(mode))
        compiled(x).float().sum().backward()  # compile once
        kept[mode] = _kept_bytes(compiled, x)
    bf16_copy = 2 * x.numel()
    # PEFT's dropout keeps a copy per adapter (of q/k/v's shared input and of o's) that the
    # packed masks do not: at least three copies less, the four masks' bits included
    assert kept["peft"] - kept["packed"] >= 3 * bf16_copy + 4 * x.numel() // 8, kept

    # Compiled, the function is still dropout-then-linear with one mask: read the mask back
    # from x's gradient (zero exactly where an element was dropped) and check both outputs.
    xf = torch.randn(1, 256, 64, requires_grad=True)
    w = torch.randn(8, 64, requires_grad=True)
    fn = torch.compile(lambda t, weight: lora_dropout.DropoutThenLinear.apply(t, weight, P))
    grad = torch.randn(1, 256, 8)
    out = fn(xf, w)
    out.backward(grad)
    keep = xf.grad != 0
    assert 0.6 < keep.float().mean() < 0.9  # about 1 - P kept
    ref_out, ref_gx, ref_gw = _reference(xf, w, keep, grad)
    torch.testing.assert_close(out, ref_out, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(xf.grad, ref_gx, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(w.grad, ref_gw, rtol=1e-4, atol=1e-4)


def _peft_model(dropout: float, **lora_options: object) -> object:
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        vocab_size=128, max_position_embeddings=64, attn_implementation="sdpa",
    )  # fmt: skip
    lora = LoraConfig(r=4, lora_alpha=8, lora_dropout=dropout, task_type="CAUSAL_LM",
                      target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                      **lora_options)  # fmt: skip
    return get_peft_model(transformers.LlamaForCausalLM(config), lora)


def test_installed_on_peft_where_asked_keeps_names_eval_and_gradients(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = _peft_model(P)
    names = set(model.state_dict())
    ids = torch.randint(0, 128, (1, 12))
    model.eval()
    with torch.no_grad():
        before = model(input_ids=ids).logits
    monkeypatch.delenv(lora_dropout.DROPOUT_MASKS_ENV, raising=False)
    assert lora_dropout.install(model) == 0  # PEFT's dropout unless a run asks
    monkeypatch.setenv(lora_dropout.DROPOUT_MASKS_ENV, "packed")
    assert regional.masked_dropout(model) == 8  # 4 adapters x 2 layers
    assert set(model.state_dict()) == names  # the adapter saves and resumes as before
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=ids).logits, before)  # eval: no dropout
    a = model.base_model.model.model.layers[0].self_attn.q_proj
    assert isinstance(a.lora_A["default"], lora_dropout.MaskedDropoutLinear)
    assert isinstance(a.lora_dropout["default"], torch.nn.Identity)
    assert a.cast_input_dtype_enabled is False  # the function takes x as the layer has it
    model.train()
    model(input_ids=ids, labels=ids).loss.backward()
    assert a.lora_A["default"].weight.grad is not None
    assert lora_dropout.install(_peft_model(0.0)) == 0  # no dropout: nothing to pack
    assert lora_dropout.install(_peft_model(P, use_dora=True)) == 0  # DoRA reads the dropped x
