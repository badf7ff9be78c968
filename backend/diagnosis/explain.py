"""Plain-language causes of each failure category, with figures taken from the matched text."""

from __future__ import annotations

import re
from typing import Any

from backend.diagnosis.explain_config import config_detail
from backend.diagnosis.explain_hw import hw_detail
from backend.i18n import N_, _

_EXPLAIN: dict[str, str] = {
    "cuda_oom": N_(
        "A GPU ran out of memory: weights, gradients, optimizer state and activations of "
        "one step did not fit. Activations grow with per-device batch x sequence length."
    ),
    "fsdp_save_oom": N_(
        "Training finished (or reached a checkpoint) and FSDP gathered the full "
        "state dict on the GPU to save it; the gathered copy did not fit. torch 2.0.x clones it on "
        "the GPU even with offload_to_cpu (the seed patched _state_dict_utils.py with .cpu())."
    ),
    "flash_attn_build": N_(
        "pip compiled flash-attn (or another torch CUDA extension) from source and "
        "the build failed: no nvcc in a -runtime image, no torch inside pip's isolated build "
        "environment, too many parallel nvcc jobs for the RAM, or CUDA/torch versions that differ."
    ),
    "flash_attn_runtime": N_(
        "flash-attn is installed but cannot run here: it was built against "
        "another torch (undefined symbol), the GPU is older than Ampere (sm80), or CUDA is too old."
    ),
    "bitsandbytes_cuda": N_(
        "QLoRA's 4-bit weights come from bitsandbytes, and it found no usable "
        "CUDA: a CPU-only bitsandbytes build, a CUDA runtime it cannot load (libcudart), or no GPU "
        "visible. Install a bitsandbytes wheel matching the image's CUDA, or use training.method: "
        "lora."
    ),
    "deepspeed_op_build": N_(
        "DeepSpeed compiles its ops (CPU-Adam for optimizer offload, fused Adam) "
        "on first use with ninja and nvcc; the build failed: no nvcc or CUDA_HOME in a -runtime "
        "image, a CUDA toolkit that differs from torch's, or a missing compiler. Use a -devel image, "
        "or turn training.zero.offload_optimizer off (no CPU-Adam)."
    ),
    "nccl": N_(
        "An NCCL collective failed or hung. This is usually a symptom: another rank died or "
        "stalled (OOM, a crash, a full /dev/shm), or the network between GPUs/nodes misbehaves."
    ),
    "shm": N_(
        "Shared memory (/dev/shm) is too small: docker gives containers 64 MB by default, and "
        "DataLoader workers and NCCL's intra-node transport need far more (bus error, SIGBUS, exit -7)."
    ),
    "rendezvous_timeout": N_(
        "torchrun's c10d rendezvous waited launch.rdzv_timeout seconds for all "
        "launch.nnodes agents and at least one never came: its agent did not start (ssh or Slurm), "
        "it cannot reach node 0's rendezvous port (firewall, wrong address), or it runs with another "
        "nnodes or rendezvous id. The run's status names the node that never joined."
    ),
    "port_in_use": N_(
        "torchrun's rendezvous (TCPStore) could not bind its port: another run, a "
        "stale process or another service holds it."
    ),
    "host_oom": N_(
        "A process got SIGKILL (-9 / 137). Unless someone killed it, that is the kernel's "
        "OOM killer: host RAM ran out (each rank loads the model on CPU; CPU offload and "
        "DataLoader workers add more)."
    ),
    "docker_gpu": N_(
        "Docker has no NVIDIA runtime to give GPUs to the container: the NVIDIA "
        "Container Toolkit is missing or not configured for this daemon."
    ),
    "driver_mismatch": N_(
        "The NVIDIA kernel driver and the user-space libraries differ (driver "
        "upgraded without reboot), or the driver is too old for the CUDA in the image."
    ),
    "container_permission": N_(
        "The host refused a docker run option: raising a resource limit "
        "(e.g. memlock) or granting capabilities/--privileged is not allowed here (rootless docker, "
        "a sandbox, or a restricted daemon)."
    ),
    "tokenization_mismatch": N_(
        "FastChat computed a different token count when masking a "
        "conversation than when tokenizing it, and masked the WHOLE sample: it trains on nothing. "
        "When every sample mismatches the loss is 0. Cause: the tokenizer differs from what the "
        "vicuna template masking assumes (Llama-2/3 tokenizers, transformers >= 5 ignoring use_fast)."
    ),
    "chat_template_mask": N_(
        "The training data cannot be turned into masked samples with this tokenizer: FastChat's "
        "train.py pads with the unk token and masks with Llama-1/2 arithmetic under the vicuna "
        "template, which Llama-3, Qwen, Gemma and most current tokenizers do not fit (no pad or "
        "unk token, no `legacy` attribute, other token counts). The trainwiz entry trains with the "
        "tokenizer's own chat template and computes exact masks from it; when even that "
        "template renders the replies so that they cannot be located exactly in the tokens (it "
        "renders earlier turns differently once later ones exist), the entry refuses the data."
    ),
    "disk_full": N_(
        "A write failed because the disk (or a quota) is full; checkpoints of a 7B model "
        "with optimizer state take tens of GB each."
    ),
    "hub_auth": N_(
        "The Hugging Face Hub refused the download (401/403): the repo is gated (Llama, "
        "Gemma, FLUX…) and the token is missing, belongs to an account not yet approved on the model "
        "page, or went to a mirror that does not forward it; or the repo id is wrong."
    ),
    "cuda_arch": N_(
        "The GPU's architecture is not supported by what runs on it: this torch build "
        "has no kernels for it (a new GPU such as sm_120 needs CUDA 12.8+ torch; old ones were "
        "dropped), or bf16/TF32/flash-attn were asked for on a GPU older than Ampere (sm80)."
    ),
    "loss_nan": N_(
        "The loss (or the gradient norm) became NaN or infinite: training diverged, "
        "usually a learning rate too high, fp16 overflow (the loss scaler gave up), no gradient "
        "clipping, or a sample with nothing to learn. Every step after it is wasted."
    ),
    "deepspeed_config": N_(
        "DeepSpeed checked its JSON config and refused it: the batch sizes disagree "
        "(train_batch_size must equal micro batch x accumulation x world size), a key this "
        "DeepSpeed version does not know, or ZeRO-Offload with an optimizer that is not "
        "DeepSpeed's. trainwiz's own config leaves the sizes 'auto' so they follow the preset."
    ),
    "peft_target_modules": N_(
        "PEFT found none of the LoRA target modules in the model: the names belong to "
        "another model family (Llama's q_proj/v_proj on Bloom, Qwen-1's c_attn on Qwen2), or "
        "the list is empty. training.lora.lora_target_modules must name this model's Linear layers."
    ),
    "slurm_time_limit": N_(
        "Slurm stopped the job when it reached its time limit (sbatch --time, or the "
        "partition's default when none was asked for). Nothing crashed: the run was cut off."
    ),
    "slurm_error": N_(
        "Slurm refused the job or one of its steps: it asked for something this cluster "
        "does not have or does not allow (a GPU gres, partition, account, QoS, time limit or "
        "node size). The request comes from launch.slurm."
    ),
    "hostname_resolution": N_(
        "A host name could not be turned into an address (DNS or /etc/hosts), or gloo/NCCL "
        "were told to use a network interface this host does not have. Every node must resolve "
        "every other node's name, including its own."
    ),
    "node_unreachable": N_(
        "A node did not answer over ssh (timed out, no route, connection refused): it is "
        "down, sshd is not on that port, a firewall drops the connection, or the key is not "
        "accepted. The launcher cannot start the run there."
    ),
    "version_mismatch": N_(
        "The training code needs a package that is not installed, or another version of one "
        "than the one installed: a missing distribution, an explicit requirement "
        "(accelerate>=…), or an ImportError of a name that moved or was removed between "
        "versions."
    ),
    "chat_template": N_(
        "The tokenizer has no chat template, so apply_chat_template cannot format "
        "conversations: base (non-chat) models usually ship none."
    ),
    "gpu_hardware": N_(
        "The GPU itself failed, not the training code: the NVIDIA driver logged an Xid event "
        "(in the kernel log, `dmesg`), the GPU fell off the PCIe bus, its memory had an "
        "uncorrectable ECC error, or an NVLink failed. CUDA calls on that GPU then fail with "
        "whatever error comes next and the other ranks time out in NCCL; a restart on the same "
        "GPU usually fails again until it is reset or replaced."
    ),
    "illegal_memory_access": N_(
        "A CUDA kernel read or wrote memory it does not own, or one of PyTorch's bounds checks "
        "inside a kernel failed (device-side assert). The commonest cause in fine-tuning is a "
        "token id at or above the embedding's size: a tokenizer with more tokens than the "
        "model's vocabulary (tokens added without resize_token_embeddings), or labels outside "
        "it. Others: a fused or compiled kernel (flash-attn, Liger, torch.compile) with a bug or "
        "a shape it does not support. CUDA reports it late, so the traceback may point at a "
        "later call; the other ranks then time out in NCCL."
    ),
    "fp16_unscale": N_(
        "fp16 mixed precision (training.fp16: torch.amp's GradScaler) found trainable weights "
        "that are themselves float16. AMP keeps fp32 master weights and computes in fp16; it "
        "cannot unscale gradients stored in fp16. The model (or its LoRA adapters) was loaded in "
        "float16: torch_dtype=torch.float16, or a transformers version that loads the "
        "checkpoint's own dtype."
    ),
    "io_error": N_(
        "A read or write failed in the storage itself, not for permissions or space: "
        "Input/output error (EIO: a failing disk, or a network file system such as NFS or "
        "Lustre losing its server), Stale file handle (ESTALE: a file on NFS was replaced or "
        "removed while open, or the export was remounted), Read-only file system (EROFS: a "
        "read-only mount, or the kernel remounting a disk read-only after errors)."
    ),
    "network_unreachable": N_(
        "A connection to another host failed in the network: no route to it (errno 101, 113) "
        "or no answer before the connect timeout (errno 110). The name resolved (otherwise "
        "hostname_resolution), but the packets do not arrive: a firewall or security group "
        "drops them, the node has no route to that network, the wrong interface was used, or a "
        "proxy is needed. For downloads (the Hub, PyPI) the machine may have no internet access."
    ),
    "hf_args": N_(
        "The installed transformers does not accept a training argument in the command: "
        "the name changed between versions (evaluation_strategy -> eval_strategy, removed in 4.51; "
        "fsdp_transformer_layer_cls_to_wrap -> fsdp_config in 5.0)."
    ),
}


