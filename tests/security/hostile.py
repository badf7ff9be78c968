"""Hostile values for every field of the preset schema, found by walking the pydantic models.

Nothing here lists field names: a field another change adds to ``backend/preset/schema.py`` is
tried automatically. Text fields (``str``, ``list[str]``, ``dict[str, str]`` keys and values,
``dict[str, Any]``) get shell, quoting, control-character and size attacks whose payload, if it
ever runs, creates a marker file with shell builtins only (so it shows even with an empty PATH).
Numeric fields get values past any sane bound.
"""

from __future__ import annotations

import copy
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel

from backend.preset.schema import Preset

MARK = "INJECTED_"


def _payloads() -> dict[str, str]:
    """name -> hostile text; each would write MARK<name> in the cwd if a shell ran it."""
    m = MARK
    return {
        "newline": f"x\necho > {m}newline",
        "semicolon": f"x; echo > {m}semicolon",
        "dollar_paren": f"$(echo > {m}dollar_paren)",
        "backticks": f"`echo > {m}backticks`",
        "single_quote": f"x'; echo > {m}single_quote; '",
        "double_quote": f'x"; echo > {m}double_quote; "',
        "nul": f"x\x00echo > {m}nul",
        "carriage_return": f"x\recho > {m}carriage_return",
        "escape_osc": "x\x1b]0;pwned\x07",
        "option": f"--upload-pack=echo > {m}option",
        "ampersand_glob": f"* & echo > {m}ampersand_glob &",
        "non_utf8": "caf\udce9",  # a non-UTF-8 byte as Python decodes it (surrogateescape)
        "ten_mb": "a" * (10 * 1024 * 1024),
    }


PAYLOADS = _payloads()
NUMBERS: dict[str, Any] = {
    "huge": 10**30,
    "very_negative": -(10**30),
    "minus_100": -100,
    "nan": float("nan"),
    "inf": float("inf"),
}


def _strip_optional(annotation: Any) -> Any:
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        return args[0] if len(args) == 1 else annotation
    return annotation


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


@dataclass(frozen=True)
class Slot:
    """Where a hostile value goes: a path of keys/indexes; ``kind`` says how to place it."""

    path: tuple[str | int, ...]
    kind: Literal["value", "item", "dict_key", "dict_value", "number"]

    def dotted(self) -> str:
        return (
            ".".join(str(p) for p in self.path)
            + {
                "value": "",
                "item": "[0]",
                "dict_key": "{key}",
                "dict_value": "{value}",
                "number": "",
            }[self.kind]
        )


def slots(model: type[BaseModel] = Preset, prefix: tuple[str | int, ...] = ()) -> Iterator[Slot]:
    """Every text and number slot of ``model``, recursing into sub-models and lists of them."""
    for name, field in model.model_fields.items():
        annotation = _strip_optional(field.annotation)
        origin = get_origin(annotation)
        path = (*prefix, name)
        if origin is Literal or annotation is bool:
            continue
        if annotation is str:
            yield Slot(path, "value")
        elif annotation in (int, float):
            yield Slot(path, "number")
        elif _is_model(annotation):
            yield from slots(annotation, path)
        elif origin is list:
            (item,) = get_args(annotation)
            if item is str:
                yield Slot(path, "item")
            elif _is_model(item):
                yield from slots(item, (*path, 0))
        elif origin is dict:
            yield Slot(path, "dict_key")
            yield Slot(path, "dict_value")
        elif annotation is typing.Any:
            yield Slot(path, "value")


def place(base: dict[str, Any], slot: Slot, value: Any) -> dict[str, Any] | None:
    """A deep copy of ``base`` with ``value`` at ``slot`` (None when the base lacks the parent)."""
    data = copy.deepcopy(base)
    node: Any = data
    for part in slot.path[:-1]:
        if isinstance(part, int):
            if not isinstance(node, list) or len(node) <= part:
                return None
            node = node[part]
        else:
            node = node.setdefault(part, {})
    last = slot.path[-1]
    if isinstance(node, list):
        return None
    if slot.kind in ("value", "number"):
        node[last] = value
    elif slot.kind == "item":
        node[last] = [value]
    elif slot.kind == "dict_key":
        node[last] = {value: "1"}
    else:
        # NCCL_DEBUG is shown in plans (not a secret), so the value is really printed and quoted.
        node[last] = {"NCCL_DEBUG": value, "A": value}
    return data


