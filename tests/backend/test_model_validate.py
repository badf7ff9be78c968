"""Validation without loading weights, the tiny model maker, and the `trainwiz model` CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend.errors import BadInput
from backend.model.placeholders import SAMPLE_CONVERSATIONS, resolve_placeholders
from backend.model.tiny import make_tiny
from backend.model.validate import read_safetensors_header, validate_model_dir
from backend.preset.loader import load_preset
from tests.backend.hubserver import write_llama_dir
from tests.conftest import shared_once
from tui.cli import main


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny-cpu preset's model, made once (a real subprocess with torch + sentencepiece)."""
    return shared_tiny(tmp_path_factory)


def shared_tiny(factory: pytest.TempPathFactory) -> Path:
    """The tiny-cpu preset's model, made once per test run whichever worker asks first (the same
    folder as conftest's ``tiny_model``: one build of it, not one per worker)."""
    spec = load_preset("tiny-cpu").model.tiny
    return shared_once(factory, "tiny-llama", lambda target: make_tiny(target, spec))


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """Run the real CLI entry in-process (argv parsing, exit-code mapping); (code, stdout)."""
    code = main(list(args))
    return code, capsys.readouterr().out


def test_tiny_model_param_count_matches_config_and_torch(tiny_dir: Path) -> None:
    report = validate_model_dir(tiny_dir)
    assert report.ok, report.problems
    # The count torch reported when it built the model equals the header count and the config's.
    made = json.loads((tiny_dir / "trainwiz-tiny.json").read_text())
    assert made["spec"]["hidden_size"] == report.config.hidden_size == 64
    assert report.n_params == report.n_params_from_config == 166_208
    assert report.dtype == "float32"
    assert "tokenizer.model" in report.tokenizer_files


def test_make_tiny_is_idempotent(tiny_dir: Path) -> None:
    before = (tiny_dir / "model.safetensors").stat().st_mtime_ns
    result = make_tiny(tiny_dir, load_preset("tiny-cpu").model.tiny)
    assert not result.created
    assert (tiny_dir / "model.safetensors").stat().st_mtime_ns == before


def test_cli_validate_json_on_tiny(tiny_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = cli(capsys, "model", "validate", str(tiny_dir), "--json")
    assert code == 0
    data = json.loads(out)
    assert data["ok"] is True
    assert data["n_params"] == data["n_params_from_config"] == 166_208
    assert data["config"]["num_hidden_layers"] == 2


def test_sharded_bf16_with_gqa(tmp_path: Path) -> None:
    n = write_llama_dir(tmp_path / "m", shards=3)
    report = validate_model_dir(tmp_path / "m")
    assert report.ok, report.problems
    assert report.n_params == n == report.n_params_from_config
    assert report.config.num_key_value_heads == 2
    assert len(report.shards) == 3 and report.dtype == "bfloat16"
    header, size = read_safetensors_header(tmp_path / "m" / "model-00001-of-00003.safetensors")
    assert size == (tmp_path / "m" / "model-00001-of-00003.safetensors").stat().st_size
    assert "__metadata__" in header


def test_missing_shard_tokenizer_and_config_are_named(tmp_path: Path) -> None:
    root = tmp_path / "m"
    write_llama_dir(root)
    (root / "model-00002-of-00002.safetensors").unlink()
    (root / "tokenizer.model").unlink()
    report = validate_model_dir(root)
    assert any("model-00002-of-00002.safetensors is missing" in p for p in report.problems)
    assert any(p.startswith("no tokenizer") for p in report.problems)
    (root / "config.json").unlink()
    assert any("config.json is missing" in p for p in validate_model_dir(root).problems)
    with pytest.raises(BadInput, match="does not exist"):
        validate_model_dir(tmp_path / "nowhere")


def test_cli_validate_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "m"
    write_llama_dir(root)
    shard = root / "model-00001-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes()[:-10])
    code, out = cli(capsys, "model", "validate", str(root))
    assert code == 1
    assert "model-00001-of-00002.safetensors" in out and "cut short" in out
    assert cli(capsys, "model", "validate", str(tmp_path / "nowhere"))[0] == 2


def test_bin_checkpoint_is_estimated_and_said_so(tmp_path: Path) -> None:
    root = tmp_path / "b"
    root.mkdir()
    (root / "config.json").write_text(json.dumps({"model_type": "llama", "torch_dtype": "float16"}))
    (root / "tokenizer.model").write_bytes(b"x")
    # A torch.save file is a zip: 2000 bytes of fp16 with an end record = ~1000 parameters.
    (root / "pytorch_model.bin").write_bytes(
        b"PK\x03\x04" + b"\0" * 1974 + b"PK\x05\x06" + b"\0" * 18
    )
    report = validate_model_dir(root)
    assert report.weight_format == "bin" and report.n_params == 1000
    assert report.n_params_source == "bin size estimate"
    assert any("estimated from file size" in w for w in report.warnings)
    (root / "pytorch_model.bin").write_bytes(b"PK\x03\x04" + b"\0" * 500)  # cut before the end
    assert any("no zip end record" in p for p in validate_model_dir(root).problems)


def test_placeholders(tmp_path: Path) -> None:
    from backend import paths

    home = paths.home()  # "@home" alone is refused (tests/faults/test_input_faults.py)
    assert resolve_placeholders("@home/models/x", None) == str(home / "models" / "x")
    assert resolve_placeholders("@sample", None) == str(SAMPLE_CONVERSATIONS)
    assert resolve_placeholders("@run/output", tmp_path) == str(tmp_path / "output")
    assert resolve_placeholders("/data/a@home", None) == "/data/a@home"
    assert resolve_placeholders("@homework", None) == "@homework"
    with pytest.raises(BadInput, match="@run"):
        resolve_placeholders("@run/output", None)
    assert SAMPLE_CONVERSATIONS.is_file()


# Hostile and broken model directories (docs/security.md): a clear problem, never a crash or a lie.


def _with_header(path: Path, header: object, data: bytes = b"") -> None:
    raw = json.dumps(header).encode()
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + data)


