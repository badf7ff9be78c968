"""Signatures of the LoRA/QLoRA/ZeRO stacks (docs/lora.md): bitsandbytes' CUDA setup and
DeepSpeed's just-in-time op builds.

Written from what the components print (bitsandbytes' ``CUDA SETUP:`` lines and its
RuntimeError, torch's ``cpp_extension`` loader, DeepSpeed's op builder and its CPU-Adam), checked
against the logs in tests/fixtures/logcorpus2/{bitsandbytes_cuda,deepspeed_op_build}. They sit
before the flash-attn build signatures: a compiler failure inside a DeepSpeed op build (the
``ds_op_build`` marker within the lines before) is DeepSpeed's, not flash-attn's.
"""

from __future__ import annotations

import re

from backend.diagnosis.sigbase import Marker, Signature
from backend.diagnosis.sigbase import sig as _sig
from backend.i18n import N_

DS_OPS = r"(?:cpu_adam|fused_adam|cpu_adagrad|cpu_lion|fused_lamb|fused_lion|utils|async_io|transformer_inference|quantizer)"
# How far back a DeepSpeed op build may have started for a compiler error to be its own.
DS_BUILD_LOOKBACK = 400

METHODS: tuple[Signature, ...] = (
    # --- bitsandbytes (QLoRA's 4-bit weights) ---
    _sig(
        "bitsandbytes_cuda",
        "error",
        "bitsandbytes' CUDA setup failed (QLoRA)",
        r"CUDA Setup failed despite GPU being available|CUDA SETUP: Setup Failed!"
        r"|CUDA SETUP: CUDA detection failed",
        ("CUDA Setup failed", "Setup Failed!", "CUDA detection failed"),
    ),
    _sig(
        "bitsandbytes_cuda",
        "error",
        "bitsandbytes has no CUDA binary here and fell back to its CPU library",
        r"Required library version not found: libbitsandbytes_cuda\d*|Defaulting to "
        r"libbitsandbytes_cpu|bitsandbytes was compiled without GPU support|libbitsandbytes_cpu\.so",
        ("Required library version not found", "libbitsandbytes_cpu", "compiled without GPU"),
    ),
    _sig(
        "bitsandbytes_cuda",
        "error",
        "bitsandbytes cannot find the CUDA runtime (libcudart.so)",
        r"main CUDA runtime library was not detected|No libcudart\.so found",
        ("runtime library was not detected", "No libcudart.so"),
    ),
    _sig(
        "bitsandbytes_cuda",
        "warning",
        "bitsandbytes did not find libcudart.so on the library path",
        r"libcudart\.so not found in any environmental path"
        r"|bitsandbytes.{0,80}(?:CUDA SETUP|cannot find|not find).{0,40}(?:libcudart|CUDA)",
        ("libcudart.so not found", "bitsandbytes"),
    ),
    # --- DeepSpeed's ops (CPU-Adam for optimizer offload, fused Adam), built on first use ---
    _sig(
        "deepspeed_op_build",
        "error",
        "ninja is not installed: DeepSpeed cannot build its ops",
        r"Ninja is required to load C\+\+ extensions",
        ("Ninja is required",),
    ),
    _sig(
        "deepspeed_op_build",
        "error",
        "CUDA_HOME is not set: DeepSpeed cannot compile its CUDA ops",
        r"CUDA_HOME does not exist, unable to compile CUDA op",
        ("CUDA_HOME does not exist",),
    ),
    _sig(
        "deepspeed_op_build",
        "error",
        "DeepSpeed could not build one of its CUDA/C++ ops",
        r"Error building extension '" + DS_OPS + r"'"
        r"|DeepSpeed Op Builder: Installed CUDA version",
        ("Error building extension", "Op Builder"),
    ),
    _sig(
        "deepspeed_op_build",
        "error",
        "DeepSpeed's CPU-Adam op was never built (optimizer offload)",
        r"'DeepSpeedCPUAdam' object has no attribute 'ds_opt_adam'"
        r"|torch_extensions/\S*/" + DS_OPS + r"/\S+\.so: cannot open shared object file",
        ("ds_opt_adam", "torch_extensions"),
    ),
    _sig(
        "deepspeed_op_build",
        "error",
        "A DeepSpeed op failed to compile",
        r"ninja: build stopped: subcommand failed|^FAILED: \S+\.o\b"
        r"|fatal error: \S+\.h: No such file or directory|Error compiling objects for extension"
        r"|CUDA_HOME environment variable is not set|nvcc: (?:command )?not found|nvcc was not found",
        (
            "ninja: build stopped",
            "FAILED: ",
            "fatal error",
            "Error compiling objects",
            "CUDA_HOME",
            "vcc: ",
            "vcc was not",
        ),
        needs=("ds_op_build", DS_BUILD_LOOKBACK),
    ),
    # A frame of torch's ninja runner (cpp_extension's private ``_run_ninja_build``, in a plain
    # or a notebook traceback) exists only when the build raised: under a DeepSpeed op build
    # that is the op failing to compile, even where the log shows neither ninja's command nor
    # the compiler's error.
    _sig(
        "deepspeed_op_build",
        "error",
        "A DeepSpeed op failed to compile",
        r"\b_run_ninja_build\b",
        ("_run_ninja_build",),
        needs=("ds_op_build", DS_BUILD_LOOKBACK),
    ),
    _sig(
        "deepspeed_op_build",
        "warning",
        "DeepSpeed's cpu_adam cannot use this CUDA: only CPU ops can be compiled",
        r"cpu_adam cuda is missing or is incompatible with installed torch",
        ("cpu_adam cuda is missing",),
    ),
)

