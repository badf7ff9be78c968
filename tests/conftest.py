"""Shared test setup: every test gets its own TRAINWIZ_HOME, so no test sees another's runs.

The suite runs on parallel workers (pytest-xdist, ``--dist loadgroup``): tests that share one
machine-wide service run in that service's group, one at a time on one worker, as they did when
the suite ran serially; every other test is independent (own home, OS-chosen ports, machine-wide
port claims for launches) and goes to whichever worker is free. ``--quick`` keeps the fast tier
for the edit-test loop (docs/testing.md).
"""

from __future__ import annotations

import fcntl
import os
import random
import shutil
import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytest_plugins = ["tests.quick_tier"]
ROOT = Path(__file__).resolve().parents[1]

# A test that drives one of these shared services runs in its group (one worker, one at a time):
# the Docker engine (images are built, tagged and removed by name), the one-node Slurm cluster
# (two CPUs: a second job queues behind the first), and the snapshot tests' fixed home (the
# screens print TRAINWIZ_HOME, so every picture needs the same path).
SERVICE_GROUPS: dict[str, str] = {"docker": "docker", "slurm": "slurm"}
FULL_ONLY_MARKS = ("slow", "training", "docker")
FULL_ONLY_FOLDERS = ("e2e", "integration")
FULL_ONLY_FIXTURES = ("slurm", "sshd_port", "tiny_model", "tiny_families")
# pytest-timeout's backstop (pyproject: 120 s) for a test of the fast tier; a training, a service
# or the real terminal gets this one. Both only bound a hang: a test's own waits fail first.
LONG_TIMEOUT_S = 600


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--quick",
        action="store_true",
        help="the fast tier only: no trainings, services, real terminal or slow tests",
    )
    parser.addoption(
        "--shuffle",
        type=int,
        metavar="SEED",
        default=None,
        help="run the tests in an order shuffled by SEED (within the long-first tiers): a test "
        "that passes only after another has run fails here",
    )


def _group(item: pytest.Item) -> str | None:
    own = item.get_closest_marker("xdist_group")
    if own is not None:  # a module whose costly module-scoped fixture must be made once
        return str(own.args[0] if own.args else own.kwargs.get("name"))
    for mark, group in SERVICE_GROUPS.items():
        if item.get_closest_marker(mark) is not None or mark in getattr(item, "fixturenames", ()):
            return group
    if item.path.parent.name == "snapshots":
        return "snapshots"
    return None


def _full_only(item: pytest.Item) -> bool:
    folder = item.path.relative_to(ROOT / "tests").parts[0]
    return (
        folder in FULL_ONLY_FOLDERS
        or any(item.get_closest_marker(m) is not None for m in FULL_ONLY_MARKS)
        or any(f in getattr(item, "fixturenames", ()) for f in FULL_ONLY_FIXTURES)
    )


def _start_order(item: pytest.Item) -> int:
    group = _group(item)
    if group in ("docker", "slurm"):
        return 0
    if _full_only(item):
        return 1
    return 2


def _recorded_weights(items: list[pytest.Item], recorded: dict[str, float]) -> dict[str, float]:
    """Each test's recorded seconds (tests/durations.json), or its group's total for a grouped
    test: the group runs as one unit of work on one worker."""
    groups = {item.nodeid: _group(item) for item in items}
    by_group: dict[str, float] = {}
    for nodeid, group in groups.items():
        if group is not None:
            by_group[group] = by_group.get(group, 0.0) + recorded.get(nodeid, 0.0)
    return {
        nodeid: by_group[group] if group else recorded.get(nodeid, 0.0)
        for nodeid, group in groups.items()
    }


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from tests.quick_tier import recorded_durations, too_slow_for_quick

    recorded = recorded_durations()
    if config.getoption("--quick"):
        # The fast tier, less what was measured over its per-test budget (tests/quick_tier.py),
        # unless this run measures them again.
        slow: set[str] = set()
        if not config.getoption("--record-durations"):
            slow = too_slow_for_quick([i.nodeid for i in items], recorded)
        left_out = {i.nodeid for i in items if _full_only(i) or i.nodeid in slow}
        config.hook.pytest_deselected(items=[i for i in items if i.nodeid in left_out])
        items[:] = [i for i in items if i.nodeid not in left_out]
    seed = config.getoption("--shuffle")
    if seed is not None:  # every worker collects alike, so each shuffles to the same order
        random.Random(seed).shuffle(items)
    # Longest first: the serial service groups, then trainings and other long tests, then the
    # fast tier (a group is one unit of work: started last, it would end the run alone). Within
    # a tier, the longest recorded work first (a group weighs its tests' sum), so the run ends on
    # short tests on every worker instead of one long one on one. A shuffled run keeps its
    # shuffled order within each tier (the sort is stable and ignores the recorded times).
    weight = _recorded_weights(items, recorded) if seed is None else {}
    items.sort(key=lambda i: (_start_order(i), -weight.get(i.nodeid, 0.0)))
    for item in items:
        group = _group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
        if _full_only(item) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(LONG_TIMEOUT_S))


