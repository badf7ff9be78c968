"""torch's own varlen attention for packed rows (backend/entry/varlen.py): the document bounds the
packed collator adds, the pad filler cut to the constant maximum length, the two signatures of
torch's varlen_attn, and the attention function inside a real (tiny, CPU) Llama: with a
reference kernel in place of the CUDA one, packed rows give the logits and gradients of SDPA
with transformers' block-diagonal mask (the CPU path of packed rows). The CUDA kernel itself is
checked against SDPA by ``usable`` on the GPU, before a run uses it."""

from __future__ import annotations

import itertools
import sys
import types
from typing import Any

import pytest

from tests.training_side import on_first_use

torch = on_first_use("torch")
transformers = on_first_use("transformers")

from backend.entry import ENTRY_SOURCE  # noqa: E402

if str(ENTRY_SOURCE.parent) not in sys.path:  # torchrun puts the entry's folder first
    sys.path.insert(0, str(ENTRY_SOURCE.parent))
import packing  # noqa: E402
import varlen  # noqa: E402


def test_segments_follow_restarting_positions_and_cut_the_filler() -> None:
    pos = [0, 1, 2, 0, 1, 0, 1, 2, 3, 4, 5, 6, 7, 8]  # two documents, then 9 tokens of filler
    assert varlen.segments(pos, 16) == ([0, 3, 5, 14], 9)
    assert varlen.segments(pos, 4) == ([0, 3, 5, 9, 13, 14], 4)  # filler cut to at most 4
    assert varlen.segments([0, 1, 2, 3], 4) == ([0, 4], 4)


def test_the_collator_adds_bounds_only_when_asked(tmp_path: Any) -> None:
    rows = [{"input_ids": torch.tensor([5, 6, 7, 0]), "labels": torch.tensor([-100, 6, 7, -100]),
             "position_ids": torch.tensor([0, 1, 2, 0])},
            {"input_ids": torch.tensor([8, 9, 0, 0]), "labels": torch.tensor([-100, 9, -100, -100]),
             "position_ids": torch.tensor([0, 1, 0, 1])}]  # fmt: skip
    joined = varlen.add_bounds(packing.collate(rows), 4, torch)
    assert joined["cu_seq_lens_q"].tolist() == [0, 3, 4, 6, 8]
    assert joined["cu_seq_lens_q"].dtype == torch.int32
    assert joined["max_length_q"] == joined["max_length_k"] == 4
    assert "cu_seq_lens_q" not in packing.collate(rows)


