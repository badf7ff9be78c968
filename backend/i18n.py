"""One place for the user's language: gettext catalogs, chosen by --lang, TRAINWIZ_LANG, locale.

English is the source language and the default. Messages are marked with ``_()`` where they are
made (checks, CLI output, the wizard) and ``N_()`` where a constant must be defined before the
language is known (translated later with ``_()`` at display). Field names, flags and commands
inside messages stay as they are: they are what people type. Machine output (``--json``) is
always English so that scripts read the same keys and texts everywhere.

Catalogs live in ``backend/locale/<lang>/LC_MESSAGES/trainwiz.po`` (compiled ``.mo`` beside it);
``scripts/i18n.py`` extracts, compiles and checks them (CI fails on a missing or stale entry).
"""

from __future__ import annotations

import gettext
import os
from collections.abc import Mapping
from pathlib import Path

from backend.errors import BadInput

DOMAIN = "trainwiz"
LOCALE_DIR = Path(__file__).resolve().parent / "locale"
SOURCE_LANGUAGE = "en"
# What a user may type (--lang, TRAINWIZ_LANG, a locale's language part) -> catalog name.
LANGUAGES: dict[str, str] = {
    "en": "en",
    "c": "en",
    "posix": "en",
    "zh": "zh_CN",
    "zh_cn": "zh_CN",
    "zh_hans": "zh_CN",
    "zh_sg": "zh_CN",
}

_translation: gettext.NullTranslations = gettext.NullTranslations()
_language = SOURCE_LANGUAGE


def N_(message: str) -> str:
    """Mark a constant for extraction; translate it with ``_()`` when it is shown."""
    return message


def _(message: str) -> str:
    """The message in the current language (the English text when no translation exists).

    An empty string stays empty (gettext would answer it with the catalog's header)."""
    return _translation.gettext(message) if message else message


def _normalise(value: str) -> str | None:
    """'zh_CN.UTF-8' / 'zh-CN' / 'ZH' -> 'zh_CN'; None when unsupported."""
    base = value.split(".", 1)[0].split("@", 1)[0].replace("-", "_").lower()
    return LANGUAGES.get(base) or LANGUAGES.get(base.split("_", 1)[0] if base else "")


def resolve_language(cli_value: str | None, environ: Mapping[str, str] | None = None) -> str:
    """--lang wins, then TRAINWIZ_LANG, then the locale (LC_ALL, LC_MESSAGES, LANG, LANGUAGE).

    A value the user typed and we cannot honour is an error naming where it came from; a
    locale we have no catalog for simply means English.
    """
    env = os.environ if environ is None else environ
    for source, value in (("--lang", cli_value), ("TRAINWIZ_LANG", env.get("TRAINWIZ_LANG"))):
        if value:
            found = _normalise(value)
            if found is None:
                known = ", ".join(sorted({"en", "zh"}))
                raise BadInput(f"{source} {value!r}: unsupported language (known: {known})")
            return found
    for name in ("LC_ALL", "LC_MESSAGES", "LANG"):
        value = env.get(name)
        if value:
            return _normalise(value) or SOURCE_LANGUAGE
    for part in env.get("LANGUAGE", "").split(":"):
        found = _normalise(part) if part else None
        if found:
            return found
    return SOURCE_LANGUAGE


def set_language(language: str) -> None:
    """Switch every later ``_()`` to ``language`` ('en' or a catalog name such as 'zh_CN')."""
    global _translation, _language
    if language == SOURCE_LANGUAGE:
        _translation, _language = gettext.NullTranslations(), SOURCE_LANGUAGE
        return
    _translation = gettext.translation(DOMAIN, LOCALE_DIR, languages=[language], fallback=True)
    _language = language


def current_language() -> str:
    return _language


def available_languages() -> list[str]:
    """The source language and every language with a compiled catalog."""
    found = sorted(p.parent.parent.name for p in LOCALE_DIR.glob(f"*/LC_MESSAGES/{DOMAIN}.mo"))
    return [SOURCE_LANGUAGE, *found]
