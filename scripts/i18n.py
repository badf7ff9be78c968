#!/usr/bin/env python
"""Message catalogs: `update` (extract marked strings into each .po, keeping translations),
`compile` (.po -> .mo), `check` (what CI runs: no missing, fuzzy, stale or placeholder-broken
entry, and every .mo compiled from its .po). Uses Babel, the standard Python i18n toolkit.

    python scripts/i18n.py update|compile|check
"""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path

from babel.messages.catalog import Catalog
from babel.messages.extract import extract_from_dir
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po, write_po

ROOT = Path(__file__).resolve().parents[1]
DOMAIN = "trainwiz"
SOURCES = ("backend", "tui", "screens", "widgets")
KEYWORDS = {"_": None, "N_": None}
PLACEHOLDER = re.compile(r"\{(\w*)[^{}]*\}")


def extract(root: Path = ROOT) -> Catalog:
    template = Catalog(project="trainwiz", domain=DOMAIN)
    for folder in SOURCES:
        if not (root / folder).is_dir():
            continue
        for filename, lineno, message, comments, _ctx in extract_from_dir(
            root / folder,
            method_map=[("**/entry/**.py", "ignore"), ("**.py", "python")],
            keywords=KEYWORDS,
            comment_tags=("i18n:",),
            strip_comment_tags=True,
        ):
            template.add(message, None, [(f"{folder}/{filename}", lineno)], auto_comments=comments)
    return template


def po_paths(root: Path = ROOT) -> list[Path]:
    return sorted((root / "backend" / "locale").glob(f"*/LC_MESSAGES/{DOMAIN}.po"))


def load(path: Path) -> Catalog:
    with path.open("rb") as fh:
        return read_po(fh)


def mo_bytes(catalog: Catalog) -> bytes:
    buffer = io.BytesIO()
    write_mo(buffer, catalog, use_fuzzy=False)
    return buffer.getvalue()


def update() -> None:
    template = extract()
    for path in po_paths():
        catalog = load(path)
        catalog.update(template, no_fuzzy_matching=True)
        catalog.obsolete.clear()
        with path.open("wb") as fh:
            write_po(fh, catalog, width=100, omit_header=False, sort_output=False)
        print(f"updated {path.relative_to(ROOT)}: {len(catalog)} messages")


def compile_all() -> None:
    for path in po_paths():
        path.with_suffix(".mo").write_bytes(mo_bytes(load(path)))
        print(f"compiled {path.with_suffix('.mo').relative_to(ROOT)}")


def problems(root: Path = ROOT) -> list[str]:
    wanted = {m.id for m in extract(root) if m.id}
    found: list[str] = []
    for path in po_paths(root):
        rel = path.relative_to(root)
        catalog = load(path)
        have = {m.id: m for m in catalog if m.id}
        for msgid in sorted(wanted - have.keys()):
            found.append(f"{rel}: missing: {msgid!r} (run scripts/i18n.py update, translate)")
        for msgid in sorted(have.keys() - wanted):
            found.append(f"{rel}: stale (no longer in the code): {msgid!r}")
        for msgid, message in have.items():
            if msgid not in wanted:
                continue
            if not message.string:
                found.append(f"{rel}: untranslated: {msgid!r}")
            elif message.fuzzy:
                found.append(f"{rel}: fuzzy: {msgid!r}")
            elif set(PLACEHOLDER.findall(str(msgid))) != set(
                PLACEHOLDER.findall(str(message.string))
            ):
                found.append(f"{rel}: placeholders differ: {msgid!r}")
        mo = path.with_suffix(".mo")
        if not mo.is_file() or mo.read_bytes() != mo_bytes(catalog):
            found.append(f"{rel}: {mo.name} is not compiled from it (run scripts/i18n.py compile)")
    return found


def main(argv: list[str]) -> int:
    command = argv[1] if len(argv) > 1 else "check"
    if command == "update":
        update()
    elif command == "compile":
        compile_all()
    elif command == "check":
        issues = problems()
        for line in issues:
            print(line, file=sys.stderr)
        print(f"i18n: {len(po_paths())} catalog(s), {len(issues)} problem(s)")
        return 1 if issues else 0
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
