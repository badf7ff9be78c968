"""Data parallelism the entry can prove: the device arguments, the world size the trainer really
uses, the sample ids each rank read, each rank's parameter checksum.

A sibling of ``train_entry.py`` (copied with it into each run dir; standard library and torch).

Why each part exists:

- HF ``TrainingArguments`` under torchrun on a machine without CUDA reports ``NOT_PARALLEL`` and
  world size 1 unless ``use_cpu`` (``no_cuda`` before 4.34) is set: every rank then trains its
  own copy of the model on the whole data set. :func:`device_args` sets it (and the gloo backend)
  on the CPU; on CUDA the Trainer's default (NCCL, one GPU per local rank) is already parallel.
- :func:`trainer_world` reads the world size from the trainer's own arguments and refuses to
  train when it differs from what torchrun started (``WORLD_SIZE``): reason
  ``world_size_mismatch`` in the ``end`` line, so the run record names it.
- :class:`SampleLog` appends each index the rank's data loader read to
  ``<run>/ranks/rank<R>.samples`` (``rank<R>.attempt<N>.samples`` for a resumed attempt; one id
  a line, written by the process that reads it, so data-loader workers log too), and :func:`write_rank_record` writes ``rank<R>.json`` with the
  parameter checksum after training: ranks that trained one model hold identical parameters.
- How a rank ends (the process group, on success, failure and stop) is ``ending.py``.
"""

import dataclasses
import datetime
import hashlib
import json
import os
import pathlib

REASON = "world_size_mismatch"
EXIT_CODE = 4
RANKS_DIR = "ranks"


class WorldSizeMismatch(Exception):
    """The trainer would not train data-parallel with the processes torchrun started."""


def launched_world():
    return int(os.environ.get("WORLD_SIZE", "1"))


def rank():
    return int(os.environ.get("RANK", "0"))


def _given(argv, name):
    return any(a == f"--{name}" or a.startswith(f"--{name}=") for a in argv)


FSDP_FLAGS = ("fsdp", "fsdp_config", "fsdp_transformer_layer_cls_to_wrap", "fsdp_min_num_params")


def without_fsdp_on_cpu(argv, torch):
    """On a machine without CUDA: the FSDP flags removed (returned, for the log line).

    accelerate builds its FSDP plugin only for an accelerator device: with ``--fsdp`` on the
    CPU the Trainer stops in ``FullyShardedDataParallelPlugin`` ("no available devices found",
    accelerate 1.15). The plan says such a run trains as plain DDP; this makes it so."""
    if torch.cuda.is_available():
        return []
    removed, out, skip = [], [], False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        name = arg[2:].split("=", 1)[0] if arg.startswith("--") else None
        if name in FSDP_FLAGS:
            if "=" in arg:
                removed.append(arg)
            else:
                removed += argv[i : i + 2]
                skip = True
            continue
        out.append(arg)
    argv[:] = out
    return removed


def device_args(argv, training_arguments, torch):
    """On a machine without CUDA: ``--use_cpu True`` and ``--ddp_backend gloo`` unless given."""
    if torch.cuda.is_available():
        return []
    fields = {f.name for f in dataclasses.fields(training_arguments)}
    added = []
    flag = "use_cpu" if "use_cpu" in fields else "no_cuda"
    if _given(argv, flag):  # the caller's own choice stands (trainer_world then checks it)
        return added
    added += [f"--{flag}", "True"]
    if "ddp_backend" in fields and not _given(argv, "ddp_backend") and launched_world() > 1:
        added += ["--ddp_backend", "gloo"]
    argv += added
    return added


def trainer_world(training_args, torch):
    """The start line's parallel fields, from the trainer's arguments (not the plan).

    Raises WorldSizeMismatch when the trainer's world size is not torchrun's."""
    used = int(training_args.world_size)
    mode = str(getattr(training_args, "parallel_mode", "")).rsplit(".", 1)[-1]
    dist = torch.distributed
    backend = dist.get_backend() if dist.is_available() and dist.is_initialized() else None
    fields = {
        "world_size": used,
        "launched_world_size": launched_world(),
        "parallel_mode": mode.lower() or None,
        "dist_backend": backend,
        "device": "cuda" if torch.cuda.is_available() else "cpu",
    }
    if used != launched_world():
        raise WorldSizeMismatch(
            f"world size mismatch: torchrun started {launched_world()} processes but the trainer "
            f"uses world size {used} (parallel mode {mode or 'unknown'}): each process would train "
            "its own copy on the whole data; on the CPU pass --use_cpu True (trainwiz's entry "
            "does), on GPUs give each process a GPU (launch.nproc_per_node <= GPUs per node)"
        )
    return fields