@pytest.fixture(scope="session", autouse=True)
def _session_trainwiz_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Fixtures wider than a test (module, session) run before the per-test home below is set:
    without this they would write into the machine's own home ($XDG_STATE_HOME/trainwiz) and
    read whatever runs and caches earlier sessions left there."""
    home = tmp_path_factory.mktemp("session-trainwiz-home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRAINWIZ_HOME", str(home))
        yield home


@pytest.fixture(autouse=True)
def _trainwiz_home(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> Path:
    """Each test's own TRAINWIZ_HOME. In the full tier it holds the embedded default's tiny
    model already (``@home/models/tiny-llama``, a copy of the session's ``tiny_model``), as on a
    machine where the quick start ran once: every launch of tiny-cpu would otherwise make the
    same model again in its prepare step (~7 CPU-seconds each, torch and transformers loaded
    for it). A test of that first-time path is marked ``bare_home`` and gets an empty home."""
    home = tmp_path_factory.mktemp("trainwiz-home")
    monkeypatch.setenv("TRAINWIZ_HOME", str(home))
    item = request.node
    if _full_only(item) and item.get_closest_marker("bare_home") is None:
        shutil.copytree(request.getfixturevalue("tiny_model"), home / "models" / "tiny-llama")
    return home


@pytest.fixture(autouse=True)
def _fresh_url_opener() -> Iterator[None]:
    """urllib's module-wide opener reads the proxy variables once, on its first use: a test that
    points them at a dead proxy (``loopback_only``) would leave every later ``urlopen`` of the
    same worker going through it after monkeypatch restored the variables. Drop it both ways."""
    urllib.request.install_opener(None)  # type: ignore[arg-type]
    yield
    urllib.request.install_opener(None)  # type: ignore[arg-type]


def pytest_configure(config: pytest.Config) -> None:
    """Every process the suite starts inherits this: one compute thread per torch process (the
    workers already run tests side by side on the few cores; a tiny model gains nothing from a
    second thread, and oversubscribed threads only slow each other), live runs that idle between
    steps once past the first 20, and Python caching its
    bytecode (a CLI child process then compiles the project once per suite, not once each)."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    # A run a test keeps alive (to stop, kill, attach to or look at) idles 0.25 s after each
    # step past step 20 instead of spinning a core the whole time; a short run that is meant to
    # finish trains at full speed (backend/entry/stepmetrics.py, step_pause).
    os.environ.setdefault("TRAINWIZ_STEP_PAUSE_S", "0.25")
    os.environ.setdefault("TRAINWIZ_STEP_PAUSE_FROM_STEP", "20")
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False


def shared_once(
    tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], None]
) -> Path:
    """``make(path)`` once for the whole run, whichever worker asks first; the others wait on
    its lock and reuse the result (a worker's basetemp is a child of the run's shared one)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    target = root / "shared" / name
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f"{name}.lock", "a", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not (target.parent / f"{name}.done").exists():
                shutil.rmtree(target, ignore_errors=True)
                make(target)
                (target.parent / f"{name}.done").touch()
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return target


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded default's tiny Llama, made once per test run by the model code itself
    (``make_tiny``, the spec in presets/tiny-cpu.yaml; tiny-cpu-lora uses the same one): tests
    copy it into their own TRAINWIZ_HOME instead of each building another."""
    from backend.model.tiny import make_tiny
    from backend.preset.loader import load_preset

    preset = load_preset(ROOT / "presets" / "tiny-cpu.yaml")
    return shared_once(
        tmp_path_factory, "tiny-llama", lambda target: make_tiny(target, preset.model.tiny)
    )


TINY_FAMILIES = ("llama3", "qwen2", "mistral", "gemma2")


@pytest.fixture(scope="session")
def tiny_families(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Today's chat-model families as tiny models (the embedded default's sizes, the family's
    tokenizer and chat template), each made once per test run by ``make_tiny``: tests copy one
    into their own TRAINWIZ_HOME (as ``@home/models/tiny-FAMILY``) or a folder of their own."""
    from backend.model.tiny import make_tiny
    from backend.preset.loader import load_preset

    base = load_preset(ROOT / "presets" / "tiny-cpu.yaml").model.tiny
    assert base is not None
    made = {}
    for family in TINY_FAMILIES:
        spec = base.model_copy(update={"family": family})
        made[family] = shared_once(
            tmp_path_factory, f"tiny-{family}", lambda target, spec=spec: make_tiny(target, spec)
        )
    return made
