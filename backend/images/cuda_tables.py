"""The version tables image compatibility is judged by, and the lookups over them.

Each table is one a reader can check against NVIDIA's and Hugging Face's own numbers: the
minimum Linux driver of each CUDA toolkit (CUDA release notes, table 3), the CUDA that first
compiles for each compute capability, and the torch and Python floors each transformers release
declares in its ``dependency_versions_table.py``. Kept apart from the rules (``compat.py``) so a
table update is a data change only.
"""

from __future__ import annotations

import re

# CUDA toolkit -> minimum Linux driver (GA release). A driver runs its own CUDA and every older one.
DRIVER_FOR_CUDA: list[tuple[tuple[int, int], str]] = [
    ((13, 0), "580.65.06"),
    ((12, 9), "575.51.03"),
    ((12, 8), "570.26"),
    ((12, 6), "560.28.03"),
    ((12, 5), "555.42.02"),
    ((12, 4), "550.54.14"),
    ((12, 3), "545.23.06"),
    ((12, 2), "535.54.03"),
    ((12, 1), "530.30.02"),
    ((12, 0), "525.60.13"),
    ((11, 8), "520.61.05"),
    ((11, 7), "515.43.04"),
    ((11, 6), "510.39.01"),
    ((11, 5), "495.29.05"),
    ((11, 4), "470.42.01"),
    ((11, 3), "465.19.01"),
    ((11, 2), "460.27.03"),
    ((11, 1), "455.23"),
    ((11, 0), "450.36.06"),
    ((10, 2), "440.33"),
]
# Minor-version compatibility: an older driver of the same major runs a newer minor toolkit's
# binaries (no PTX JIT), from this driver on.
MINOR_COMPAT_DRIVER: dict[int, str] = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}

# Compute capability (sm) -> (architecture, first CUDA compiling for it, last CUDA supporting it).
ARCHES: list[tuple[int, str, tuple[int, int], tuple[int, int] | None]] = [
    (35, "Kepler", (5, 0), (11, 8)),
    (50, "Maxwell", (6, 0), (12, 9)),
    (60, "Pascal", (8, 0), (12, 9)),
    (70, "Volta", (9, 0), (12, 9)),
    (75, "Turing", (10, 0), None),
    (80, "Ampere", (11, 0), None),
    (86, "Ampere", (11, 1), None),
    (87, "Ampere", (11, 4), None),
    (89, "Ada", (11, 8), None),
    (90, "Hopper", (11, 8), None),
    (100, "Blackwell", (12, 8), None),
    (103, "Blackwell", (12, 9), None),
    (120, "Blackwell", (12, 8), None),
    (121, "Blackwell", (12, 9), None),
]

# transformers release -> the torch it requires (its dependency_versions_table.py), newest first.
TRANSFORMERS_TORCH_FLOOR: list[tuple[tuple[int, int], tuple[int, int]]] = [
    ((4, 56), (2, 2)),
    ((4, 55), (2, 1)),
    ((4, 51), (2, 0)),
    ((4, 36), (1, 10)),
    ((4, 0), (1, 9)),
]
TRANSFORMERS_PYTHON_FLOOR: list[tuple[tuple[int, int], tuple[int, int]]] = [
    ((4, 51), (3, 9)),
    ((4, 0), (3, 8)),
]
FLASH_ATTN_MIN_SM = 80
FLASH_ATTN_MIN_CUDA = (11, 7)


def version_tuple(text: str | None) -> tuple[int, ...]:
    """Leading numeric parts: '2.1.0a0+32f93b1' -> (2, 1, 0); '' or None -> ()."""
    if not text:
        return ()
    match = re.match(r"\d+(?:\.\d+)*", text.strip())
    return tuple(int(p) for p in match.group(0).split(".")) if match else ()


def pinned_version(spec: str | None) -> str | None:
    """The version a pip requirement pins: 'torch==2.11.0 --index-url ...' -> '2.11.0'; None
    when it pins none (a range, a bare name)."""
    pinned = re.search(r"==\s*([0-9][^,;\s]*)", spec or "")
    return pinned.group(1) if pinned else None


def version_text(ver: tuple[int, ...]) -> str:
    """(12, 2) -> '12.2'."""
    return ".".join(str(p) for p in ver)


def max_cuda_for_driver(driver: str) -> str | None:
    """The newest CUDA toolkit a Linux driver runs (535.54.03 -> 12.2; 580.65.06 -> 13.0)."""
    have = version_tuple(driver)
    for cuda, needed in DRIVER_FOR_CUDA:
        if have >= version_tuple(needed):
            return version_text(cuda)
    return None


def driver_for_cuda(cuda: tuple[int, ...]) -> str | None:
    """The minimum Linux driver of a CUDA toolkit (major, minor), None for one not in the table."""
    for toolkit, needed in DRIVER_FOR_CUDA:
        if toolkit == tuple(cuda[:2]):
            return needed
    return None


def arch_for_sm(sm: int) -> tuple[str, tuple[int, int], tuple[int, int] | None] | None:
    """(architecture, first CUDA, last CUDA) of the newest table row at or below ``sm``."""
    best = None
    for entry_sm, name, first, last in ARCHES:
        if entry_sm <= sm:
            best = (name, first, last)
    return best