def meet_before_refusing(torch, seconds=120):
    """Before a rank exits with the refusal: wait until every rank has reached it.

    HF initializes the process group even when it then trains NOT_PARALLEL. The first rank to
    refuse and exit closes its connections while a slower rank may still be inside
    ``init_process_group``: that rank dies with "Connection closed by peer" (exit 1) and
    torchrun names *it* the root cause, hiding the refusal. Met here, every rank exits with
    :data:`EXIT_CODE`. The meeting is on the rendezvous store (each rank sets a key, then waits
    for every rank's), not a barrier of the group: a barrier travels over the very connections
    the slow rank is still making, while the store is torchrun's own and was there before the
    group. Whatever the group's backend: the refusal's own group is accelerate's with none named
    (``get_backend()`` says "undefined", gloo underneath on the CPU), so a meeting kept to
    "gloo" never happened where it was needed (seen on a loaded machine)."""
    dist = torch.distributed
    initialized = dist.is_available() and dist.is_initialized()
    if not initialized or dist.get_world_size() < 2:
        return False
    print(f"[trainwiz-entry] rank {rank()}: waiting for every rank before refusing "
          f"(process group backend {dist.get_backend()})", flush=True)  # fmt: skip
    try:
        store = dist.distributed_c10d._get_default_store()
        store.set(f"trainwiz/refused/{dist.get_rank()}", "1")
        every = [f"trainwiz/refused/{r}" for r in range(dist.get_world_size())]
        store.wait(every, datetime.timedelta(seconds=seconds))
    except Exception:  # a rank that died some other way: refuse anyway, do not hang
        return False
    return True


def ranks_dir():
    metrics = os.environ.get("TRAINWIZ_METRICS")
    return pathlib.Path(metrics).parent / RANKS_DIR if metrics else None


class SampleLog:
    """Wraps the train dataset: every index read while training is logged for this rank."""

    def __init__(self, dataset):
        self.dataset = dataset
        self.active = False
        self.fd = None
        self.pid = None
        folder = ranks_dir()
        attempt = int(os.environ.get("TRAINWIZ_ATTEMPT", "1"))  # a resume reads on in its own
        name = f"rank{rank()}.samples" if attempt == 1 else f"rank{rank()}.attempt{attempt}.samples"
        self.path = folder / name if folder else None
        self.count = 0

    def __len__(self):
        return len(self.dataset)

    def __getattr__(self, name):  # raw_data, rows, lengths...: the dataset's own
        if name == "dataset":
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def start(self):
        self.active = self.path is not None
        if self.active:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def __getitem__(self, index):
        item = self.dataset[index]
        if self.active:
            if self.fd is None or self.pid != os.getpid():  # a data-loader worker: its own fd
                self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
                self.pid = os.getpid()
            os.write(self.fd, f"{int(index)}\n".encode())
            self.count += 1
        return item


def wrap_train_dataset(data_module, torch):
    """``data_module`` with its train dataset logged; an iterable dataset stays as it is."""
    dataset = data_module.get("train_dataset")
    if dataset is None or isinstance(dataset, torch.utils.data.IterableDataset):
        return None
    logged = SampleLog(dataset)
    data_module["train_dataset"] = logged
    return logged


def param_checksum(model, torch):
    """sha256 over every parameter's bytes in name order, and their float64 sum."""
    digest = hashlib.sha256()
    total = 0.0
    for name, param in sorted(model.named_parameters(), key=lambda item: item[0]):
        data = param.detach().to("cpu").contiguous()
        digest.update(name.encode())
        digest.update(data.view(torch.uint8).numpy().tobytes() if data.numel() else b"")
        total += float(data.double().sum()) if data.numel() else 0.0
    return digest.hexdigest(), total


def write_rank_record(trainer, fields, samples, torch, ok):
    """``ranks/rank<R>.json``: what this rank trained with, read and ended holding."""
    folder = ranks_dir()
    if folder is None:
        return
    folder.mkdir(parents=True, exist_ok=True)
    record = {"rank": rank(), "ok": ok, **fields}
    record["samples_read"] = samples.count if samples is not None else None
    record["optimizer_steps"] = int(trainer.state.global_step) if trainer is not None else None
    if trainer is not None and ok:
        # FSDP / ZeRO-3 hold a shard on each rank: its checksum is this rank's part only.
        zero3 = getattr(getattr(trainer, "accelerator", None), "state", None)
        zero3 = getattr(getattr(zero3, "deepspeed_plugin", None), "zero_stage", 0) == 3
        record["params_sharded"] = bool(getattr(trainer, "is_fsdp_enabled", False) or zero3)
        record["param_sha256"], record["param_sum"] = param_checksum(trainer.model, torch)
    path = folder / f"rank{rank()}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record), encoding="utf-8")
    os.replace(tmp, path)


def make_start_callback(transformers, samples):
    """Sample ids are logged from the first training step on (not the sampler's length pass)."""

    class SampleLogStart(transformers.TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            if samples is not None:
                samples.start()

    return SampleLogStart()
