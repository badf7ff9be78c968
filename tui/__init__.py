"""trainwiz: tui."""

from tui.cjk_wrap import install as _install_cjk_wrap

_install_cjk_wrap()  # the wizard and the CLI both wrap Chinese by character (tui/cjk_wrap.py)
