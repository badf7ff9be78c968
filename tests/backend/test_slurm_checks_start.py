"""Every Slurm check starts the same way: not a Slurm preset -> skip; no cluster to ask -> the
same failure, naming the fix; an account check with nothing to verify never asks the cluster.

Real presets and a real PATH without ``sinfo`` (the login-node-less machine a user may run on).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from backend.checks import slurm_checks
from backend.checks.context import CheckContext, Needs, Targets
from backend.preset import load_preset

ROOT = Path(__file__).resolve().parents[2]
CHECKS = (
    slurm_checks.check_slurm_partition,
    slurm_checks.check_slurm_gpus,
    slurm_checks.check_slurm_time,
    slurm_checks.check_slurm_account,
)


def context(tmp_path: Path, **launch: object) -> CheckContext:
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["launch"].update(launch)
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    return CheckContext(preset=load_preset(str(path)), needs=Needs(), targets=Targets())


def test_a_preset_that_is_not_slurm_skips_all_four(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    results = [check(ctx) for check in CHECKS]
    assert [r.status for r in results] == ["skip"] * 4
    assert {r.summary for r in results} == {"not a Slurm preset (launch.scheduler is not 'slurm')"}


@pytest.mark.parametrize("account", [None, "research"])
def test_no_cluster_fails_each_check_that_asks_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, account: str | None
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no sinfo, no scontrol, no sbatch
    slurm = {"partition": "ci", **({"account": account} if account else {})}
    ctx = context(tmp_path, scheduler="slurm", slurm=slurm)
    results = [check(ctx) for check in CHECKS]
    asking = results if account else results[:3]
    for result in asking:
        assert result.status == "fail", result
        assert result.summary == "cannot ask Slurm about the cluster: sinfo: not found"
        assert result.fix == "run trainwiz on a login node of the cluster (sinfo must work there)"
        assert result.blocks == ["launch"]
    if not account:  # nothing to verify: Slurm's defaults, without asking the cluster
        assert results[3].status == "ok"
        assert results[3].summary == "no account or QoS set: Slurm's defaults apply"


def test_the_cluster_is_asked_once_for_all_four(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[list[str]] = []
    real = slurm_checks._run

    def counted(argv: list[str]) -> tuple[int, str, str]:
        calls.append(argv)
        return real(argv)

    monkeypatch.setattr(slurm_checks, "_run", counted)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    ctx = context(tmp_path, scheduler="slurm", slurm={"partition": "ci", "qos": "normal"})
    for check in CHECKS:
        check(ctx)
    assert [argv[0] for argv in calls] == ["sinfo"]