def test_wanted_and_both_signatures(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(varlen.ENV, raising=False)
    assert varlen.wanted() and not varlen.asked()  # the default since measured on an H100
    monkeypatch.setenv(varlen.ENV, "varlen")
    assert varlen.wanted() and varlen.asked()
    for word in ("flex_attention", "flex", "FLEX", "off"):
        monkeypatch.setenv(varlen.ENV, word)
        assert not varlen.wanted() and not varlen.asked()

    def old(q, k, v, cu_q, cu_k, max_q, max_k, is_causal=False, return_aux=None): ...
    def new(q, k, v, cu_q, cu_k, max_q, max_k, *, scale=None, window_size=(-1, -1)): ...

    assert varlen._causal_kwargs(old) == {"is_causal": True}
    assert varlen._causal_kwargs(new) == {"window_size": (-1, 0)}


def test_not_usable_without_cuda_or_an_attention_interface() -> None:
    """No CUDA is said first (the entry stays quiet about it on a CPU run); with CUDA, a
    transformers without the attention interface (a stand-in torch that has CUDA, named so)."""
    import types

    if not torch.cuda.is_available():
        assert varlen.usable(torch, (4, 57, 6)) == (False, "no CUDA")
        assert varlen.usable(torch, (4, 40, 0)) == (False, "no CUDA")
    with_cuda = types.SimpleNamespace(cuda=types.SimpleNamespace(is_available=lambda: True))
    assert varlen.usable(with_cuda, (4, 40, 0)) == (
        False,
        "transformers < 4.48 has no attention interface",
    )


def _reference(q: Any, k: Any, v: Any, cu: Any, max_len: int, scale: float | None) -> Any:
    """What FlashAttention's varlen kernel computes: causal attention within each segment."""
    bounds = cu.tolist()
    assert all(b - a <= max_len for a, b in itertools.pairwise(bounds))
    parts = [torch.nn.functional.scaled_dot_product_attention(
                 q[a:b].transpose(0, 1), k[a:b].transpose(0, 1), v[a:b].transpose(0, 1),
                 is_causal=True, scale=scale).transpose(0, 1)
             for a, b in itertools.pairwise(bounds)]  # fmt: skip
    return torch.cat(parts)


@pytest.mark.parametrize("kv_heads", [4, 2])
def test_packed_rows_through_a_llama_match_each_document_alone(
    monkeypatch: pytest.MonkeyPatch, kv_heads: int
) -> None:
    monkeypatch.setitem(varlen._STATE, "fn", _reference)
    # float32 end to end, to compare exactly: the 16-bit cast the CUDA kernel needs is
    # tested apart (test_float32_queries_run_in_16_bit_and_come_back_in_float32)
    monkeypatch.setattr(varlen, "half_dtype", lambda *_args: None)
    varlen.register(transformers)
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=kv_heads, vocab_size=64, max_position_embeddings=64,
    )  # fmt: skip
    rows = []
    for lengths in ([5, 7, 4], [9, 3, 4]):  # the last "document" of each row is its filler
        ids = torch.randint(1, 64, (sum(lengths),))
        pos = torch.cat([torch.arange(n) for n in lengths])
        rows.append({"input_ids": ids, "labels": ids.clone(), "position_ids": pos})
    batch = varlen.add_bounds(packing.collate(rows), 16, torch)
    state = transformers.LlamaForCausalLM(config).state_dict()

    def model_for(attn: str) -> Any:
        config._attn_implementation = attn
        model = transformers.LlamaForCausalLM(config)
        model.load_state_dict(state)
        return model

    def grad_of(model: Any, logits: Any) -> Any:
        logits.float().logsumexp(-1).sum().backward()
        return model.model.layers[0].self_attn.q_proj.weight.grad

    packed = model_for(varlen.NAME)
    logits = packed(**{k: v for k, v in batch.items() if k != "labels"}).logits
    alone = model_for("eager")
    ids, cu = batch["input_ids"][0], batch["cu_seq_lens_q"].tolist()
    want = torch.cat([alone(input_ids=ids[a:b][None]).logits[0]
                      for a, b in itertools.pairwise(cu)])[None]  # fmt: skip
    assert torch.allclose(logits, want, atol=1e-5)
    assert torch.allclose(grad_of(packed, logits), grad_of(alone, want), atol=1e-5)


def _half_only_reference(q: Any, k: Any, v: Any, cu: Any, max_len: int, scale: float | None) -> Any:
    """A stand-in for FlashAttention's varlen kernel (CUDA only), named so: like it, it refuses
    anything but fp16/bf16 with FlashAttention's own words, and answers in the input's dtype."""
    if q.dtype not in (torch.float16, torch.bfloat16) or not q.dtype == k.dtype == v.dtype:
        raise RuntimeError("FlashAttention only support fp16 and bf16 data type")
    return _reference(q.float(), k.float(), v.float(), cu, max_len, scale).to(q.dtype)


