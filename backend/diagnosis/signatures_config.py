"""Signatures of configuration checks that refuse a run before (or at) its first step, and of a
few more wordings of failures whose category already exists.

Same conventions as ``signatures.py``: each pattern quotes the shape of the message its
component prints, with numbers, names, paths and values as patterns; the source of each is
named beside it. Named groups tell ``explain_config.py`` which check refused the run, so the
explanation says what the evidence in the log is.
"""

from __future__ import annotations

import re

from backend.diagnosis.sigbase import Marker, Signature
from backend.diagnosis.sigbase import sig as _sig
from backend.i18n import N_

# Python's comparison and arithmetic TypeErrors (Objects/object.c, Objects/abstract.c):
# "'>' not supported between instances of 'str' and 'float'", "unsupported operand type(s) for
# *: 'str' and 'int'". One side a string where DeepSpeed expects a number.
_NUM = r"(?:int|float)"
_STR_VS_NUMBER = (
    r"'[<>]=?' not supported between instances of (?:'str' and '" + _NUM + r"'|'" + _NUM
    + r"' and 'str')"
    r"|unsupported operand type\(s\) for \S{1,3}: (?:'str' and '" + _NUM + r"'|'" + _NUM
    + r"' and 'str')"
)  # fmt: skip

DEEPSPEED_CONFIG: tuple[Signature, ...] = (
    # DeepSpeed's runtime/config.py: _batch_assertion ("Micro batch size per gpu: {n} has to be
    # greater than 0", likewise "Train batch size" and "Gradient accumulation steps") and
    # _do_error_check ("DeepSpeedConfig: {key} is not defined", "Maximum supported ZeRO stage").
    _sig(
        "deepspeed_config",
        "error",
        N_("DeepSpeed rejected its config: a batch size is not positive"),
        r"(?P<ds_size>Train batch size|Micro batch size per gpu|Gradient accumulation steps):"
        r" -?\w+ has to be greater than 0"
        r"|DeepSpeedConfig: (?P<ds_undefined>\w+) is not defined"
        r"|DeepSpeedConfig: Maximum supported ZeRO stage is \d+",
        (
            "Train batch size",
            "Micro batch size",
            "Gradient accumulation steps",
            "DeepSpeedConfig: ",
        ),
    ),
    # transformers' integrations/deepspeed.py (transformers/deepspeed.py before 4.31),
    # HfTrainerDeepSpeedConfig.trainer_config_finalize: "Please correct the following DeepSpeed
    # config values that mismatch TrainingArguments values:\n- ds {key}={v} vs hf {key}={v}".
    _sig(
        "deepspeed_config",
        "error",
        N_("The DeepSpeed config disagrees with the training arguments"),
        r"(?P<ds_hf>Please correct the following DeepSpeed config values that mismatch"
        r" TrainingArguments)",
        ("Please correct the following DeepSpeed",),
    ),
    # accelerate's utils/dataclasses.py, DeepSpeedPlugin.__post_init__ (reached from
    # TrainingArguments with deepspeed=...): no "zero_optimization" section in the config.
    _sig(
        "deepspeed_config",
        "error",
        N_("The DeepSpeed config has no zero_optimization section"),
        r"(?P<ds_zero>Please specify the ZeRO optimization config in the DeepSpeed config)",
        ("Please specify the ZeRO",),
    ),
    # A string compared with (or multiplied by) a number inside DeepSpeed's runtime: a config
    # value left as a string, typically "auto", which only the HF Trainer's integration fills in.
    _sig(
        "deepspeed_config",
        "error",
        N_("A DeepSpeed config value is a string where a number is needed ('auto'?)"),
        r"TypeError: (?P<ds_auto>" + _STR_VS_NUMBER + r")",
        ("TypeError: ",),
        needs=("ds_runtime", 12),
    ),
)

HF_ARGS: tuple[Signature, ...] = (
    # transformers' training_args.py, TrainingArguments.__post_init__: "--load_best_model_at_end
    # requires the save and eval strategy to match, but found\n- Evaluation strategy: {e}\n- Save
    # strategy: {s}" (and, for steps, "requires the saving steps to be a multiple of the
    # evaluation steps").
    _sig(
        "hf_args",
        "error",
        N_("load_best_model_at_end needs matching save and eval strategies"),
        r"(?P<best>load_best_model_at_end requires the (?:save and eval strategy to match"
        r"|saving steps to be a multiple of the evaluation steps))",
        ("load_best_model_at_end requires",),
    ),
    # A traceback cut before its last line ends on the raise in hf_argparser.py's
    # parse_args_into_dataclasses, whose source line Python prints under the frame: the
    # f-string still holds the variable's name ({remaining_args}), not the arguments.
    _sig(
        "hf_args",
        "error",
        N_("transformers rejected a training argument"),
        r"raise ValueError\(\s*f[\"'](?:Some specified )?(?:arguments|keys) are not used by the"
        r" HfArgumentParser: \{(?P<argvar>\w+)\}",
        ("HfArgumentParser",),
    ),
)

