"""The new paths' categories: wordings no corpus file holds, healthy look-alikes, and fixes
computed against real presets, applied and validated (a fix must give a loadable preset)."""

from __future__ import annotations

import pytest

from backend.diagnosis import Fix, apply_fixes, classify_line, diagnose_text
from backend.diagnosis.fixes_cluster import slurm_minutes, slurm_time
from backend.preset.loader import load_preset
from backend.preset.schema import Preset

# Hand-written in each component's wording (hosts, numbers and names changed on purpose).
LINES = {
    "deepspeed_config": [
        "AssertionError: Check batch related parameters. train_batch_size is not equal to "
        "micro_batch_per_gpu * gradient_acc_step * world_size 256 != 4 * 8 * 4",
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for DeepSpeedZeroConfig",
        "ValueError: ZeRO Offload can only work with DeepSpeed optimizers",
    ],
    "peft_target_modules": [
        "ValueError: Target modules {'Wqkv'} not found in the base model. Please check the "
        "target modules and try again.",
    ],
    "slurm_time_limit": [
        "slurmstepd: error: *** JOB 7 ON gpu-a-3 CANCELLED AT 2026-01-02T03:04:05 DUE TO TIME LIMIT ***",
    ],
    "slurm_error": [
        "srun: error: Unable to allocate resources: Invalid partition name specified",
        "sbatch: error: Batch job submission failed: Invalid account or account/partition "
        "combination specified",
    ],
    "hostname_resolution": [
        "socket.gaierror: [Errno -2] Name or service not known",
        "[W socket.cpp:663] [c10d] The IPv6 network addresses of (gpu-b, 29500) cannot be "
        "retrieved (gai error: -2 - Name or service not known).",
        "ssh: Could not resolve hostname gpu-z: Temporary failure in name resolution",
    ],
    "node_unreachable": [
        "ssh: connect to host 10.1.2.3 port 2222: Connection timed out",
        "Connection to gpu-b port 22 timed out",
        "pdsh@gpu-a: gpu-c: ssh exited with exit code 255",
    ],
    "rendezvous_timeout": [
        "torch.distributed.DistNetworkError: The client socket has timed out after 300s while "
        "trying to connect to (gpu-a, 29400).",
        "[W socket.cpp:601] [c10d] The client socket has failed to connect to gpu-a:29500 "
        "(errno: 111 - Connection refused).",
    ],
    "port_in_use": [
        "ConnectionError: Tried to launch distributed communication on port `29501`, but "
        "another process is utilizing it.",
    ],
    "host_oom": [
        "slurmstepd: error: Detected 3 oom_kill events in StepId=99.0. Some of the step tasks "
        "have been OOM Killed.",
        "train.sh: 行 9: 12345 已杀死               torchrun train.py",
        "srun: error: gpu-c: task 3: Out Of Memory",
    ],
    "loss_nan": [
        "epoch 2/3 step 17/39 loss nan lr 2e-05",
        "epoch: 3451 loss: nan",
        "Loss=nan",
    ],
    "flash_attn_build": [
        "  Building wheel for flash-attn (setup.py) ... error",
    ],
    "nccl": [
        "gpu-b:11:22 [3] transport/net_ib.cc:1700 NCCL WARN NET/IB : Got completion from peer "
        "10.0.0.9<1234> with status=5 opcode=0 len=0 vendor err 249 (Recv)",
        "gpu-b:11:22 [3] misc/socket.cc:50 NCCL WARN socketProgressOpt: Call to recv from "
        "10.0.0.9<4321> failed : Connection reset by peer",
    ],
    "version_mismatch": [
        "ImportError: peft>=0.12.0 is required for a normal functioning of this module, but "
        "found peft==0.10.0.",
        "ImportError: cannot import name 'is_torch_xla_available' from 'transformers'",
        "AttributeError: module 'torch.library' has no attribute 'register_fake'",
    ],
    "chat_template": [
        "ValueError: Cannot use chat template functions because tokenizer.chat_template is not "
        "set and no template argument was passed!",
    ],
}

