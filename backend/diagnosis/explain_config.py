"""What the evidence of a config check (``signatures_config.py``) says, for the explanation.

Each named group of those signatures marks which component refused the run; the sentence here
names it, so a finding says why it is this category and not a sibling (a DeepSpeed check, the
HF Trainer's comparison or accelerate's plugin; a chat template's own error, not a missing one).
"""

from __future__ import annotations

from typing import Any

from backend.i18n import N_, _

# group -> (sentence, replaces the category's general explanation)
_DETAIL: dict[str, tuple[str, bool]] = {
    "ds_size": (
        N_(
            "DeepSpeed's batch check found a batch size (or gradient accumulation) that is not a "
            "positive number: usually a value the config computes from others that came out 0."
        ),
        False,
    ),
    "ds_undefined": (
        N_("DeepSpeed's config check found a required batch key missing from the config."),
        False,
    ),
    "ds_hf": (
        N_(
            "Here the Hugging Face Trainer compared the DeepSpeed config with the training "
            "arguments and found values that differ (listed under the message). Values set to "
            "'auto' in the config follow the arguments."
        ),
        False,
    ),
    "ds_zero": (
        N_(
            "Here accelerate's DeepSpeed plugin (created from the training arguments) found no "
            "zero_optimization section in the DeepSpeed config; it needs one, even for stage 0."
        ),
        False,
    ),
    "ds_auto": (
        N_(
            "Here DeepSpeed's own code compared a config value with a number and found a string: "
            "'auto' is filled in only by the Hugging Face Trainer's integration, so a training "
            "loop that calls deepspeed.initialize itself reads it as the text 'auto'."
        ),
        False,
    ),
    "best": (
        N_(
            "TrainingArguments refused the combination: load_best_model_at_end keeps the best "
            "checkpoint by its evaluation, so every evaluation needs a save at the same step: "
            "save_strategy must equal eval_strategy (and save_steps be a multiple of eval_steps)."
        ),
        True,
    ),
    "tmpl": (
        N_(
            "The tokenizer has a chat template, and the template itself raised an error while "
            "formatting a conversation: most templates require the roles to alternate "
            "user/assistant after an optional system message, and some refuse a system role. "
            "The data has two turns of one role in a row, an empty or unknown role, or a system "
            "message this template does not take."
        ),
        True,
    ),
    "ckpt": (
        N_(
            "torch.save could not even create the checkpoint file (PyTorch's stream writer "
            "names no reason). At a checkpoint a full disk is the usual cause; a missing folder "
            "or a read-only mount gives the same message, so check the free space and the folder."
        ),
        True,
    ),
    "nccl_attach": (
        N_(
            "Here NCCL could not attach to the shared-memory segment another rank created: it "
            "does not exist (No such file or directory). A full /dev/shm fails when a segment is "
            "created, not attached, so this is not shm's size: the rank that made it exited, the "
            "ranks do not share an IPC namespace (separate containers without --ipc=host), or "
            "this NCCL version has a bug in it (NCCL_SHM_DISABLE=1, or another NCCL version)."
        ),
        True,
    ),
    "nccl_oom": (
        N_("NCCL allocates its own buffers on the GPU, and here that allocation failed."),
        False,
    ),
    "argvar": (
        N_(
            "The log ends at the raise in transformers' HfArgumentParser "
            "(parse_args_into_dataclasses); the message that lists the arguments is cut off. The "
            "parser was given arguments no dataclass of the script declares: a renamed or "
            "misspelt argument, or a launcher's own argument (or the script's path) passed "
            "through to the script."
        ),
        False,
    ),
    "turn1": (
        N_(
            "Here a one-turn conversation mismatched. FastChat prints the warning only for a "
            "conversation shorter than model_max_length (so not truncation), and one turn has "
            "no turn boundary where an odd sample could differ: the template's or the "
            "tokenizer's token count is off, and every sample of this template is masked the "
            "same way, even where the log shows only one warning."
        ),
        False,
    ),
    "entity": (
        N_(
            "slurmstepd signalled the job (or its step) because Slurm cancelled it: scancel by "
            "a user or an admin, preemption by a job of higher priority, a failed node or a "
            "requeue (the message names the reason when it is not scancel). Nothing in the "
            "training crashed. `sacct -j JOBID -o JobID,State,Reason,End` says which."
        ),
        True,
    ),
    "pubhost": (
        N_(
            "The name that did not resolve is a public host that resolves wherever there is "
            "internet access, so this machine reaches no DNS server or no network at all (an "
            "offline notebook or container, a node without outside access, a proxy not set): "
            "no network rather than a wrong host name (hostname_resolution)."
        ),
        False,
    ),
}
_ALIASES = {"tmpl2": "tmpl", "pubhost2": "pubhost"}


def config_detail(category: str, groups: dict[str, Any]) -> tuple[str, bool]:
    """The sentence for the check that matched (empty if none) and whether it replaces the
    category's general explanation."""
    del category  # the group names are unique to their signature
    for name in groups:
        key = _ALIASES.get(name, name)
        if key in _DETAIL:
            sentence, replaces = _DETAIL[key]
            return _(sentence), replaces
    return "", False
