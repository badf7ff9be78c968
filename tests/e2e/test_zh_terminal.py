"""The wizard in Chinese in a real terminal (docs/i18n.md): the language comes from the locale alone
(``LANG=zh_CN.UTF-8``, no --lang), as on a Chinese user's SSH session. The step bar and the
footer are in Chinese, alt+→ moves to the next step (its body in Chinese too), ctrl+q quits."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.e2e.conftest import SIZES, trainwiz_script
from tests.e2e.tmux import TMUX, Pane, trainwiz_env


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_zh_locale_wizard_step_bar_footer_next_and_quit(
    home: Path, tmp_path: Path, size: tuple[int, int]
) -> None:
    if TMUX is None:
        pytest.skip("tmux is not installed (system package 'tmux'; scripts/test.sh installs it)")
    env = trainwiz_env(home) | {"LANG": "zh_CN.UTF-8"}
    pane = Pane([trainwiz_script(), "--preset", "tiny-cpu"], width=size[0], height=size[1],
                env=env, cwd=tmp_path)  # fmt: skip
    try:
        # Checks: the step bar, the Checks status line and the footer, all in Chinese.
        # (the step bar can repaint a moment after the counts line: wait for both)
        screen = pane.wait_for(
            lambda s: bool(re.search(r"\d+ 通过", s)) and "1 检查" in s, timeout=60
        )
        assert "1 检查" in screen and "监控" in screen, screen
        assert "下一步" in screen and "退出" in screen, screen
        assert "Next" not in screen and "Quit" not in screen, screen
        pane.send("M-Right")
        # Model: its own footer (获取 = Fetch), the Checks body gone.
        screen = pane.wait_for(lambda s: "获取" in s and not re.search(r"\d+ 通过", s))
        assert "2 模型" in screen, screen
        pane.send("C-q")
        assert pane.wait_dead(timeout=30) in ("0", "")  # this tmux prints "" for a clean exit
    finally:
        pane.close()
