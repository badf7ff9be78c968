"""The command plan: the seed preset reproduces the seed's commands flag for flag."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from backend.plan import build_plan, format_value
from backend.preset import load_preset

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "seed"


def _flags(argv: list[str]) -> dict[str, str]:
    """--name value pairs as a dict; values normalised (0. == 0, 2e-5 == 2e-05)."""
    out: dict[str, str] = {}
    i = 0
    while i < len(argv):
        name = argv[i]
        assert name.startswith("--"), name
        value = argv[i + 1]
        try:
            value = format_value(float(value)) if not value.isalpha() else value
        except ValueError:
            pass
        out[name] = value
        i += 2
    return out


def test_seed_docker_run_is_reproduced_exactly() -> None:
    seed = shlex.split((FIXTURES / "docker_run.txt").read_text())
    plan = build_plan(load_preset("vicuna-13b-v1.3-8xa100"))
    assert plan.step("container").argv == seed


def test_seed_torchrun_is_reproduced_flag_for_flag() -> None:
    seed = shlex.split((FIXTURES / "torchrun.txt").read_text().replace("\\\n", " "))
    train = build_plan(load_preset("vicuna-13b-v1.3-8xa100")).step("train")
    ours = train.argv
    # launcher flags and script in the same order
    assert (
        ours[:4]
        == seed[:4]
        == [
            "torchrun",
            "--nproc_per_node=8",
            "--master_port=20001",
            "fastchat/train/train_mem.py",
        ]
    )
    seed_flags, our_flags = _flags(seed[4:]), _flags(ours[4:])
    assert our_flags == seed_flags
    assert len(seed_flags) == 24  # the seed passes 24 training flags
    # same order as the seed too
    assert list(our_flags) == list(seed_flags)
    # it runs inside the seed's container, in the FastChat clone; without -it: a printed plan
    # run as a script has no terminal (the runner's SDK exec has none either)
    assert train.exec_prefix == ["docker", "exec", "-w", "/app/FastChat", "train-13b"]


def test_docker_sdk_kwargs_match_the_displayed_flags() -> None:
    sdk = build_plan(load_preset("vicuna-13b-v1.3-8xa100")).step("container").docker
    assert sdk is not None
    assert sdk["privileged"] is True
    assert sdk["cap_add"] == ["IPC_LOCK"]
    assert sdk["ulimits"] == [
        {"Name": "memlock", "Soft": -1, "Hard": -1},
        {"Name": "stack", "Soft": 67108864, "Hard": 67108864},
    ]
    assert sdk["volumes"] == ["/data:/app/:rw"]
    assert sdk["network_mode"] == "host" and sdk["ipc_mode"] == "host"
    assert sdk["device_requests"] == [{"Driver": "", "Capabilities": [["gpu"]], "Count": -1}]
    assert sdk["name"] == "train-13b" and sdk["detach"] and sdk["tty"] and sdk["stdin_open"]


def test_seed_in_container_setup_follows_the_seed() -> None:
    plan = build_plan(load_preset("vicuna-13b-v1.3-8xa100"))
    setup = [s.argv for s in plan.group("setup")]
    mirror = ["-i", "https://pypi.tuna.tsinghua.edu.cn/simple"]
    assert ["apt", "install", "-y", "git"] in setup
    assert ["pip", "install", "--upgrade", "pip", "setuptools", "wheel", *mirror] in setup
    assert ["pip", "install", "-e", ".", *mirror] in setup
    assert ["pip", "install", "einops", "deepspeed", "peft", *mirror] in setup
    assert ["pip", "install", "flash-attn", "--no-build-isolation", *mirror] in setup


@pytest.mark.parametrize(
    ("version", "eval_flag", "has_wrap_flag"),
    [
        ("4.31.0", "--evaluation_strategy", True),
        ("4.57.6", "--eval_strategy", True),
        ("5.0.0", "--eval_strategy", False),
    ],
)
def test_flags_follow_the_target_transformers(
    version: str, eval_flag: str, has_wrap_flag: bool
) -> None:
    argv = (
        build_plan(load_preset("vicuna-13b-v1.3-8xa100"), transformers_version=version)
        .step("train")
        .argv
    )
    assert eval_flag in argv
    assert ("--fsdp_transformer_layer_cls_to_wrap" in argv) is has_wrap_flag
    if not has_wrap_flag:
        config = json.loads(argv[argv.index("--fsdp_config") + 1])
        assert config == {"transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"]}


def test_tiny_cpu_runs_on_the_host_with_the_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAINWIZ_HOME", str(tmp_path / "home"))
    run_dir = tmp_path / "run"
    plan = build_plan(load_preset("tiny-cpu"), run_dir=run_dir)
    assert [s.id for s in plan.steps] == [
        "model",
        "train",
    ]  # trains in trainwiz's own environment: no venv to build
    train = plan.step("train")
    assert train.argv[3] == str(run_dir / "entry" / "train_entry.py")
    flags = dict(zip(train.argv[4::2], train.argv[5::2]))
    assert flags["--model_name_or_path"] == str(tmp_path / "home" / "models" / "tiny-llama")
    assert flags["--output_dir"] == str(run_dir / "output")
    assert flags["--data_path"].endswith("presets/data/sample_conversations.json")
    assert train.env["CUDA_VISIBLE_DEVICES"] == ""


def test_display_quotes_every_env_value_and_hides_secrets() -> None:
    from backend.plan.commands import PlanStep

    step = PlanStep(
        id="t",
        group="train",
        title="t",
        argv=["torchrun", "a b", "$(x)"],
        env={"NCCL_DEBUG": "INFO; rm -rf ~", "WANDB_API_KEY": "s3cr3t-value"},
    )
    words = shlex.split(step.display())
    assert words == [
        "NCCL_DEBUG=INFO; rm -rf ~",
        "WANDB_API_KEY=<redacted>",
        "torchrun",
        "a b",
        "$(x)",
    ]


def test_git_lfs_clone_url_cannot_be_read_as_an_option() -> None:
    preset = load_preset("vicuna-13b-v1.3-8xa100")
    step = build_plan(preset).step("model")
    assert step.argv == ["trainwiz", "model", "fetch", preset.name]  # what a launch runs
    assert "git clone -- https://huggingface.co/lmsys/vicuna-13b-v1.3 " in step.note  # by hand


def test_fsdp_on_the_cpu_is_said_to_be_ddp() -> None:
    """accelerate ignores --fsdp without CUDA and trains plain DDP: the plan says so."""
    from backend.plan import build_plan
    from backend.preset import load_preset

    preset = load_preset("tiny-cpu").model_copy(deep=True)
    assert build_plan(preset).step("train").note.find("plain DDP") < 0
    preset.training.fsdp = "full_shard auto_wrap"
    note = build_plan(preset).step("train").note
    assert "training.fsdp 'full_shard auto_wrap' is not applied on launch.device 'cpu'" in note
    assert "plain DDP" in note
