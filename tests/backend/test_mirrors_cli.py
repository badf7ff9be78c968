"""`trainwiz plan` and `trainwiz check` on the seed preset with `mirrors: auto`, the candidate
lists swapped for loopback mirrors (TRAINWIZ_MIRRORS_FILE): the official endpoints are down
(5xx, black hole) and the plan renders exactly the mirrors the probes chose."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from backend.mirrors.probe import clear_cache
from tests.backend.hubserver import FakeHub, Repo, _handler
from tests.backend.mirrorservers import (
    BlackHole,
    Server,
    build_wheel,
    index_handler,
    loopback_only,
    registry_root_handler,
)
from tui.cli import main

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "pytorch/pytorch:2.0.1-cuda11.7-cudnn8-devel"


@pytest.fixture()
def chain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    loopback_only(monkeypatch)
    build_wheel(tmp_path / "wheels")
    hub = FakeHub().start()
    hub.repos["lmsys/vicuna-13b-v1.3"] = Repo(files={"config.json": b"{}"})
    m = {
        "pypi_official": BlackHole(),
        "pypi_slow": Server(index_handler(tmp_path / "wheels"), delay_s=0.1),
        "pypi_good": Server(index_handler(tmp_path / "wheels")),
        "hub_official": Server(_handler(hub), status=503),
        "hub_good": Server(_handler(hub)),
        "reg_official": BlackHole(),
        "reg_good": Server(registry_root_handler()),
    }
    lists = {
        "probe_package": "pip",
        "official": {
            "pypi": [m["pypi_official"].url + "/simple"],
            "hub": [m["hub_official"].url],
            "registry": [m["reg_official"].url],
        },
        "cn": {
            "pypi": [m["pypi_slow"].url + "/simple", m["pypi_good"].url + "/simple"],
            "hub": [m["hub_good"].url],
            "registry": [m["reg_good"].url],
        },
    }
    (tmp_path / "mirrors.yaml").write_text(yaml.safe_dump(lists))
    monkeypatch.setenv("TRAINWIZ_MIRRORS_FILE", str(tmp_path / "mirrors.yaml"))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-daemon.sock")  # no daemon mirrors
    data = yaml.safe_load((ROOT / "presets" / "vicuna-13b-v1.3-8xa100.yaml").read_text())
    # The seed as a user writes it, its own URLs pointing at the "official" (dead) endpoints.
    data["environment"]["pip_index_url"] = m["pypi_official"].url + "/simple"
    data["model"]["git_url"] = m["hub_official"].url + "/lmsys/vicuna-13b-v1.3"
    data["mirrors"] = {"profile": "auto", "probe_timeout_s": 1.0, "probe_budget_s": 2.5}
    preset = tmp_path / "seed-auto.yaml"
    preset.write_text(yaml.safe_dump(data, sort_keys=False))
    yield preset, m
    for server in m.values():
        server.stop()
    hub.stop()
    clear_cache()


def test_plan_prints_the_mirrors_the_probe_chose(chain, capsys) -> None:
    preset, m = chain
    assert main(["plan", str(preset)]) == 0
    out = capsys.readouterr().out
    index = m["pypi_good"].url + "/simple"
    registry = m["reg_good"].url.removeprefix("http://")
    assert f"pip install -e . -i {index}" in out  # every in-container pip step
    assert f"pip install flash-attn --no-build-isolation -i {index}" in out
    assert f"git clone -- {m['hub_good'].url}/lmsys/vicuna-13b-v1.3 /data/vicuna-13b-v1.3" in out
    assert f"docker pull {registry}/{IMAGE}" in out
    assert "docker run -itd" in out and f" {registry}/{IMAGE}" in out
    assert f"#   pip:   -i {index}   (fastest of 2 answering" in out
    assert f"#   model: HF_ENDPOINT={m['hub_good'].url}" in out
    assert f"#   image: {registry}/{IMAGE}" in out
    assert m["pypi_official"].url not in out.split("# mirrors:")[0]  # the dead one is nowhere


def test_plan_json_records_every_probe_and_its_timing(chain, capsys) -> None:
    preset, m = chain
    assert main(["plan", str(preset), "--json"]) == 0
    mirrors = json.loads(capsys.readouterr().out)["mirrors"]
    assert mirrors["profile"] == "auto"
    results = {r["url"]: r for r in mirrors["probes"]["results"]}
    assert len(results) == 7
    # Every kind had a correct answer quickly: the black holes were not waited out.
    cut = "not waited for: a faster candidate had answered correctly"
    assert results[m["pypi_official"].url + "/simple"]["error"] == cut
    assert results[m["reg_official"].url]["error"] == cut
    assert results[m["hub_official"].url]["error"] == "HTTP 503"
    assert results[m["pypi_slow"].url + "/simple"]["ok"] is True
    assert all(r["latency_ms"] is not None for r in results.values() if r["error"] != cut)
    chosen = {c["kind"]: c["chosen"] for c in mirrors["choices"]}
    assert chosen["hub"] == m["hub_good"].url
    assert mirrors["probes"]["budget_s"] == 2.5 and mirrors["probes"]["timeout_s"] == 1.0


def test_check_shows_the_choice_and_tests_the_chosen_endpoints(chain, capsys) -> None:
    preset, m = chain
    only = ["--only", "mirrors", "--only", "pip_index", "--only", "hf_endpoint"]
    code = main(["check", "--preset", str(preset), *only, "--json"])
    checks = {c["id"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert code == 0, checks
    mirrors = checks["mirrors"]
    assert mirrors["status"] == "ok"
    assert f"pypi → {m['pypi_good'].url}/simple" in mirrors["summary"]
    assert f"hub → {m['hub_good'].url}" in mirrors["summary"]
    assert f"{m['pypi_official'].url}/simple: not waited for" in mirrors["detail"]
    # The network checks ask the chosen mirrors, not the dead endpoints the preset names.
    assert checks["pip_index"]["data"]["url"] == m["pypi_good"].url + "/simple/"
    assert checks["hf_endpoint"]["data"]["url"].startswith(m["hub_good"].url + "/lmsys/")


def test_check_warns_with_the_fix_when_no_index_answers(chain, capsys) -> None:
    preset, m = chain
    m["pypi_good"].status = 503
    m["pypi_slow"].status = 500
    main(["check", "--preset", str(preset), "--only", "mirrors"])
    out = capsys.readouterr().out
    assert "warn" in out
    assert "no PyPI index candidate answered" in out and "mirrors.custom.pypi" in out