TEMPLATE_ERRORS: tuple[Signature, ...] = (
    # A chat template refusing the conversation: the templates models ship in
    # tokenizer_config.json (Llama-2, Mistral, Gemma...) call raise_exception("Conversation roles
    # must alternate user/assistant/user/assistant/...", "System role not supported"), which
    # transformers' utils/chat_template_utils.py raises as jinja2.exceptions.TemplateError.
    _sig(
        "chat_template",
        "error",
        N_("The chat template refused the conversation"),
        r"jinja2\.exceptions\.TemplateError: (?P<tmpl>[^\n]{1,200})"
        r"|(?:TemplateError: )?(?P<tmpl2>(?:After the optional system message, c|C)onversation"
        r" roles must alternate [\w/.]+|System role not supported)",
        ("TemplateError", "onversation roles must alternate", "System role not supported"),
    ),
)

MORE: tuple[Signature, ...] = (
    # NCCL's CUDACHECK (src/include/checks.h): WARN("Cuda failure %d '%s'", err,
    # cudaGetErrorString(err)); cudaErrorMemoryAllocation is "out of memory".
    _sig(
        "cuda_oom",
        "error",
        N_("CUDA out of memory (inside NCCL)"),
        r"(?P<nccl_oom>Cuda failure \d+ 'out of memory')",
        ("Cuda failure",),
    ),
    # NCCL's shmutils.cc: WARN("Error while attaching to shared memory segment %s (size %zu),
    # error: %s (%d)"). ENOENT: the peer's segment is not there (a peer gone, another IPC
    # namespace, an NCCL bug); a full /dev/shm fails creating a segment instead (shm).
    _sig(
        "nccl",
        "error",
        N_("NCCL could not attach to a peer's shared-memory segment"),
        r"NCCL WARN (?P<nccl_attach>Error while attaching to shared memory segment \S+"
        r".{0,80}?No such file or directory)",
        ("NCCL WARN",),
    ),
    # torch's PyTorchStreamWriter (caffe2/serialize/inline_container.cc): TORCH_CHECK(file_stream_,
    # "File ", file_name, " cannot be opened.") when torch.save cannot create the checkpoint file;
    # under a save frame, with no errno to say otherwise, a full disk is the usual cause.
    _sig(
        "disk_full",
        "error",
        N_("torch.save could not create the checkpoint file"),
        r"File (?P<ckpt>\S+) cannot be opened\.",
        ("cannot be opened",),
        needs=("save", 30),
    ),
    # HF Trainer's log_metrics (transformers/trainer_pt_utils.py): print(f"  {key: <{k_width}} =
    # {value:>{v_width}}") after "***** eval metrics *****": the key padded to the longest one.
    # (One space on each side is the free-form loss signature's "loss = nan".)
    _sig(
        "loss_nan",
        "error",
        N_("The loss became NaN/inf"),
        r"^\s*(?:\w+_)?loss {2} *= +(?:nan|-?inf)\s*$",
        ("loss  ",),
    ),
    # The shell's error for a file it cannot read or run (bash's error.c: "bash: PATH:
    # strerror"): a startup file on a bind mount the container's user does not own.
    _sig(
        "container_permission",
        "error",
        N_("A file the container's shell reads is not readable"),
        r"\b(?:ba|z|da|k)?sh: (?:line \d+: )?(?P<path>/[^:\n]+): Permission denied",
        ("Permission denied",),
    ),
)

# pip's InstallationSubprocessError (pip/_internal/exceptions.py): "× {command_description} did
# not run successfully." for a PEP 517 hook ("Getting requirements to build wheel", "Preparing
# metadata (pyproject.toml)", "Building wheel for X (pyproject.toml)"), while flash-attn is the
# package pip collected just before: its build failed, whichever hook it was.
FLASH_PIP: tuple[Signature, ...] = (
    _sig(
        "flash_attn_build",
        "error",
        N_("flash-attn failed to build"),
        r"(?:Getting requirements to build (?:wheel|editable)|Preparing (?:editable )?metadata"
        r" \(pyproject\.toml\)|Building (?:wheel|editable) for \S+ \(pyproject\.toml\))"
        r" did not run successfully",
        (
            "Getting requirements",
            "Preparing metadata",
            "Preparing editable",
            "Building wheel",
            "Building editable",
        ),
        needs=("flash_pip", 40),
    ),
)

CONFIG_MARKERS: tuple[Marker, ...] = (
    # A traceback frame inside DeepSpeed's runtime (engine.py, config.py, zero/...); keyed on
    # the frame's 'File "' like the save marker (a frame is a candidate line already).
    Marker(
        "ds_runtime",
        re.compile(r"File \"[^\"]*deepspeed[/\\]runtime[/\\][^\"]*\.py\", line \d+"),
        ('File "',),
    ),
    # pip collecting flash-attn (its sdist): a build hook failing next is flash-attn's.
    Marker(
        "flash_pip",
        re.compile(r"Collecting flash[-_]attn|Building wheel for flash[-_]attn"),
        ("Collecting flash", "Building wheel"),
    ),
)
