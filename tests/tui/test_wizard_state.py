"""Pilot tests: one preset state, keys and keymap, palette, GPU planning, confirmations, layout."""

from __future__ import annotations

from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import pytest

from backend.preset import load_preset
from backend.steps import STEP_IDS
from tests.waiting import pilot_until
from tui.app import TrainwizApp
from tui.keymap import binding_ids, keymap_path, parse_keymap


def where(app: TrainwizApp) -> str:
    """The step and screen shown, the focused widget and the last notifications."""
    notes = [str(n.message) for n in app._notifications][-3:]
    return (
        f"step {app.current_step!r}, screen {type(app.screen).__name__}, "
        f"focus {app.focused!r}, notifications {notes}"
    )


async def until(
    pilot: Any,
    condition: Callable[[], object],
    what: str,
    seen: Callable[[], object] | None = None,
) -> None:
    """``pilot_until`` (a loaded 2-core machine is slow); by default a time-out says where the
    app is (``where``)."""
    app = pilot.app
    await pilot_until(pilot, condition, what=what, timeout=30, seen=seen or (lambda: where(app)))


async def visit(pilot: Any, app: TrainwizApp, step_id: str) -> None:
    assert app.goto_step(step_id)
    await until(
        pilot,
        lambda: app.current_step == step_id and app.screen.is_mounted,
        f"the {step_id} step shown and mounted",
    )


async def opened(pilot: Any, app: TrainwizApp) -> None:
    """Wait for the step the app opens on (Hyperparameters) to be shown and mounted."""
    await until(
        pilot,
        lambda: app.current_step == "hyperparams" and app.screen.is_mounted,
        "the Hyperparameters step shown and mounted",
    )


def footer_keys(app: TrainwizApp) -> set[str]:
    return {k.description for k in app.screen.query("FooterKey")}  # type: ignore[attr-defined]


def said(app: TrainwizApp, text: str, besides: Collection[str] = ()) -> bool:
    """A notification (other than those in ``besides``, by identity) says ``text``."""
    return any(text in str(n.message) for n in app._notifications if n.identity not in besides)


def _app(name: str = "tiny-cpu", **kwargs: Any) -> TrainwizApp:
    return TrainwizApp(load_preset(name), name, start_step="hyperparams", **kwargs)


async def test_every_step_shows_the_preset_after_a_change() -> None:
    """A change made on one step (here: an edit on the form) is what every step then shows."""
    app = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        for step_id in STEP_IDS:  # every step built before the change
            await visit(pilot, app, step_id)
        await visit(pilot, app, "hyperparams")
        batch = app.preset.training.model_copy(update={"gradient_accumulation_steps": 3})
        app.propose_preset(app.preset.model_copy(update={"training": batch}))
        assert app.sub_title == "preset: tiny-cpu (edited)"
        await visit(pilot, app, "launch")
        plan_text = app.screen.query_one("#launch-plan-text")
        await until(
            pilot,
            lambda: "--gradient_accumulation_steps 3" in str(plan_text.render()),
            "the plan to use the edited accumulation",
            lambda: str(plan_text.render()),
        )
        await visit(pilot, app, "hyperparams")
        field: Any = app.screen.query_one("#hp-gradient-accumulation-steps")
        await until(
            pilot,
            lambda: getattr(field.editor, "value", None) == "3",
            "the form to show the edited accumulation",
            lambda: getattr(field.editor, "value", None),
        )
        # opening a preset replaces it everywhere, and says so
        app.set_preset(load_preset("vicuna-13b-v1.3-8xa100"), "vicuna-13b-v1.3-8xa100")
        await visit(pilot, app, "launch")
        summary = app.screen.query_one("#launch-summary")
        await until(
            pilot,
            lambda: "vicuna-13b-v1.3-8xa100" in str(summary.render()),
            "the Launch step to show the opened preset",
            lambda: str(summary.render()),
        )
        assert app.sub_title == "preset: vicuna-13b-v1.3-8xa100"


async def test_a_gpu_preset_is_planned_and_tuned_on_a_machine_without_its_gpu() -> None:
    """`trainwiz --gpu a100`: the form, the memory plan and Tune work on this CPU machine."""
    app = _app("vicuna-13b-v1.3-8xa100", plan_gpu="a100")
    async with app.run_test(size=(120, 40)) as pilot:
        await opened(pilot, app)
        screen: Any = app.screen
        memory = screen.query_one("#hp-memory")
        await until(
            pilot,
            lambda: "A100" in str(memory.render()),
            "the memory plan for the A100",
            lambda: str(memory.render()),
        )
        assert "GiB" in str(memory.render())
        before = app.preset
        screen.action_tune()
        await until(
            pilot,
            lambda: "Tune:" in str(screen.query_one("#hp-tune-result").render()),
            "Tune's result",
            lambda: str(screen.query_one("#hp-tune-result").render()),
        )
        assert app.preset != before
        assert app.sub_title.endswith("(edited)")


