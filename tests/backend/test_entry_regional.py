"""The entry's per-layer options on a real (tiny, CPU) Llama: selective recompute checkpoints
the layers it names and leaves the gradients unchanged; regional compile compiles each decoder
layer and keeps the state dict's names (saving and resuming are unchanged)."""

from __future__ import annotations

import sys

import pytest

from tests.training_side import on_first_use

torch = on_first_use("torch")
transformers = on_first_use("transformers")

from backend.entry import ENTRY_SOURCE  # noqa: E402

if str(ENTRY_SOURCE.parent) not in sys.path:  # torchrun puts the entry's folder first
    sys.path.insert(0, str(ENTRY_SOURCE.parent))
import regional  # noqa: E402


def _tiny(layers: int = 4) -> object:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=layers, num_attention_heads=4,
        vocab_size=128, max_position_embeddings=64, attn_implementation="sdpa",
    )  # fmt: skip
    return transformers.LlamaForCausalLM(config)


def _grads(model: object, ids: object) -> dict[str, object]:
    model.zero_grad()
    model(input_ids=ids, labels=ids).loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_layers_spread_evenly() -> None:
    assert regional.chosen(32, 8) == [3, 7, 11, 15, 19, 23, 27, 31]
    assert regional.chosen(4, 2) == [1, 3]
    assert regional.chosen(2, 5) == [0, 1]  # more than there are: every layer
    assert len(regional.chosen(40, 30)) == 30


def test_options_from_argv_and_bad_values() -> None:
    from train_entry import pop_option

    argv = ["--x", "1", "--compile_layers", "True", "--recompute_layers=3"]
    assert regional.pop_options(argv, pop_option) == (True, 3) and argv == ["--x", "1"]
    assert regional.pop_options([], pop_option) == (False, None)
    with pytest.raises(SystemExit, match="at least 1"):
        regional.pop_options(["--recompute_layers", "0"], pop_option)
    with pytest.raises(SystemExit, match="whole number"):
        regional.pop_options(["--recompute_layers", "half"], pop_option)


def test_selective_recompute_reruns_only_the_chosen_layers_with_the_same_gradients() -> None:
    ids = torch.randint(0, 128, (2, 16))
    plain = _tiny()
    expected = _grads(plain, ids)
    model = _tiny()
    model.load_state_dict(plain.state_dict())
    layers = regional.decoder_layers(model, torch)
    assert [type(m).__name__ for m in layers] == ["LlamaDecoderLayer"] * 4
    active = regional.apply(model, torch, compile_layers=False, recompute_layers=2,
                            gradient_checkpointing=False)  # fmt: skip
    assert active == {"recompute_layers": 2}
    calls = [0] * 4
    for i, layer in enumerate(layers):
        layer.mlp.register_forward_pre_hook(lambda *_a, i=i: calls.__setitem__(i, calls[i] + 1))
    got = _grads(model, ids)
    assert calls == [1, 2, 1, 2]  # layers 1 and 3 ran their forward again in backward
    for name, grad in expected.items():
        torch.testing.assert_close(got[name], grad, rtol=1e-4, atol=1e-5)


def test_recompute_layers_defers_to_gradient_checkpointing() -> None:
    model = _tiny(2)
    active = regional.apply(model, torch, compile_layers=False, recompute_layers=1,
                            gradient_checkpointing=True)  # fmt: skip
    assert active == {}
    assert all("forward" not in vars(m) for m in regional.decoder_layers(model, torch))


def test_regional_compile_marks_every_layer_and_keeps_state_dict_names() -> None:
    model = _tiny(2)
    names = set(model.state_dict())
    active = regional.apply(model, torch, compile_layers=True, recompute_layers=None,
                            gradient_checkpointing=False)  # fmt: skip
    assert active == {"compile_layers": 2}
    assert all(m._compiled_call_impl is not None for m in regional.decoder_layers(model, torch))
    assert set(model.state_dict()) == names  # no _orig_mod. prefix: save/resume unchanged
