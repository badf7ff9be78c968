#!/usr/bin/env python
"""Fill translations into a catalog from a Python file defining ``T = {msgid: msgstr}``.

    python scripts/i18n_fill.py zh_CN translations.py

For translators who work in bulk (the catalog stays the source of truth: entries not named in
the file are left as they are).
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

from babel.messages.pofile import read_po, write_po

ROOT = Path(__file__).resolve().parents[1]


def main(language: str, source: str) -> int:
    path = ROOT / "backend" / "locale" / language / "LC_MESSAGES" / "trainwiz.po"
    with path.open("rb") as fh:
        catalog = read_po(fh)
    table: dict[str, str] = runpy.run_path(source)["T"]
    filled = 0
    for message in catalog:
        if message.id and message.id in table:
            message.string = table[message.id]
            message.flags.discard("fuzzy")
            filled += 1
    with path.open("wb") as fh:
        write_po(fh, catalog, width=100)
    print(f"{path.relative_to(ROOT)}: {filled} filled, {len(table) - filled} not in the catalog")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
