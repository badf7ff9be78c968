"""Is a checkpoint whole? Cheap structural checks of its files, before a resume chooses it.

A sibling of ``checkpoints.py`` (copied into each run dir with the entry, imported there as
``checkpoint_verify``; the wizard imports it as ``backend.entry.checkpoint_verify``), standard
library only: the wizard never imports torch, and a check that loaded the tensors would cost as
much as the resume it guards. What it reads is each file's index (a safetensors header, a zip's
central directory, trainer_state.json, DCP's metadata file), never the data: a truncated file
loses its end, which is where its size or its index no longer adds up.
"""

from __future__ import annotations

import json
import os
import re
import zipfile
from pathlib import Path
from typing import Any

STATE_FILE = "trainer_state.json"
SHARD_FOLDER = re.compile(r"^(pytorch_model_fsdp|optimizer)_\d+$")  # accelerate's DCP folders
SHARD_METADATA = ".metadata"  # written by DCP last, after every rank's shard
_TORCH_SUFFIXES = (".bin", ".pt", ".pth")
_ZIP = b"PK\x03\x04"  # torch.save's format since torch 1.6
_PICKLE = b"\x80"  # torch.save's older format: a bare pickle, no index to read
_MAX_HEADER = 100 << 20  # safetensors refuses larger headers itself


def checkpoint_problem(path: Path, step: int) -> str | None:
    """Why ``checkpoint-STEP`` cannot be resumed from (None: it can), from its files alone and
    without reading their data: trainer_state.json parses and names this step; each safetensors
    file is exactly as long as its header says; each torch file (.bin, .pt, .pth) is a non-empty
    zip whose central directory reads (a truncated zip loses it, at its end); each FSDP shard
    folder holds DCP's metadata; no symbolic link leads out of the checkpoint."""
    path = Path(path)
    why = link_problem(path) or _state_problem(path / STATE_FILE, step)
    if why:
        return why
    inside = path.resolve()
    for folder, dirs, files in os.walk(path):
        for name in sorted(dirs + files):
            file = Path(folder, name)
            rel = file.relative_to(path)
            if file.is_symlink() and not file.resolve().is_relative_to(inside):
                return f"{rel} is a symbolic link out of the checkpoint (to {os.readlink(file)})"
            problem = _file_problem(file)
            if problem:
                return f"{rel} {problem}"
    return None


def link_problem(path: Path) -> str | None:
    """A ``checkpoint-N`` that is a symbolic link is never followed: it can lead to another
    run's folder or anywhere else, and a resume would then read (and the Trainer write) there."""
    if path.is_symlink():
        return f"a symbolic link (to {os.readlink(path)}): never followed out of the run"
    return None


def _state_problem(file: Path, step: int) -> str | None:
    try:
        state = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return f"{STATE_FILE} is missing"
    except (OSError, ValueError) as exc:  # ValueError: bad JSON or bytes that are not UTF-8
        return f"{STATE_FILE} does not parse ({type(exc).__name__}: {exc})"
    found = state.get("global_step") if isinstance(state, dict) else None
    if found != step or isinstance(found, bool):
        return f"{STATE_FILE} names global_step {found!r}, not {step}"
    return None


def _file_problem(file: Path) -> str | None:
    """What is wrong with one file or folder of a checkpoint (None: nothing seen)."""
    if file.is_dir():
        if SHARD_FOLDER.match(file.name) and not (file / SHARD_METADATA).is_file():
            return f"has no {SHARD_METADATA} (DCP writes it last, after every shard)"
        return None
    if file.name.endswith(".safetensors"):
        return _safetensors_problem(file)
    if file.suffix in _TORCH_SUFFIXES:
        return _torch_problem(file)
    return None


def _safetensors_problem(file: Path) -> str | None:
    """8-byte little-endian header length, the JSON header, then the data: the file ends
    exactly where the largest ``data_offsets`` end says."""
    try:
        size = file.stat().st_size
        with open(file, "rb") as handle:
            head = handle.read(8)
            length = int.from_bytes(head, "little") if len(head) == 8 else -1
            if length < 0 or length > min(size - 8, _MAX_HEADER):
                return f"is cut short inside its header ({size} bytes)"
            header = json.loads(handle.read(length))
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    except ValueError:
        return "has a header that is not JSON"
    if not isinstance(header, dict):
        return "has a header that is not a JSON object"
    end = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and _offsets_ok(offsets)):
            return f"has no valid data_offsets for tensor {name!r}"
        end = max(end, offsets[1])
    expected = 8 + length + end
    if size < expected:
        return f"is cut short: {size} bytes, its header says {expected}"
    if size > expected:
        return f"is {size} bytes, its header says {expected}: not one safetensors file"
    return None


def _offsets_ok(offsets: list[Any]) -> bool:
    begin, end = offsets
    return (
        all(isinstance(v, int) and not isinstance(v, bool) for v in offsets) and 0 <= begin <= end
    )


def _torch_problem(file: Path) -> str | None:
    """A torch.save file: a zip archive whose central directory (at the file's end) reads and
    whose members lie inside the file. Reads the index only, never the tensors."""
    try:
        size = file.stat().st_size
        if size == 0:
            return "is empty"
        with open(file, "rb") as handle:
            magic = handle.read(4)
        if magic.startswith(_PICKLE):
            return None  # the pre-zip format has no index: nothing cheap to check
        if magic != _ZIP:
            return "is neither a zip archive (torch.save) nor a pickle"
        with zipfile.ZipFile(file) as archive:
            members = archive.infolist()
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    except (zipfile.BadZipFile, ValueError, EOFError) as exc:
        return f"is a zip archive whose central directory does not read ({exc}): cut short?"
    if not members:
        return "is an empty zip archive"
    if any(m.header_offset + m.compress_size > size for m in members):
        return f"is cut short: its zip index names data past its {size} bytes"
    return None
