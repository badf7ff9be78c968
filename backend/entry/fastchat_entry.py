#!/usr/bin/env python
"""FastChat's own training scripts (train.py, train_mem.py, train_lora.py), unchanged, with what
trainwiz must know about the ranks that run them.

torchrun starts this file with the script first: ``fastchat_entry.py <script> <flags...>``; the
script then runs as ``__main__`` with its own flags, as if torchrun had started it. Around it:

- on a machine without CUDA, ``--use_cpu True`` and ``--ddp_backend gloo`` (``ranks.device_args``),
  as trainwiz's entry does: without them HF trains NOT_PARALLEL there, one copy per process;
  and no FSDP flags there (``ranks.without_fsdp_on_cpu``: plain DDP, as the plan says);
- once FastChat has parsed its arguments, before any model loads, the trainer's world size is
  checked against torchrun's (``ranks.trainer_world``): a mismatch writes the ``end`` line with
  reason ``world_size_mismatch`` and the rank exits 4;
- the Trainer FastChat builds gets the train dataset logged per rank (``ranks/rank<R>.samples``),
  the metrics callback (the ``start`` line with the trainer's world size, one ``step`` line per
  optimizer step, the ``end`` line) and, after training, the rank record with its checksum;
- the rank ends through ``ending.finish`` (process group destroyed, threads joined, no teardown);
- one version shim: FastChat saves inside ``FSDP.state_dict_type(trainer.model, ...)`` also when
  FSDP did not wrap the model (DDP, one process), and torch 2.x raises ``KeyError: None`` on that
  context's exit, after the save; on such a model the context is left out.

A sibling of ``train_entry.py`` (copied with it into each run dir; standard library, torch and
transformers; FastChat is the script's own import).
"""

import contextlib
import os
import runpy
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # siblings, as under torchrun
import ending
import guards
import importgc  # before torch: the cyclic GC is paused while the training stack imports
import ranks
import torch
import transformers
import transformers.trainer  # FastChat's script imports the Trainer: here, with the GC paused
from stepmetrics import MetricsCallback, TokenCounter, count_flops_per_token, peak_flops_for

importgc.imported()


def log(*args):
    if ranks.rank() == 0:
        print("[trainwiz-entry]", *args, flush=True)


