"""Reading preset YAML safely: bounded size, expansion and depth; duplicate keys refused.

A preset is small (a few KB) and often comes from someone else. PyYAML alone accepts a 1.5 KB
"billion laughs" file whose aliases expand into millions of nodes (validation and error messages
then walk every one of them), recurses once per nesting level (RecursionError), and lets a
repeated key or a second ``training:`` section silently replace the first. So the text is first
checked as bytes (size, encoding), then streamed as parser events — an iterative state machine,
no recursion — counting the expanded node count and depth with aliases resolved, before any node
graph or Python object is built. Every refusal names ``file:line:col``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml

from backend.errors import BadInput
from backend.i18n import _

MAX_PRESET_BYTES = 1024 * 1024  # a real preset is a few KB; 1 MiB is generous
MAX_NODES = 10_000  # expanded (aliases resolved) scalars + collections
MAX_DEPTH = 24  # a preset nests 4 levels; fsdp_config a few more


def decode_preset_bytes(raw: bytes, source: str) -> str:
    """UTF-8 text of a preset file, or BadInput saying what the bytes are instead."""
    if len(raw) > MAX_PRESET_BYTES:
        raise BadInput(
            _(
                "{source}: {count:,} bytes is larger than a preset can be ({MAX_PRESET_BYTES:,} "
                "bytes): is this the right file?"
            ).format(source=source, count=len(raw), MAX_PRESET_BYTES=MAX_PRESET_BYTES)
        )
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")) or (len(raw) > 1 and b"\x00" in raw[:2]):
        raise BadInput(
            _("{source}:1:1: the file is UTF-16: save it as UTF-8").format(source=source)
        )
    if b"\x00" in raw:
        line = raw[: raw.index(b"\x00")].count(b"\n") + 1
        raise BadInput(
            _("{source}:{line}: the file holds NUL bytes (binary, not YAML text)").format(
                source=source, line=line
            )
        )
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        before = raw[: exc.start]
        line = before.count(b"\n") + 1
        col = exc.start - (before.rfind(b"\n") + 1) + 1
        raise BadInput(
            _(
                "{source}:{line}:{col}: byte 0x{value:02x} is not UTF-8: save the file as UTF-8"
            ).format(source=source, line=line, col=col, value=raw[exc.start])
        ) from None


_BRACKET_RUN = re.compile(r"(?:[\[{]\s*)" + "{" + str(MAX_DEPTH + 1) + "}")


def _where(source: str, mark: Any) -> str:
    return f"{source}:{mark.line + 1}:{mark.column + 1}" if mark is not None else source


@dataclass
class _Open:
    """A collection being streamed: the running total when it opened, its deepest level."""

    start_total: int
    level: int
    deepest: int
    anchor: str | None


def check_expansion(text: str, source: str) -> None:
    """Refuse alias bombs and deep nesting from the event stream (linear, bounded memory).

    ``total`` counts values as the constructor would see them, aliases expanded: an alias adds
    the size of its anchor's subtree, so a "billion laughs" is refused after a few events.
    """
    # PyYAML's scanner looks ahead up to 1024 characters for a possible key at every open
    # bracket, so a run of them costs ~1e6 steps before the first event: refuse that run first.
    run = _BRACKET_RUN.search(text)
    if run is not None:
        line = text.count("\n", 0, run.start()) + 1
        col = run.start() - (text.rfind("\n", 0, run.start()) + 1) + 1
        raise BadInput(
            _(
                "{source}:{line}:{col}: nesting deeper than {MAX_DEPTH} levels (brackets opened "
                "in a row): a preset is a few levels of mappings"
            ).format(source=source, line=line, col=col, MAX_DEPTH=MAX_DEPTH)
        )
    anchors: dict[str, tuple[int, int]] = {}  # name -> (expanded size, levels below it)
    stack: list[_Open] = []
    total = 0

    def grow(size: int, depth: int, mark: Any) -> None:
        nonlocal total
        total += size
        if total > MAX_NODES:
            raise BadInput(
                _(
                    "{where}: the YAML expands to more than {MAX_NODES:,} values (anchors/aliases "
                    "nested into each other): write the values out"
                ).format(where=_where(source, mark), MAX_NODES=MAX_NODES)
            )
        if depth > MAX_DEPTH:
            raise BadInput(
                _(
                    "{where}: nesting deeper than {MAX_DEPTH} levels: a preset is a few levels of "
                    "mappings"
                ).format(where=_where(source, mark), MAX_DEPTH=MAX_DEPTH)
            )
        if stack:
            stack[-1].deepest = max(stack[-1].deepest, depth)

    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                level = len(stack) + 1
                before = total
                grow(1, level, event.start_mark)
                stack.append(_Open(before, level, level, event.anchor))
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                done = stack.pop()
                if done.anchor:
                    anchors[done.anchor] = (total - done.start_total, done.deepest - done.level + 1)
                if stack:
                    stack[-1].deepest = max(stack[-1].deepest, done.deepest)
            elif isinstance(event, yaml.ScalarEvent):
                if event.anchor:
                    anchors[event.anchor] = (1, 0)
                grow(1, len(stack), event.start_mark)
            elif isinstance(event, yaml.AliasEvent):
                size, below = anchors.get(event.anchor or "", (1, 0))
                grow(size, len(stack) + below, event.start_mark)
    except yaml.YAMLError:
        return  # the composer reports syntax errors with their position


def check_duplicates(root: yaml.Node | None, source: str) -> None:
    """A key given twice in one mapping (including a second section) is an error, not a merge."""
    problems: list[str] = []
    seen_nodes: set[int] = set()
    todo = [root] if root is not None else []
    while todo:
        node = todo.pop()
        if id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        if isinstance(node, yaml.MappingNode):
            first: dict[str, yaml.Node] = {}
            for key_node, value_node in node.value:
                todo.append(value_node)
                if not isinstance(key_node, yaml.ScalarNode) or key_node.value == "<<":
                    continue
                key = key_node.value
                if key in first:
                    earlier = first[key].start_mark.line + 1
                    what = "section" if isinstance(value_node, yaml.MappingNode) else "key"
                    problems.append(
                        f"{_where(source, key_node.start_mark)} {key}: {what} '{key}' appears "
                        f"again (first at line {earlier}): keep one and merge them"
                    )
                else:
                    first[key] = key_node
        elif isinstance(node, yaml.SequenceNode):
            todo.extend(node.value)
    if problems:
        problems.sort(key=lambda text: [int(p) for p in text.split(" ", 1)[0].split(":")[-2:]])
        raise BadInput(problems)


def compose_and_construct(text: str, source: str) -> tuple[yaml.Node | None, Any]:
    """(node graph for error positions, Python data) after every bound has been checked."""
    check_expansion(text, source)
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        check_duplicates(root, source)
        data = loader.construct_document(root) if root is not None else None
    finally:
        loader.dispose()
    return root, data
