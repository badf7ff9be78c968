"""Line breaking for Chinese in Rich and Textual: a break may fall between any two CJK
characters, never before a closing mark (，。）…) nor after an opening one (（“).

Both wrap text by "words" split at whitespace (``rich._wrap.re_word``, used by Rich's
``Text.wrap`` and Textual's ``Content``). Chinese has no spaces, so a whole sentence counts as one
word: after "GPU " it jumps to the next line, leaving "GPU" alone, and is then chopped at the
edge. ``install()`` swaps in a word pattern where each CJK character (with the punctuation that
must stay beside it) is a word of its own; any run without CJK matches exactly as before, so
English wraps as it always did.
"""

from __future__ import annotations

import re

import rich._wrap

CJK = "\u2e80-\u2fff\u3040-\u30ff\u3100-\u312f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
OPEN = "\uff08\u300a\u300c\u300e\u201c\u2018\u3010"  # （《「『“‘【
CLOSE = "\uff0c\u3002\u3001\uff1b\uff1a\uff01\uff1f\uff09\u300b\u300d\u300f\u201d\u2019\u2026\u3011"
# ASCII brackets and punctuation beside a CJK character keep to it too: "(已就绪：跳过)" must not
# leave its ")" alone at the start of the next line. (Without CJK nothing changes.)
OPEN += r"\(\[\{"
CLOSE += r"\)\]\},.;:!?%"
# A CJK character with its marks, or a run without CJK up to the next one (so a run of Latin
# text is exactly Rich's own "\S+" word).
WORD = re.compile(rf"\s*(?:[{OPEN}]*[{CJK}][{CLOSE}]*|[^\s{CJK}]+?(?=[{OPEN}]*[{CJK}]|\s|$))\s*")


def install() -> None:
    """Make Rich (and Textual, which wraps through Rich) break Chinese text by character."""
    rich._wrap.re_word = WORD