async def test_tune_on_a_cpu_preset_says_why_not_instead_of_asking_for_a_gpu() -> None:
    app = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        await opened(pilot, app)
        screen: Any = app.screen
        screen.query_one("#hp-gpu").value = "a100"
        await until(
            pilot,
            lambda: screen.gpu is not None and "A100" in str(screen.gpu),
            "the A100 to be chosen for planning",
            lambda: screen.gpu,
        )
        before = {n.identity for n in app._notifications}
        screen.action_tune()
        await until(pilot, lambda: said(app, "", besides=before), "Tune to say why not")
        shown = " ".join(str(n.message) for n in app._notifications)
        assert "trains on the CPU (launch.device: cpu)" in shown
        assert "Tune needs a GPU and the model's shape" not in shown


async def test_an_invalid_field_is_not_left_silently() -> None:
    app = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        await opened(pilot, app)
        screen: Any = app.screen
        screen.focus_field("learning_rate")
        await pilot.press("end", "ctrl+u", "a", "b", "c")
        await until(pilot, lambda: "learning_rate" in screen.invalid, "abc to be rejected")
        await pilot.press("ctrl+n")
        await until(pilot, lambda: said(app, "learning_rate:"), "Next to be refused, saying why")
        assert app.current_step == "hyperparams"
        shown = " ".join(str(n.message) for n in app._notifications)
        assert "learning_rate:" in shown
        refusals = {n.identity for n in app._notifications}
        await pilot.press("alt+left")  # Back too: the typed value would be lost
        await until(
            pilot,
            lambda: said(app, "learning_rate:", besides=refusals),
            "Back to be refused, saying why",
        )
        assert app.current_step == "hyperparams"
        await pilot.press("ctrl+u", "0", "full_stop", "0", "1")
        await until(pilot, lambda: not screen.invalid, "0.01 to be taken", lambda: screen.invalid)
        await pilot.press("alt+right")
        await until(pilot, lambda: app.current_step == "launch", "Next to open Launch")
        assert app.preset.training.learning_rate == 0.01


async def test_next_and_back_keys_avoid_the_tmux_and_screen_prefixes() -> None:
    app = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        await opened(pilot, app)
        keys = {b.id: b.key for b in app.BINDINGS if hasattr(b, "id")}  # type: ignore[union-attr]
        for binding_id in ("app.next_step", "app.previous_step"):
            first = keys[binding_id].split(",")[0]
            assert first not in ("ctrl+b", "ctrl+a")
        await pilot.press("alt+right")
        await until(pilot, lambda: app.current_step == "launch", "alt+right to open Launch")
        await pilot.press("alt+left")
        await until(pilot, lambda: app.current_step == "hyperparams", "alt+left to go back")
        await pilot.press("ctrl+n")  # the old keys stay as aliases
        await until(pilot, lambda: app.current_step == "launch", "ctrl+n to open Launch")
        await pilot.press("ctrl+b")
        await until(pilot, lambda: app.current_step == "hyperparams", "ctrl+b to go back")


async def test_a_keymap_file_remaps_next_by_binding_id(tmp_path: Path) -> None:
    path = keymap_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("app.next_step: f9\napp.previous_step: f8\n")
    app = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        await opened(pilot, app)
        await pilot.press("f9")
        await until(pilot, lambda: app.current_step == "launch", "f9 (the keymap's Next)")
        await pilot.press("alt+right")  # replaced, not added
        await pilot.pause()  # the key was handled in press(): a move would have happened now
        assert app.current_step == "launch"
        await pilot.press("f8")
        await until(pilot, lambda: app.current_step == "hyperparams", "f8 (the keymap's Back)")


def test_keymap_problems_name_the_line_and_the_known_ids() -> None:
    keymap, problems = parse_keymap("app.next_step: f9\napp.nxt: f2\nmodel.fetch: [1]\n", "k.yaml")
    assert keymap == {"app.next_step": "f9"}
    assert problems[0].startswith("k.yaml:2:1: unknown binding id 'app.nxt'")
    assert problems[1].startswith("k.yaml:3:1 model.fetch: give keys as text")
    _, broken = parse_keymap("a: [\n", "k.yaml")
    assert broken[0].startswith("k.yaml:") and "not valid YAML" in broken[0]


def test_binding_ids_follow_one_scheme() -> None:
    ids = binding_ids()
    assert {"app.next_step", "checks.rerun", "model.fetch", "image.build", "launch.start",
            "hyperparams.tune", "monitor.zoom", "confirm.yes"} <= ids  # fmt: skip
    for binding_id in ids:
        screen, _, action = binding_id.partition(".")
        assert screen and action and "." not in action, binding_id