def shim_fsdp_state_dict_type():
    """``FSDP.state_dict_type`` on a model without an FSDP module: nothing to set (see above)."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    original = FSDP.state_dict_type

    @contextlib.contextmanager
    def state_dict_type(module, *args, **kwargs):
        if not any(isinstance(m, FSDP) for m in module.modules()):
            yield None
            return
        with original(module, *args, **kwargs) as settings:
            yield settings

    FSDP.state_dict_type = staticmethod(state_dict_type)


class Hooks:
    """What this wrapper adds to the Trainer FastChat builds (one per process)."""

    def __init__(self):
        self.metrics_path = os.environ.get("TRAINWIZ_METRICS")
        self.counter = TokenCounter()
        self.parallel = None
        self.trainer = None
        self.samples = None
        self.metrics = MetricsCallback(self.metrics_path, self.counter, {})
        self.started = time.time()

    def install(self):
        hooks = self
        parse = transformers.HfArgumentParser.parse_args_into_dataclasses
        init = transformers.Trainer.__init__
        step = transformers.Trainer.training_step

        def parsed(parser, *args, **kwargs):
            outputs = parse(parser, *args, **kwargs)
            for value in outputs:
                if isinstance(value, transformers.TrainingArguments) and hooks.parallel is None:
                    hooks.parallel = ranks.trainer_world(value, torch)  # raises on a mismatch
                    log(f"world size {hooks.parallel['world_size']} "
                        f"({hooks.parallel['parallel_mode']}, backend {hooks.parallel['dist_backend']})")  # fmt: skip
            return outputs

        def built(trainer, *args, **kwargs):
            data = {"train_dataset": kwargs.get("train_dataset")}
            hooks.samples = ranks.wrap_train_dataset(data, torch) if data["train_dataset"] else None
            if hooks.samples is not None:
                kwargs["train_dataset"] = hooks.samples
            kwargs["callbacks"] = [*(kwargs.get("callbacks") or []), hooks.metrics,
                                   ranks.make_start_callback(transformers, hooks.samples)]  # fmt: skip
            init(trainer, *args, **kwargs)
            hooks.trainer = trainer
            hooks.metrics.start_info.update(hooks.start_info(trainer))

        def counted(trainer, model, inputs, *args, **kwargs):
            hooks.counter.add(inputs)
            return step(trainer, model, inputs, *args, **kwargs)

        transformers.HfArgumentParser.parse_args_into_dataclasses = parsed
        transformers.Trainer.__init__ = built
        transformers.Trainer.training_step = counted

    def start_info(self, trainer):
        model, args = trainer.model, trainer.args
        seq_len = int(getattr(args, "model_max_length", 0) or 0)
        n_params, flops_per_token = count_flops_per_token(model, model.config, seq_len)
        gpu_name = torch.cuda.get_device_name() if torch.cuda.is_available() else None
        return {
            **(self.parallel or {}),
            "entry": "fastchat",
            "script": os.path.basename(sys.argv[0]),
            "n_params": n_params,
            "flops_per_token": flops_per_token,
            "peak_flops": peak_flops_for(gpu_name) if gpu_name else None,
            "gpu_name": gpu_name,
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "seq_len": seq_len,
        }

    def run(self, script):
        """The script as ``__main__``; then the rank record and the ``end`` line. The trainer is
        let go after either, so the process group it holds can end (ending.py)."""
        try:
            self._run(script)
        finally:
            self.trainer = self.samples = None

    def _run(self, script):
        sys.path.insert(0, os.path.dirname(os.path.abspath(script)))  # as python <script> does
        try:
            runpy.run_path(script, run_name="__main__")
        except ranks.WorldSizeMismatch as exc:
            log(str(exc))
            self.metrics.end(train_runtime=0.0, saved_to=None, ok=False, error=str(exc),
                             reason=ranks.REASON)  # fmt: skip
            ranks.meet_before_refusing(torch)
            raise SystemExit(ranks.EXIT_CODE) from None
        except BaseException as exc:
            fields = self.parallel or {}
            ranks.write_rank_record(self.trainer, fields, self.samples, torch, ok=False)
            self.metrics.end(train_runtime=time.time() - self.started, saved_to=None, ok=False,
                             **guards.end_fields(exc))  # fmt: skip
            if isinstance(exc, guards.NonFiniteLoss):
                log(str(exc))
                raise SystemExit(guards.EXIT_CODE) from None
            raise
        ranks.write_rank_record(self.trainer, self.parallel or {}, self.samples, torch, ok=True)
        history = self.trainer.state.log_history if self.trainer is not None else []
        losses = [h["train_loss"] for h in history if "train_loss" in h]
        saved_to = self.trainer.args.output_dir if self.trainer is not None else None
        self.metrics.end(train_runtime=time.time() - self.started, saved_to=saved_to, ok=True,
                         train_loss=losses[-1] if losses else None)  # fmt: skip


def main():
    if len(sys.argv) < 2:
        raise SystemExit("usage: fastchat_entry.py <fastchat script> [flags...]")
    script, flags = sys.argv[1], sys.argv[2:]
    no_fsdp = ranks.without_fsdp_on_cpu(flags, torch)  # the plan's note: DDP on the CPU
    if no_fsdp:
        log(f"no FSDP on the CPU (plain DDP): {' '.join(no_fsdp)} not applied")
    added = ranks.device_args(flags, transformers.TrainingArguments, torch)
    if added:
        log(f"device arguments added: {' '.join(added)}")
    shim_fsdp_state_dict_type()
    hooks = Hooks()
    hooks.install()
    sys.argv = [script, *flags]
    ending.on_sigterm()
    ending.finish(lambda: hooks.run(script), torch, ranks.rank())


if __name__ == "__main__":
    main()
