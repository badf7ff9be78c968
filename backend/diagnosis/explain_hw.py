"""What the hardware, kernel-fault, file-system and network findings name, in plain words.

Split from ``explain.py`` because the GPU's events need a table: NVIDIA's Xid catalogue gives
each number a meaning and an action, and a finding that names the number should say both
(the catalogue is "Xid Errors" in NVIDIA's deployment documentation, docs.nvidia.com/deploy).
"""

from __future__ import annotations

import re
from typing import Any

from backend.diagnosis.signatures_hw import network_target, xid_numbers
from backend.i18n import N_, _

# The numbers a training run meets most, with the catalogue's meaning and action.
XID_MEANING: dict[int, str] = {
    13: N_(
        "Graphics Engine Exception: usually the program's own kernel faulted (an out-of-range "
        "access); the hardware only when it repeats under different programs"
    ),
    31: N_(
        "GPU memory page fault: a kernel touched an address it does not own, usually the "
        "program (an illegal memory access), rarely the driver or the hardware"
    ),
    43: N_(
        "GPU stopped processing: the program's work was stopped after a fault, usually the "
        "program's, not the hardware's"
    ),
    45: N_(
        "Preemptive cleanup after earlier errors or a killed process: a consequence; look at "
        "the event before it"
    ),
    48: N_(
        "Double-bit ECC error: an uncorrectable memory error; reset the GPU, and if it comes "
        "back the card is failing"
    ),
    61: N_("Internal micro-controller breakpoint: reset the GPU"),
    62: N_("Internal micro-controller halt: reset the GPU (or reboot the node)"),
    63: N_(
        "ECC page retirement or row remapping recorded: a bad memory row was retired; a GPU "
        "reset applies it, frequent ones mean failing memory"
    ),
    64: N_(
        "ECC page retirement or row remapping failed: the bad row could not be recorded; drain "
        "the node and contact the provider"
    ),
    74: N_(
        "NVLink error: a link between GPUs failed; `nvidia-smi nvlink -e` shows its counters; "
        "reset the GPUs, and contact the provider if it repeats"
    ),
    79: N_(
        "GPU has fallen off the bus: it stopped answering on PCIe (power, heat, a riser or a "
        "failing card); reboot the node, and drain it if it happens again"
    ),
    92: N_("High single-bit ECC error rate: corrected errors, but many: the memory is degrading"),
    94: N_(
        "Contained ECC error: an uncorrectable error confined to one program; restart it, and "
        "reset the GPU to remap the row"
    ),
    95: N_(
        "Uncontained ECC error: an uncorrectable error that may have hit every program on the "
        "GPU; drain the node and reset the GPU"
    ),
    119: N_("GSP RPC timeout: the GPU's system processor stopped answering; reset the GPU"),
    120: N_("GSP error: the GPU's system processor failed; reset the GPU or reboot the node"),
}

# ATen's assertion texts (the signature's "assertion" group) and what each bounds.
_ASSERTIONS: tuple[tuple[str, str], ...] = (
    (
        "srcSelect",
        N_(
            "`srcIndex < srcSelectSize` is index_select's check, the embedding lookup: a token "
            "id is not below the number of embedding rows (the tokenizer has more tokens than "
            "the model's vocabulary)."
        ),
    ),
    (
        "n_classes",
        N_(
            "`t >= 0 && t < n_classes` is nll_loss's check: a label is outside [0, number of "
            "classes); for a language model, a label id >= the vocabulary size that is not -100."
        ),
    ),
    (
        "index out of bounds",
        N_(
            "`index out of bounds` is advanced indexing's check: an index (often a token or "
            "position id) is past the size of the tensor it indexes."
        ),
    ),
)


def _then(text: str, sentence: str) -> str:
    return text + ("" if not text or text.endswith(("。", "！", "？", "）")) else " ") + sentence


def hw_detail(category: str, groups: dict[str, Any]) -> str:
    """The sentence(s) the matched text adds to the category's explanation ("" when none)."""
    every = str(groups.get("all", "")) + "\n" + str(groups.get("match", ""))
    if category == "gpu_hardware":
        parts = []
        for number in xid_numbers(every)[:4]:
            meaning = XID_MEANING.get(number)
            parts.append(
                _("Xid {number}: {meaning}.").format(number=number, meaning=_(meaning))
                if meaning
                else _("Xid {number}: see NVIDIA's Xid catalogue.").format(number=number)
            )
        if not parts:
            return ""
        return _("NVIDIA's Xid catalogue says:") + " " + " ".join(parts)
    if category == "illegal_memory_access":
        text = ""
        for key, sentence in _ASSERTIONS:
            if key in every:
                text = _then(text, _(sentence))
        return text
    if category == "io_error":
        path = groups.get("path") or groups.get("path2")
        device = groups.get("dev") or groups.get("dev2")
        if path:
            return _("The failing path: {path}.").format(path=path)
        if device:
            return _("The failing device: {device}.").format(device=device)
        return ""
    if category == "network_unreachable":
        target = network_target(every)
        if target is None:
            return ""
        host, port = target
        where = f"{host}:{port}" if port else host
        return _("The host that did not answer: {host}.").format(host=where)
    return ""


def mentions_nvlink(text: str) -> bool:
    """An NVLink (or NVSwitch) failure among the matched lines."""
    return bool(re.search(r"NVLink|NVLINK|Nvlink|SXid|\): 74\b", text))