def test_empty_dir_prints_a_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = cli(capsys, "model", "validate", str(tmp_path))
    assert code == 1
    assert "config implies ?" in out and "problem(s)" in out


def test_a_file_is_not_a_model_dir(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["model", "validate", "/etc/passwd"]) == 2
    assert "is a file, not a model directory" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("header", "expect"),
    [
        ([1, 2, 3], "not a JSON object"),
        ({"w": {"dtype": "F32", "shape": [2]}}, "data_offsets"),
        ({"w": {"dtype": "F32", "shape": [-2, 2], "data_offsets": [0, 16]}}, "natural numbers"),
        ({"w": {"dtype": "F32", "shape": "x", "data_offsets": [0, 4]}}, "natural numbers"),
        ({"w": {"dtype": "X99", "shape": [1], "data_offsets": [0, 4]}}, "unknown dtype"),
        ({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 4]}}, "do not match"),
        ({"w": "not a tensor"}, "not an object"),
    ],
)
def test_malformed_safetensors_headers_are_problems(
    tmp_path: Path, header: object, expect: str
) -> None:
    (tmp_path / "config.json").write_text("{}")
    _with_header(tmp_path / "model.safetensors", header, b"\0" * 16)
    report = validate_model_dir(tmp_path)
    assert not report.ok
    assert any(expect in p for p in report.problems), report.problems
    assert report.n_params is not None and report.n_params >= 0


def test_negative_shape_is_not_a_parameter_count(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "tokenizer.json").write_text("{}")
    header = {"w": {"dtype": "F32", "shape": [-1, 4], "data_offsets": [0, 0]}}
    _with_header(tmp_path / "model.safetensors", header)
    code, out = cli(capsys, "model", "validate", str(tmp_path))
    assert code == 1 and "parameters  -" not in out


def test_deeply_nested_json_is_a_problem_not_recursion_error(tmp_path: Path) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    (tmp_path / "config.json").write_text(deep)
    (tmp_path / "model.safetensors.index.json").write_text('{"weight_map": ' + deep + "}")
    raw = deep.encode()
    (tmp_path / "x.safetensors").write_bytes(len(raw).to_bytes(8, "little") + raw)
    report = validate_model_dir(tmp_path)
    text = " ".join(report.problems)
    assert "config.json is not valid JSON" in text and "not a valid shard index" in text


@pytest.mark.parametrize(
    "config",
    [
        [1, 2],
        {"architectures": 5, "hidden_size": "big", "num_hidden_layers": -3, "vocab_size": 1e400},
        {"architectures": [], "num_attention_heads": 0, "hidden_size": True},
    ],
)
def test_malformed_config_values_are_dropped(tmp_path: Path, config: object) -> None:
    (tmp_path / "config.json").write_text(json.dumps(config).replace("Infinity", "1e400"))
    report = validate_model_dir(tmp_path)
    assert report.config.hidden_size is None and report.config.architecture is None
    assert report.n_params_from_config is None


def test_shard_index_cannot_point_outside_the_model_dir(tmp_path: Path) -> None:
    root = tmp_path / "m"
    root.mkdir()
    (root / "config.json").write_text("{}")
    outside = tmp_path / "outside.safetensors"
    _with_header(outside, {"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4)
    weight_map = {"a": "../outside.safetensors", "b": str(outside), "c": "../../etc/passwd"}
    (root / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    report = validate_model_dir(root)
    outside_problems = [p for p in report.problems if "outside the model directory" in p]
    assert len(outside_problems) == 3
    assert report.weights_bytes == 0 and report.shards == []  # nothing outside was read


def test_escape_sequences_from_config_are_not_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["X\x1b]0;pwned\x07"]}))
    _code, out = cli(capsys, "model", "validate", str(tmp_path))
    assert "\x1b" not in out and "\x07" not in out