METHOD_MARKERS: tuple[Marker, ...] = (
    # DeepSpeed compiling one of its ops: torch_extensions' build dir, or its sources.
    Marker(
        "ds_op_build",
        re.compile(
            r"Building extension module " + DS_OPS + r"\b|torch_extensions/\S*" + DS_OPS + r"\b"
            r"|deepspeed/ops/(?:csrc|op_builder)/"
        ),
        ("Building extension module", "torch_extensions", "deepspeed/ops/"),
    ),
)


# Building flash-attn (or any torch CUDA extension); after METHODS, whose DeepSpeed op builds
# claim a compiler failure inside them first.
EXTENSION_BUILDS: tuple[Signature, ...] = (
    _sig(
        "flash_attn_build",
        "error",
        N_("flash-attn failed to build"),
        # pip's wording, and uv's ("Failed to build `flash-attn==2.6.3`", "Failed to download and
        # build `…`", older uv "Failed to fetch wheel: …"; uv's docs, troubleshooting/build-failures)
        r"Failed (?:building wheel for|to build|to download and build|to fetch wheel:) `?flash[-_]attn"
        r"|Could not build wheels for flash[-_]attn"
        r"|Building wheel for flash[-_]attn\b[^\n]{0,60}?\.\.\. error",
        (
            "Failed building wheel",
            "Failed to build",
            "Failed to download and build",
            "Failed to fetch wheel",
            "Could not build wheels",
            "Building wheel",
        ),
    ),
    _sig(
        "flash_attn_build",
        "error",
        N_("No CUDA compiler (nvcc) in this image"),
        r"nvcc was not found|nvcc: (?:command )?not found|CUDA_HOME environment variable is not set"
        r"|No CUDA runtime is found|unable to execute '?nvcc'?",
        ("vcc was not", "vcc: ", "CUDA_HOME", "No CUDA runtime", "xecute 'nvcc", "xecute nvcc"),
    ),
    _sig(
        "flash_attn_build",
        "error",
        N_("The compiler ran out of memory"),
        r"Killed signal terminated program (?:cc1plus|cicc|ptxas)|(?:cc1plus|cicc|ptxas).{0,40}Killed",
        ("Killed",),
    ),
    _sig(
        "flash_attn_build",
        "error",
        N_("A CUDA extension failed to compile"),
        r"Error compiling objects for extension|ninja: build stopped: subcommand failed"
        r"|The detected CUDA version \(.*\) mismatches the version that was used to compile PyTorch",
        ("Error compiling objects", "ninja: build stopped", "mismatches the version"),
    ),
    # torch's ninja runner failing while pip builds a wheel (DeepSpeed's own op builds are
    # matched first, by their frames): the extension being built did not compile.
    _sig(
        "flash_attn_build",
        "error",
        N_("A CUDA extension failed to compile"),
        r"Command '\['ninja', '-v'[^\]]*\]' returned non-zero exit status",
        ("'ninja'",),
        near=("pip_build", 60),
    ),
    _sig(
        "flash_attn_build",
        "error",
        N_("pip built flash-attn without a build dependency (torch, wheel…)"),
        r"No module named '?(?:torch|wheel|packaging|psutil|ninja|setuptools)'?(?![\w.])",
        ("No module named",),
        needs=("pip_build", 120),
    ),
)