def gib_from_text(value: str, unit: str) -> float:
    return float(value) * {"KiB": 1 / 1048576, "MiB": 1 / 1024, "GiB": 1.0, "TiB": 1024.0}.get(
        unit, 1.0
    )


def _then(text: str, sentence: str) -> str:
    """Two sentences in a row: English puts a space between them, Chinese (after 。) none."""
    return text + ("" if text.endswith(("。", "！", "？", "）")) else " ") + sentence


def explain(category: str, groups: dict[str, Any], count: int) -> str:
    text = _(_EXPLAIN[category]) if category in _EXPLAIN else ""
    match = str(groups.get("match", ""))
    if category in ("cuda_oom", "fsdp_save_oom"):
        tried = re.search(r"Tried to allocate ([\d.]+) ([KMGT]iB)", match)
        total = re.search(r"([\d.]+) ([KMGT]iB) total capacity", match) or re.search(
            r"total capacit?y of ([\d.]+) ([KMGT]iB)", match
        )
        if tried and total:
            more = _("It asked for {more} GiB more on a {total} GiB GPU.").format(
                more=f"{gib_from_text(*tried.groups()):.2f}",
                total=f"{gib_from_text(*total.groups()):.1f}",
            )
            text = _then(text, more)
    folder = groups.get("path") or groups.get("path2")
    if category == "container_permission" and folder:  # not a docker option: a folder's owner
        text = _(
            "{path} belongs to another user than the one the run runs as (a folder a root "
            "container or `sudo` made, or a bind mount), so the run cannot write there."
        ).format(path=folder)
    sentence, replaces = config_detail(category, groups)
    if sentence:
        text = sentence if replaces else _then(text, sentence)
    detail = hw_detail(category, groups)
    if detail:
        text = _then(text, detail)
    if category == "tokenization_mismatch":
        text = _then(text, _("Seen {count} time(s).").format(count=count))
    if count > 1 and category not in ("tokenization_mismatch",):
        text = _then(text, _("({count} matching lines.)").format(count=count))
    return text
