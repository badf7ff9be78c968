"""The Select the wizard uses takes its label before its line has composed (the order a loaded
machine produced in CI, which raised NoMatches out of the App), and shows it once mounted."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.widgets import Select

from widgets.steady_select import SteadyCurrent, SteadySelect


async def test_a_label_told_before_the_line_composed_is_shown_once_it_mounts() -> None:
    early = SteadyCurrent("pick one")
    early.update("cosine")  # Textual's SelectCurrent raises NoMatches('#label') here

    class Host(App[None]):
        def compose(self) -> ComposeResult:
            yield early

    async with Host().run_test() as pilot:
        await pilot.pause()
        assert "cosine" in str(early.query_one("#label").render())
        assert early.has_value


async def test_the_steady_select_behaves_as_textuals() -> None:
    class Host(App[None]):
        def compose(self) -> ComposeResult:
            yield SteadySelect([("linear", "linear"), ("cosine", "cosine")], value="cosine",
                               allow_blank=False, id="s")  # fmt: skip

    async with Host().run_test() as pilot:
        select = pilot.app.query_one("#s", Select)
        await pilot.pause()
        assert select.value == "cosine"
        assert "cosine" in str(select.query_one(SteadyCurrent).query_one("#label").render())
        select.value = "linear"
        await pilot.pause()
        assert "linear" in str(select.query_one(SteadyCurrent).query_one("#label").render())