HEALTHY = [
    # (a step cancelled without a reason is the failure when nothing else failed:
    # test_diagnosis_shapes7 tests it alone and after an OOM kill)
    "srun: error: gpu-c: tasks 0-3: Terminated",
    "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
    "gpu-a:1:2 [0] NCCL INFO NET/IB : No device found.",
    "gpu-a:1:2 [0] misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]",
    "gpu-a:1:2 [0] misc/ibvwrap.cc:212 NCCL WARN Call to ibv_open_device failed",
    "[W socket.cpp:204] [c10d] The hostname of the client socket cannot be retrieved. err=-3",
    "{'loss': 1.2031, 'grad_norm': 0.91, 'learning_rate': 1e-05, 'epoch': 0.4}",
    "Epoch 1, Step 3, Loss: 0.9670:   3%|▎         | 5/144 [00:07<03:42,  1.60s/it]",
    "trainable params: 4194304 || all params: 6742609920 || trainable%: 0.0622",
    "Target modules set from the preset: q_proj, v_proj",
    "Using chat template from tokenizer_config.json",
    "Submitted batch job 4242",
    "Warning: Permanently added 'gpu-b' (ED25519) to the list of known hosts.",
    "Connection to gpu-b closed.",
    "Loading checkpoint shards: 100%|██████████| 3/3 [00:04<00:00,  1.41s/it]",
]


@pytest.mark.parametrize(
    ("category", "line"), [(c, line) for c, lines in LINES.items() for line in lines]
)
def test_wording_gives_its_category_at_error_level(category: str, line: str) -> None:
    top = diagnose_text(line + "\n").top
    assert top is not None and top.category == category and top.severity == "error", top
    flag = classify_line(line)
    assert flag is not None and flag.category == category


@pytest.mark.parametrize("line", HEALTHY)
def test_healthy_look_alike_is_no_error(line: str) -> None:
    assert not diagnose_text(line + "\n").has_error
    flag = classify_line(line)
    assert flag is None or flag.severity != "error"


def test_ninja_failure_is_deepspeeds_only_with_a_deepspeed_frame_before_or_after() -> None:
    ninja = "subprocess.CalledProcessError: Command '['ninja', '-v']' returned non-zero exit status 1.\n"
    after = (
        '  File "/x/deepspeed/runtime/engine.py", line 9, in f\n    optimizer = FusedAdam(params)\n'
    )
    assert diagnose_text(ninja + "\n" * 5 + after).top.category == "deepspeed_op_build"  # type: ignore[union-attr]
    assert diagnose_text(ninja + "\n" * 5 + after).top.line == 1  # type: ignore[union-attr]
    assert diagnose_text(after + ninja).top.category == "deepspeed_op_build"  # type: ignore[union-attr]
    assert diagnose_text(ninja).top is None  # some other extension: not DeepSpeed's
    assert diagnose_text(ninja + "\n" * 200 + after).top is None  # too far apart


def test_slurm_times_parse_and_double() -> None:
    assert [slurm_minutes(t) for t in ("90", "12:00:00", "1-12:00", "2-00:00:00", "5:30")] == [
        90, 720, 2160, 2880, 5,
    ]  # fmt: skip
    assert slurm_time(2 * 2160) == "3-00:00:00"
    assert slurm_minutes("soon") is None


def _applied(preset: Preset, fix: Fix) -> Preset:
    new = apply_fixes(preset, fix)  # validated: raises on an invalid preset
    for change in fix.changes:
        node: object = new.model_dump(mode="json")
        for key in change.path.split("."):
            node = node[key]  # type: ignore[index]
        assert node == change.value, change
    return new


@pytest.fixture()
def vicuna() -> Preset:
    return load_preset("vicuna-7b-4xa100-40g")


def test_time_limit_fix_doubles_the_slurm_time_and_saves_by_the_clock(vicuna: Preset) -> None:
    preset = vicuna.model_copy(deep=True)
    preset.launch.slurm.time_limit = "12:00:00"
    top = diagnose_text(LINES["slurm_time_limit"][0], preset=preset).top
    assert top is not None
    fix = next(f for f in top.fixes if f.changes and f.changes[0].path == "launch.slurm.time_limit")
    assert _applied(preset, fix).launch.slurm.time_limit == "1-00:00:00"