async def test_the_palette_lists_trainwiz_commands_before_anything_is_typed() -> None:
    from textual.command import CommandPalette

    app = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        await opened(pilot, app)
        await pilot.press("ctrl+p")
        await until(pilot, lambda: isinstance(app.screen, CommandPalette), "the palette")
        palette = app.screen
        options = palette.query_one("CommandList")

        def prompts() -> str:
            return " ".join(str(o.prompt) for o in options.options)  # type: ignore[attr-defined]

        await until(
            pilot, lambda: "Go to step 1: Checks" in prompts(), "the palette's entries", prompts
        )
        assert "Open preset" in prompts() and "Run all steps" in prompts()


async def test_run_all_asks_first_and_says_what_and_where() -> None:
    from screens.dialogs import ConfirmDialog

    app = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        await opened(pilot, app)
        await pilot.press("ctrl+r")
        await until(pilot, lambda: isinstance(app.screen, ConfirmDialog), "Run all's question")
        body = str(app.screen.query_one("#confirm-summary").render())
        assert "What runs" in body and "Where" in body and "runs" in body
        await pilot.press("n")
        await until(
            pilot,
            lambda: app.current_step == "hyperparams" and app.screen.is_current,
            "n to close the question",
        )
        assert app.current_run is None


async def test_the_host_image_step_speaks_of_the_venv_and_build_asks_first() -> None:
    from screens.dialogs import ConfirmDialog

    app = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        await visit(pilot, app, "image")
        host = app.screen.query_one("#image-host")
        await until(
            pilot,
            lambda: "Python venv" in str(host.render()),
            "the Image step to speak of the venv",
            lambda: str(host.render()),
        )
        assert "CUDA image" in str(host.render())  # "no CUDA image is used"
        # where it says Launch trains is the torchrun of the launch's own plan
        from backend.runs.spec import plan_spec

        await until(
            pilot,
            lambda: "training venv ready" in str(host.render()),
            "the Image step to check the training venv",
            lambda: str(host.render()),
        )
        shown = "".join(str(host.render()).split())
        assert "".join(f"training venv ready: {plan_spec(app.preset).torchrun}".split()) in shown
        assert "trainwiz's own environment" in str(host.render())
        assert not app.screen.query_one("#image-main").display  # no image table at all
        await pilot.press("b")
        await until(pilot, lambda: isinstance(app.screen, ConfirmDialog), "the build's question")
        body = str(app.screen.query_one("#confirm-summary").render())
        assert "venv" in body and "environment.venv" in body
        await pilot.press("escape")


@pytest.mark.parametrize("step_id", STEP_IDS)
async def test_at_80x24_the_step_bar_names_the_current_step_and_the_footer_keeps_nav(
    step_id: str,
) -> None:
    app = _app()
    async with app.run_test(size=(80, 24)) as pilot:
        await visit(pilot, app, step_id)
        title = {"hyperparams": "Params"}.get(step_id, step_id.capitalize())
        await until(
            pilot,
            lambda: (
                title in str(app.screen.query_one("#steps").render())
                and {"Next", "Back", "Quit"} <= footer_keys(app)
            ),
            f"the step bar to name {title} and the footer to show Next, Back, Quit",
            lambda: (str(app.screen.query_one("#steps").render()), footer_keys(app)),
        )
        bar = str(app.screen.query_one("#steps").render())
        assert title in bar
        keys = footer_keys(app)
        assert {"Next", "Back", "Quit"} <= keys, keys


def test_only_this_users_env_image_is_suggested() -> None:
    """Another preset's (or user's) trainwiz-env image on a shared daemon is never suggested."""
    from backend.images.catalog import ImageInfo
    from backend.images.compat import Compatibility
    from backend.images.host import HostGpus
    from backend.images.survey import ImageRow, ImagesSurvey, own_suggestion

    def row(ref: str) -> ImageRow:
        return ImageRow(ImageInfo(ref=ref, local=True), Compatibility(ref, "compatible"))

    rows = [row("trainwiz-env:someone-else"), row("trainwiz-env:mine"), row("pytorch/pytorch:2")]
    survey = ImagesSurvey("p", HostGpus(), rows, "trainwiz-env:someone-else")
    assert own_suggestion(survey, "trainwiz-env:mine") == "trainwiz-env:mine"
    assert own_suggestion(survey, None) == "pytorch/pytorch:2"
    survey.suggestion = "pytorch/pytorch:2"
    assert own_suggestion(survey, "trainwiz-env:mine") == "pytorch/pytorch:2"


async def test_the_host_image_step_footer_has_no_pull() -> None:
    app = _app()
    async with app.run_test(size=(80, 24)) as pilot:
        await visit(pilot, app, "image")
        await until(
            pilot,
            lambda: "Python venv" in str(app.screen.query_one("#image-host").render()),
            "the Image step to speak of the venv",
            lambda: str(app.screen.query_one("#image-host").render()),
        )
        await until(
            pilot,
            lambda: "Build" in footer_keys(app),
            "the footer to show the Image step's keys",
            lambda: footer_keys(app),
        )
        shown = footer_keys(app)
        assert "Build" in shown and "Pull" not in shown and "Use" not in shown
