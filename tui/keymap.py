"""Keys: the defaults, and the user's keymap file that remaps them by binding id.

Binding ids follow one scheme, ``screen.action`` (``app.next_step``, ``checks.rerun``,
``model.fetch``, ``confirm.yes`` …). The keymap file is YAML, one ``id: keys`` per line, keys
in Textual's names, several separated by commas::

    # ~/.config/trainwiz/keymap.yaml   (or $TRAINWIZ_HOME/keymap.yaml when that is set)
    app.next_step: f9
    app.previous_step: f8,ctrl+b
    model.fetch: ctrl+f

Next/Back default to alt+→ / alt+← because ctrl+b is tmux's prefix and ctrl+a screen's, on
exactly the SSH sessions trainwiz is for; ctrl+n / ctrl+b stay as aliases (tmux passes ctrl+b
through when pressed twice, and ``tmux send-keys C-b`` delivers it directly).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import yaml

NEXT_KEYS = "alt+right,ctrl+n"
PREVIOUS_KEYS = "alt+left,ctrl+b"
KEYMAP_FILE = "keymap.yaml"


def keymap_path() -> Path:
    """$TRAINWIZ_HOME/keymap.yaml when TRAINWIZ_HOME is set, else
    $XDG_CONFIG_HOME/trainwiz/keymap.yaml (~/.config/trainwiz/keymap.yaml)."""
    explicit = os.environ.get("TRAINWIZ_HOME")
    if explicit:
        return Path(explicit).expanduser() / KEYMAP_FILE
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config) / "trainwiz" / KEYMAP_FILE


def binding_ids() -> set[str]:
    """Every binding id the wizard defines (app, step screens, dialogs, widgets)."""
    from textual.binding import Binding

    modules = [
        "tui.app", "screens.checks", "screens.model", "screens.image", "screens.hyperparams",
        "screens.launch", "screens.monitor", "screens.troubleshoot", "screens.replay",
        "screens.preset_picker", "screens.dialogs", "screens.chat", "widgets.log_pane", "screens.runs",
        "screens.queue",
    ]  # fmt: skip
    ids: set[str] = set()
    for name in modules:
        module = importlib.import_module(name)
        for value in vars(module).values():
            for binding in getattr(value, "BINDINGS", None) or []:
                if isinstance(binding, Binding) and binding.id:
                    ids.add(binding.id)
    return ids


def parse_keymap(text: str, origin: str) -> tuple[dict[str, str], list[str]]:
    """``(keymap, problems)``; each problem is ``origin:line:col what: fix``."""
    try:
        root = yaml.compose(text)
    except yaml.YAMLError:
        # One broken line must not throw away the others (and YAML's own mark often names
        # the line after the mistake): read the file line by line, as the format is written.
        return _parse_lines(text, origin)
    if root is None:
        return {}, []
    if not isinstance(root, yaml.MappingNode):
        line = root.start_mark.line + 1
        return {}, [f"{origin}:{line}:1: expected 'binding.id: keys' lines"]
    known = binding_ids()
    keymap: dict[str, str] = {}
    problems: list[str] = []
    for key_node, value_node in root.value:
        where = f"{origin}:{key_node.start_mark.line + 1}:{key_node.start_mark.column + 1}"
        binding_id = str(key_node.value)
        if binding_id not in known:
            close = sorted(i for i in known if i.split(".")[-1] in binding_id)[:3]
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            problems.append(f"{where}: unknown binding id '{binding_id}'{hint}")
            continue
        if not isinstance(value_node, yaml.ScalarNode) or not str(value_node.value).strip():
            problems.append(f"{where} {binding_id}: give keys as text, e.g. 'f9' or 'f9,ctrl+n'")
            continue
        keymap[binding_id] = str(value_node.value).replace(" ", "")
    return keymap, problems


def _parse_lines(text: str, origin: str) -> tuple[dict[str, str], list[str]]:
    """``id: keys`` one per line; each bad line is reported at its own line, the rest apply."""
    merged: dict[str, str] = {}
    problems: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        body = line.split("#", 1)[0]
        if not body.strip():
            continue
        try:
            node = yaml.compose(body)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            column = min(mark.column, len(body.rstrip())) + 1 if mark is not None else 1
            problems.append(
                f"{origin}:{number}:{column}: not valid YAML "
                f"({getattr(exc, 'problem', None) or exc}); write 'binding.id: keys'"
            )
            continue
        if not isinstance(node, yaml.MappingNode):
            problems.append(f"{origin}:{number}:1: expected 'binding.id: keys'")
            continue
        keymap, found = parse_keymap(body, origin)
        problems += [_at_line(problem, origin, number) for problem in found]
        merged.update(keymap)
    return merged, problems


def _at_line(problem: str, origin: str, number: int) -> str:
    """A problem found in one line parsed alone names that line of the file."""
    prefix = f"{origin}:1:"
    return f"{origin}:{number}:" + problem[len(prefix) :] if problem.startswith(prefix) else problem


def load_user_keymap(path: Path | None = None) -> tuple[dict[str, str], list[str]]:
    """The user's keymap (empty when there is no file) and any problems in it."""
    target = path or keymap_path()
    try:
        text = target.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}, []
    except OSError as exc:
        return {}, [f"{target}: cannot read the keymap: {exc}"]
    return parse_keymap(text, str(target))