def test_float32_queries_run_in_16_bit_and_come_back_in_float32(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """QLoRA keeps norms and adapters in float32: its queries reach the attention in float32."""
    monkeypatch.setitem(varlen._STATE, "fn", _half_only_reference)
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 4, 12, 8) for _ in range(3))
    cu = torch.tensor([0, 5, 12], dtype=torch.int32)
    out, _ = varlen.attention(None, q, k, v, None, cu_seq_lens_q=cu, max_length_q=12)
    assert out.dtype == torch.float32 and out.shape == (1, 12, 4, 8)
    bf16 = [t[0].transpose(0, 1).to(torch.bfloat16) for t in (q, k, v)]
    want = _half_only_reference(*bf16, cu, 12, None).float()
    assert torch.equal(out[0], want)
    with torch.autocast("cpu", dtype=torch.float16):
        assert varlen.half_dtype(torch, q, None) == torch.float16
    projection = types.SimpleNamespace(q_proj=types.SimpleNamespace(weight=q.half()))
    assert varlen.half_dtype(torch, q, projection) == torch.float16
    assert varlen.half_dtype(torch, q.bfloat16(), projection) is None


def test_the_attention_refuses_a_batch_without_bounds() -> None:
    q = torch.zeros(1, 2, 4, 8)
    with pytest.raises(RuntimeError, match="cu_seq_lens_q"):
        varlen.attention(None, q, q, q, None)


def _liger_stand_in(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A stand-in for liger_kernel's loss module (its kernels need Triton and a GPU), named so:
    the same call chain as liger-kernel 0.6.4, where the model's forward hands every keyword
    argument to ``LigerForCausalLMLoss``, which calls ``fixed_fused_linear_cross_entropy`` by its
    module's global name, which passes them on to a kernel that takes none of the bounds."""
    import types

    module = types.ModuleType("liger_kernel.transformers.model.loss_utils")
    seen: dict[str, Any] = {}

    def kernel(hidden: Any, weight: Any, target: Any, reduction: str = "mean") -> str:
        seen["called"] = True
        return "loss"

    def fixed_fused_linear_cross_entropy(
        hidden: Any, weight: Any, target: Any, **kwargs: Any
    ) -> Any:
        return kernel(hidden, weight, target, **kwargs)

    def liger_for_causal_lm_loss(hidden: Any, weight: Any, labels: Any, **kwargs: Any) -> Any:
        return module.fixed_fused_linear_cross_entropy(hidden, weight, labels, **kwargs)

    module.fixed_fused_linear_cross_entropy = fixed_fused_linear_cross_entropy  # type: ignore[attr-defined]
    module.LigerForCausalLMLoss = liger_for_causal_lm_loss  # type: ignore[attr-defined]
    for name in ("liger_kernel", "liger_kernel.transformers", "liger_kernel.transformers.model"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, module.__name__, module)
    sys.modules["liger_kernel.transformers.model"].loss_utils = module  # type: ignore[attr-defined]
    module.seen = seen  # type: ignore[attr-defined]
    return module


def test_the_bounds_stop_at_the_attention_and_never_reach_ligers_loss(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Varlen with use_liger_kernel failed its first step on an H100 (TypeError: unexpected
    keyword argument 'cu_seq_lens_q' from Liger's loss): registering the attention now keeps
    the bounds out of Liger's loss, once however often it is registered."""
    liger = _liger_stand_in(monkeypatch)
    bounds = {
        "cu_seq_lens_q": [0, 3],
        "cu_seq_lens_k": [0, 3],
        "max_length_q": 3,
        "max_length_k": 3,
    }
    with pytest.raises(TypeError, match="cu_seq_lens_q"):
        liger.LigerForCausalLMLoss("h", "w", "y", **bounds)
    varlen.register(transformers)
    varlen.register(transformers)
    assert liger.LigerForCausalLMLoss("h", "w", "y", **bounds, reduction="sum") == "loss"
    assert liger.seen == {"called": True}
    assert liger.fixed_fused_linear_cross_entropy._trainwiz_no_bounds


def test_without_liger_the_attention_registers_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "liger_kernel", None)  # an import of it fails
    assert varlen.keep_bounds_out_of_liger_loss() is False
    varlen.register(transformers)
    assert varlen.NAME in transformers.AttentionInterface._global_mapping