def test_slurm_refusal_drops_the_refused_partition(vicuna: Preset) -> None:
    preset = vicuna.model_copy(deep=True)
    preset.launch.slurm.partition = "a100x"
    top = diagnose_text(LINES["slurm_error"][0], preset=preset).top
    assert top is not None and top.fixes[0].changes[0].path == "launch.slurm.partition"
    assert _applied(preset, top.fixes[0]).launch.slurm.partition is None


def test_lora_fix_names_the_model_familys_modules() -> None:
    preset = load_preset("vicuna-7b-lora-1x24g").model_copy(deep=True)
    preset.training.lora.lora_target_modules = ["c_attn"]
    top = diagnose_text(LINES["peft_target_modules"][0], preset=preset).top
    assert top is not None
    new = _applied(preset, top.fixes[0])
    assert new.training.lora.lora_target_modules == ["q_proj", "v_proj"]


def test_unreachable_node_fix_drops_that_node_and_waits_longer(vicuna: Preset) -> None:
    data = vicuna.model_dump(mode="json")
    data["launch"].update(
        scheduler="ssh", nnodes=3, nodes=["gpu-a", "me@gpu-b:2222", "gpu-c"], runner="docker"
    )
    preset = Preset.model_validate(data)
    top = diagnose_text(
        "ssh: connect to host gpu-b port 2222: Connection timed out\n", preset=preset
    ).top
    assert top is not None
    drop = next(f for f in top.fixes if any(c.path == "launch.nodes" for c in f.changes))
    assert _applied(preset, drop).launch.nodes == ["gpu-a", "gpu-c"]
    wait = next(
        f for f in top.fixes if any(c.path == "launch.ssh.connect_timeout" for c in f.changes)
    )
    assert (
        _applied(preset, wait).launch.ssh.connect_timeout == 3 * preset.launch.ssh.connect_timeout
    )


def test_gloo_interface_fix_stops_naming_the_missing_interface(vicuna: Preset) -> None:
    preset = vicuna.model_copy(deep=True)
    preset.launch.env = {"GLOO_SOCKET_IFNAME": "ib0", "NCCL_DEBUG": "WARN"}
    top = diagnose_text(
        "RuntimeError: [enforce fail at device.cc:83] ifa != nullptr. Unable to find address for: ib0\n",
        preset=preset,
    ).top
    assert top is not None and top.category == "hostname_resolution"
    assert _applied(preset, top.fixes[0]).launch.env == {"NCCL_DEBUG": "WARN"}


def test_version_fix_installs_the_version_the_message_names(vicuna: Preset) -> None:
    top = diagnose_text(
        "ImportError: Using the `Trainer` with `PyTorch` requires `accelerate>=0.26.0`: Please "
        "run `pip install transformers[torch]` or `pip install accelerate -U`\n",
        preset=vicuna,
    ).top
    assert top is not None and top.category == "version_mismatch"
    new = _applied(vicuna, top.fixes[0])
    assert "accelerate>=0.26.0" in new.environment.extra_packages
    assert not any(p == "accelerate" for p in new.environment.extra_packages)


def test_deepspeed_config_fix_replaces_a_hand_written_config(vicuna: Preset) -> None:
    preset = vicuna.model_copy(deep=True)
    preset.training.deepspeed = "/data/ds_config.json"
    preset.training.fsdp = ""
    top = diagnose_text(LINES["deepspeed_config"][0], preset=preset).top
    assert top is not None
    new = _applied(preset, top.fixes[0])
    assert new.training.deepspeed is None and new.training.zero is not None


def test_ib_transport_failure_offers_sockets(vicuna: Preset) -> None:
    top = diagnose_text(LINES["nccl"][0] + "\n", preset=vicuna).top
    assert top is not None and top.severity == "error"
    assert _applied(vicuna, top.fixes[0]).launch.env["NCCL_IB_DISABLE"] == "1"