def _common() -> dict[str, Any]:
    return {
        "schema": 1,
        "name": "hostile",
        "training": {"data_path": "/data/d.json", "output_dir": "/data/out"},
    }


# Several shapes of preset, so that every field is used by some step of some plan.
BASES: dict[str, dict[str, Any]] = {
    "hf-docker-image": {
        **_common(),
        "model": {"source": "hf", "repo": "acme/m", "dir": "/data/m", "endpoint": "https://h.co"},
        "container": {
            "name": "c1",
            "volumes": [{"host": "/data", "container": "/data"}],
            "ulimits": [{"name": "memlock", "value": "-1"}],
            "env": {"NCCL_DEBUG": "INFO"},
            "network": "host",
            "ipc": "host",
            "shm_size": "16g",
            "workdir": "/app",
            "cap_add": ["SYS_PTRACE"],
        },
        "launch": {"env": {"NCCL_DEBUG": "INFO"}, "workdir": "/app", "master_addr": "10.0.0.1"},
    },
    "lfs-docker-in-container": {
        **_common(),
        "model": {"source": "git_lfs", "git_url": "https://h.co/acme/m", "dir": "/data/m"},
        "environment": {
            "mode": "in_container",
            "pip_index_url": "https://pypi.example/simple",
            "pip_extra_index_urls": ["https://extra.example/simple"],
            "pip_trusted_hosts": ["pypi.example"],
            "apt_packages": ["git"],
            "extra_packages": ["einops"],
            "fastchat": {"source": "editable", "path": "/app/FastChat"},
            "flash_attn": {"install": "always", "index_url": "https://fa.example/simple"},
            "fsdp_state_dict_patch": True,
        },
        "container": {"name": "c2", "volumes": [{"host": "/data", "container": "/data"}]},
        "launch": {"entry": "fastchat-train-mem", "workdir": "/app/FastChat"},
        "training": {
            "data_path": "/data/d.json",
            "output_dir": "/data/out",
            "fsdp": "full_shard auto_wrap",
            "fsdp_transformer_layer_cls_to_wrap": "LlamaDecoderLayer",
            "fsdp_config": {"backward_prefetch": "backward_pre"},
            "lr_scheduler_type": "cosine",
            "report_to": "none",
            "eval_data_path": "/data/e.json",
            "cache_dir": "/data/cache",
            "deepspeed": "/data/ds.json",
            "model_name_or_path": "/data/m",
            "optim": "adamw_torch",
        },
    },
    "local-host": {
        **_common(),
        "model": {"source": "local", "dir": "/data/m"},
        "environment": {"venv": "/opt/venv", "torch_spec": "torch==2.5.1"},
        "launch": {"runner": "host", "env": {"NCCL_DEBUG": "INFO"}, "script": "train.py"},
    },
    "tiny-host-cpu": {
        **_common(),
        "model": {"source": "tiny", "dir": "/data/tiny"},
        "launch": {"runner": "host", "device": "cpu"},
    },
}


def cases() -> Iterator[tuple[str, Slot, str, Any, dict[str, Any]]]:
    """(base name, slot, payload name, payload, preset data) for every text slot and payload."""
    all_slots = list(slots())
    for base_name, base in BASES.items():
        for slot in all_slots:
            if slot.kind == "number":
                continue
            for payload_name, payload in PAYLOADS.items():
                if payload_name == "ten_mb" and base_name != "hf-docker-image":
                    continue  # 85 ms to validate each: once per slot is enough
                data = place(base, slot, payload)
                if data is not None:
                    yield base_name, slot, payload_name, payload, data
