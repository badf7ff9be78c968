"""Mirror profiles: probes against loopback mirrors (a good one, a slow one, one answering 5xx,
one black-holed, a captive portal) and the pure resolution of a preset from what they saw."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from backend.errors import BadInput
from backend.mirrors import (
    CandidateLists,
    apply_mirrors,
    candidate_urls,
    load_candidate_lists,
    mirrors_record,
    probe_preset,
    resolve_mirrors,
)
from backend.mirrors.probe import ProbeReport, ProbeResult, candidate, clear_cache, probe_all
from backend.preset.loader import parse_preset_text, preset_to_yaml
from backend.preset.schema import Preset
from tests.backend.hubserver import FakeHub, Repo, _handler
from tests.backend.mirrorservers import (
    BlackHole,
    Server,
    build_wheel,
    index_handler,
    loopback_only,
    portal_handler,
    registry_root_handler,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _loopback_only(monkeypatch: pytest.MonkeyPatch):
    """Every probe of these tests must go to 127.0.0.1: the real mirrors are never contacted."""
    loopback_only(monkeypatch)
    yield
    clear_cache()


@pytest.fixture()
def wheels(tmp_path: Path) -> Path:
    build_wheel(tmp_path / "wheels")
    return tmp_path / "wheels"


@pytest.fixture()
def servers(wheels: Path):
    """good / slow / 5xx / black-holed / portal PyPI indexes, all on loopback."""
    made = {
        "good": Server(index_handler(wheels)),
        "slow": Server(index_handler(wheels), delay_s=0.4),
        "error": Server(index_handler(wheels), status=503),
        "hole": BlackHole(),
        "portal": Server(portal_handler()),
    }
    yield made
    for server in made.values():
        server.stop()


def seed_like(**mirrors: object) -> Preset:
    """The seed preset (docker, git-lfs clone from the Hub, Tsinghua index) with a profile."""
    data = yaml.safe_load((ROOT / "presets" / "vicuna-13b-v1.3-8xa100.yaml").read_text())
    data["mirrors"] = {"probe_timeout_s": 0.5, **mirrors}
    return parse_preset_text(yaml.safe_dump(data))


def lists(**kinds: list[str]) -> CandidateLists:
    return CandidateLists(probe_package="pip", official={}, cn=dict(kinds))  # type: ignore[arg-type]


def test_probe_picks_the_fastest_correct_index_and_names_each_failure(servers) -> None:
    urls = {name: s.url + "/simple" for name, s in servers.items()}
    cands = [candidate("pypi", urls[n]) for n in ("hole", "error", "portal", "slow", "good")]
    report = probe_all(cands, timeout_s=1.0, budget_s=3.0)
    by_url = {r.url: r for r in report.results}
    assert by_url[urls["good"]].ok and by_url[urls["slow"]].ok
    assert by_url[urls["slow"]].latency_ms > by_url[urls["good"]].latency_ms  # type: ignore[operator]
    assert not by_url[urls["error"]].ok and by_url[urls["error"]].error == "HTTP 503"
    assert not by_url[urls["hole"]].ok and "no answer within 1.0 s" in by_url[urls["hole"]].error
    portal = by_url[urls["portal"]]
    assert not portal.ok and "not a simple index page listing pip" in portal.error
    assert servers["good"].requests == ["/simple/pip/"]  # what pip itself would ask first


def test_probing_stays_inside_its_budget_with_a_black_hole(servers) -> None:
    cands = [candidate("pypi", servers["hole"].url + "/simple")]
    cands.append(candidate("pypi", servers["good"].url + "/simple"))
    started = time.monotonic()
    report = probe_all(cands, timeout_s=10.0, budget_s=0.8)
    took = time.monotonic() - started
    assert took < 5.0  # the hole would hold its socket read for 10 s: the 0.8 s budget cut it
    hole, good = report.results
    assert not hole.ok and "probe budget ran out" in hole.error
    assert good.ok


def test_a_round_settles_once_every_kind_has_a_correct_answer(servers) -> None:
    cands = [candidate("pypi", servers[n].url + "/simple") for n in ("hole", "good")]
    report = probe_all(cands, timeout_s=10.0, budget_s=10.0, settle_s=0.2)
    hole, good = report.results
    assert good.ok
    assert hole.error == "not waited for: a faster candidate had answered correctly"
    assert report.elapsed_ms < 5000  # the hole's 10 s read was not waited out


def test_auto_resolves_the_preset_to_the_winner_and_falls_back_in_order(servers) -> None:
    urls = {name: s.url + "/simple" for name, s in servers.items()}
    preset = seed_like(
        profile="custom", custom={"pypi": [urls[n] for n in ("hole", "error", "slow", "good")]}
    )
    cand_lists = lists()
    resolved = apply_mirrors(preset, cand_lists)
    record = mirrors_record(resolved)
    assert resolved.environment.pip_index_url == urls["good"]
    assert record is not None and record.choices[0].answered == 1
    cut = {r.url: r.error for r in record.probes.results}
    assert cut[urls["slow"]] == "not waited for: a faster candidate had answered correctly"
    # The good mirror goes away: the slow one, still answering correctly, is next.
    servers["good"].stop()
    clear_cache()
    resolved = apply_mirrors(preset, cand_lists)
    record = mirrors_record(resolved)
    assert resolved.environment.pip_index_url == urls["slow"]
    # Nothing answers: the first listed stays, and the record says so.
    servers["slow"].status = 502
    clear_cache()
    resolved = apply_mirrors(preset, cand_lists)
    record = mirrors_record(resolved)
    assert resolved.environment.pip_index_url == urls["hole"]
    assert record is not None and "no candidate answered" in record.choices[0].reason


def test_hub_probe_asks_the_model_api_of_the_presets_repo(tmp_path: Path) -> None:
    hub = FakeHub().start()
    hub.repos["lmsys/vicuna-13b-v1.3"] = Repo(files={"config.json": b"{}"})
    slow = Server(_handler(hub), delay_s=0.4)
    broken = Server(_handler(hub), status=500)
    hole = BlackHole()
    try:
        preset = seed_like(
            profile="custom", custom={"hub": [hole.url, broken.url, slow.url, hub.url]}
        )
        resolved = apply_mirrors(preset, lists())
        record = mirrors_record(resolved)
        assert resolved.model.endpoint == hub.url
        # The seed clones with git-lfs from huggingface.co: the clone goes through the mirror.
        assert resolved.model.git_url == f"{hub.url}/lmsys/vicuna-13b-v1.3"
        assert resolved.model.clone_url() == f"{hub.url}/lmsys/vicuna-13b-v1.3"
        assert ("GET", "/api/models/lmsys/vicuna-13b-v1.3", None) in hub.log
        assert record is not None
        hub_choice = next(c for c in record.choices if c.kind == "hub")
        assert hub_choice.answered == 1 and hub_choice.chosen == hub.url
        errors = {r.url: r.error for r in record.probes.results}
        assert errors[broken.url] == "HTTP 500"
        assert "not waited for" in errors[slow.url] and "not waited for" in errors[hole.url]
    finally:
        for server in (slow, broken, hole):
            server.stop()
        hub.stop()


def test_registry_probe_wants_the_v2_api_and_rewrites_docker_hub_names() -> None:
    good = Server(registry_root_handler())
    broken = Server(registry_root_handler(), status=503)
    portal = Server(portal_handler())
    hole = BlackHole()
    try:
        preset = seed_like(
            profile="custom", custom={"registry": [hole.url, broken.url, portal.url, good.url]}
        )
        report = probe_preset(preset, lists())
        report.registry_mirrors, report.image_local = [], False  # a daemon without mirrors
        resolved = resolve_mirrors(preset, report, lists())
        host = good.url.removeprefix("http://")
        assert resolved.environment.image == f"{host}/pytorch/pytorch:2.0.1-cuda11.7-cudnn8-devel"
        errors = {r.url: r.error for r in report.for_kind("registry")}
        assert errors[portal.url] == "HTTP 200 without the Registry v2 API header"
        assert errors[broken.url] == "HTTP 503 without the Registry v2 API header"
    finally:
        for server in (good, broken, portal, hole):
            server.stop()


def _report(*results: ProbeResult, **facts: object) -> ProbeReport:
    return ProbeReport(results=list(results), **facts)  # type: ignore[arg-type]


def test_resolve_is_pure_and_keeps_what_the_daemon_already_handles() -> None:
    preset = seed_like(profile="auto")
    cand = lists(registry=["mirror.example:5000"], pypi=["https://b.example/simple"])
    answered = _report(
        ProbeResult("registry", "mirror.example:5000", "", ok=True, latency_ms=5),
        ProbeResult("pypi", "https://b.example/simple", "", ok=True, latency_ms=3),
        ProbeResult("pypi", "https://pypi.tuna.tsinghua.edu.cn/simple", "", ok=True, latency_ms=9),
    )
    once = resolve_mirrors(preset, answered, cand)
    assert once == resolve_mirrors(preset, answered, cand)  # same inputs, same preset
    assert once.environment.pip_index_url == "https://b.example/simple"
    assert once.environment.image.startswith("mirror.example:5000/pytorch/pytorch:")
    assert preset.environment.image == "pytorch/pytorch:2.0.1-cuda11.7-cudnn8-devel"  # untouched
    daemon = _report(*answered.results, registry_mirrors=["https://mirror.example"])
    assert resolve_mirrors(preset, daemon, cand).environment.image == preset.environment.image
    local = _report(*answered.results, image_local=True)
    assert resolve_mirrors(preset, local, cand).environment.image == preset.environment.image


def test_resolved_fields_are_written_into_the_saved_preset() -> None:
    text = (ROOT / "presets" / "tiny-cpu.yaml").read_text() + "\nmirrors: cn\n"
    preset = parse_preset_text(text)
    cand = lists(pypi=["https://a.example/simple", "http://pypi.corp.example/simple"])
    report = _report(
        ProbeResult("pypi", "http://pypi.corp.example/simple", "", ok=True, latency_ms=1)
    )
    resolved = resolve_mirrors(preset, report, cand)
    saved = yaml.safe_load(preset_to_yaml(resolved))
    assert saved["environment"]["pip_index_url"] == "http://pypi.corp.example/simple"
    assert saved["environment"]["pip_trusted_hosts"] == ["pypi.corp.example"]  # plain http
    assert saved["mirrors"]["profile"] == "cn"
    recorded = saved["mirrors"]["resolved"]  # the choice and the timing travel with the preset
    assert recorded["choices"][0]["chosen"] == "http://pypi.corp.example/simple"
    assert recorded["probes"]["results"][0]["latency_ms"] == 1
    again = parse_preset_text(preset_to_yaml(resolved))
    assert apply_mirrors(again) == again  # already resolved: not probed again


def test_profile_none_changes_nothing_and_probes_nothing() -> None:
    preset = seed_like(profile="none")
    assert candidate_urls(preset, "pypi", load_candidate_lists()) == []
    assert apply_mirrors(preset) is preset and mirrors_record(preset) is None


def test_shipped_candidates_cover_the_named_mirrors() -> None:
    shipped = load_candidate_lists(ROOT / "backend" / "mirrors" / "candidates.yaml")
    pypi = " ".join(shipped.cn["pypi"])
    for name in ("tuna.tsinghua", "aliyun", "ustc", "douban"):
        assert name in pypi
    assert shipped.cn["hub"] == ["https://hf-mirror.com"]
    assert shipped.official["hub"] == ["https://huggingface.co"]
    auto = candidate_urls(seed_like(profile="auto"), "pypi", shipped)
    assert auto[0] == "https://pypi.tuna.tsinghua.edu.cn/simple"  # the preset's own comes first
    assert "https://pypi.org/simple" in auto


def test_bad_profile_and_bad_candidate_file_are_clear(tmp_path: Path, monkeypatch) -> None:
    text = (ROOT / "presets" / "tiny-cpu.yaml").read_text() + "\nmirrors:\n  profile: custom\n"
    with pytest.raises(BadInput) as err:
        parse_preset_text(text, "p.yaml")
    assert "p.yaml:" in err.value.problems[0] and "custom" in err.value.problems[0]
    bad = tmp_path / "m.yaml"
    bad.write_text("cn:\n  pypi: https://not-a-list\n")
    monkeypatch.setenv("TRAINWIZ_MIRRORS_FILE", str(bad))
    with pytest.raises(BadInput, match=r"m.yaml: cn.pypi: a list of URLs"):
        load_candidate_lists()


def test_the_hub_token_goes_only_where_the_user_said() -> None:
    data = yaml.safe_load((ROOT / "presets" / "vicuna-7b-4xa100-40g.yaml").read_text())
    data["mirrors"] = {"profile": "auto"}
    data["model"]["endpoint"] = "https://hub.corp.example"
    preset = parse_preset_text(yaml.safe_dump(data))
    cand = CandidateLists(
        official={"hub": ["https://huggingface.co"]},
        cn={"hub": ["https://hf-mirror.example", "http://plain.example"]},
    )

    def won_by(url: str) -> Preset:
        report = _report(ProbeResult("hub", url, "", ok=True, latency_ms=1))
        return resolve_mirrors(preset, report, cand)

    # A mirror trainwiz picked from its own list gets no token the user keeps for the Hub.
    assert won_by("https://hf-mirror.example").model.token_env == "TRAINWIZ_HUB_MIRROR_TOKEN"
    assert won_by("http://plain.example").model.token_env == "TRAINWIZ_HUB_MIRROR_TOKEN"
    # The official Hub and the endpoint the preset names keep the preset's token variable.
    assert won_by("https://huggingface.co").model.token_env == preset.model.token_env
    assert won_by("https://hub.corp.example").model.token_env == preset.model.token_env
