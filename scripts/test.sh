#!/usr/bin/env bash
# The project's test command (README, CI):
#
#   bash scripts/test.sh            everything, as CI runs it: install, start the services, ruff,
#                                   mypy, import-linter, then the whole pytest suite (unit, Pilot,
#                                   snapshots, the wizard in tmux, faults, hostile presets, real
#                                   Docker, sshd, Slurm and CPU trainings) on parallel workers
#   bash scripts/test.sh --quick    the fast tier for the edit-test loop (docs/testing.md): no
#                                   services, no trainings, no real terminal; under 3 minutes
#   bash scripts/test.sh [--quick] PYTEST-ARGS...   the same with pytest arguments added
#
# As root on Debian/Ubuntu the full run installs the system tools the tests drive (tmux, git-lfs,
# busybox-static, Docker, OpenSSH, Slurm + munge, debootstrap) in one apt call and starts the
# services (a Docker engine with a local base image, sshd on 127.0.0.1, a one-host Slurm cluster)
# in the background while the static checks run. Elsewhere the tests that need a missing tool or
# service skip and say which. Each phase prints its time; pytest prints its 30 slowest tests.
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0
if [ "${1:-}" = "--quick" ]; then
    quick=1
    shift
fi
start_all=$(date +%s)
phase_start=$start_all
phase() { phase_start=$(date +%s); echo "== $1"; }
phase_end() { echo "== phase $1: $(( $(date +%s) - phase_start )) s"; }
as_root_with_apt() { [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; }

install_system_tools() {
    local missing=()
    command -v tmux >/dev/null 2>&1 || missing+=(tmux)
    command -v git-lfs >/dev/null 2>&1 || missing+=(git-lfs)
    command -v busybox >/dev/null 2>&1 || [ -x /bin/busybox ] || missing+=(busybox-static)
    command -v ssh >/dev/null 2>&1 || missing+=(openssh-client)
    [ -x /usr/sbin/sshd ] || missing+=(openssh-server)
    command -v sbatch >/dev/null 2>&1 || missing+=(slurm-wlm)
    command -v munged >/dev/null 2>&1 || missing+=(munge)
    command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
    command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
    [ ${#missing[@]} -eq 0 ] && return 0
    if as_root_with_apt; then
        echo "installing system tools: ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    else
        echo "not installing ${missing[*]} (needs root and apt-get): the tests that need" \
             "them are skipped, each saying which package is missing" >&2
    fi
}

# ---- install --------------------------------------------------------------------------------
phase "install"
[ "$quick" = 1 ] || install_system_tools
# The quick tier skips pip when nothing it installs from changed since the last install.
stamp=".venv/.trainwiz-dev-$(sha256sum pyproject.toml scripts/install.sh | sha256sum | cut -c1-16)"
if [ "$quick" = 1 ] && [ -f "$stamp" ]; then
    echo "the dev install is current ($stamp)"
else
    bash scripts/install.sh --dev
    rm -f .venv/.trainwiz-dev-*
    touch "$stamp"
fi
phase_end install
export PATH="$PWD/.venv/bin:$PATH"

# ---- services, in the background while the static checks run -------------------------------
services_pid=""
services_log=$(mktemp /tmp/trainwiz-services.XXXXXX)
if [ "$quick" = 0 ] && as_root_with_apt; then
    (
        t=$(date +%s)
        bash scripts/ci-docker.sh
        bash scripts/ci-sshd.sh
        bash scripts/ci-slurm.sh
        echo "== phase services: $(( $(date +%s) - t )) s (beside the static checks)"
    ) >"$services_log" 2>&1 &
    services_pid=$!
fi

# ---- byte-compile what the tests' processes import, beside the static checks ------------------
# scripts/install.sh installs without byte-compiling; the first import of a module compiles it.
# Done here, once, on the core mypy leaves idle, instead of by the first test of every worker.
warm_log=$(mktemp /tmp/trainwiz-warm.XXXXXX)
(
    t=$(date +%s)
    env -u PYTHONDONTWRITEBYTECODE python -c 'import sys; sys.path.insert(0, "backend/entry"); import train_entry' &&
        env -u PYTHONDONTWRITEBYTECODE python -c 'import tui.app, backend.model.tiny, sentencepiece, peft' &&
        echo "== phase byte-compile: $(( $(date +%s) - t )) s (beside the static checks)"
) >"$warm_log" 2>&1 &
warm_pid=$!

phase "ruff"; ruff check . && ruff format --check .; phase_end ruff
phase "mypy"; mypy; phase_end mypy
phase "import-linter"; lint-imports; phase_end import-linter

if [ -n "$services_pid" ]; then
    phase "services"
    if ! wait "$services_pid"; then
        cat "$services_log"
        echo "== the services did not start (their log is above)" >&2
        exit 1
    fi
    cat "$services_log"
    phase_end "waiting for services"
fi
rm -f "$services_log"
wait "$warm_pid" || echo "== byte-compiling ahead failed (the first imports compile instead):"
cat "$warm_log"
rm -f "$warm_log"

# ---- pytest ---------------------------------------------------------------------------------
# The machine's speed today (CPU-seconds of two fixed workloads): the pytest phase's wall time
# follows it, so two CI logs compare only beside it (scripts/machine_speed.py: 5-15 s).
[ "$quick" = 1 ] || env -u PYTHONDONTWRITEBYTECODE python scripts/machine_speed.py
phase "pytest"
# CPU-seconds of the whole machine over the pytest phase (/proc/stat, in clock ticks): how busy
# the workers kept the cores, printed beside the phase's wall time.
busy_ticks() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat 2>/dev/null || echo 0; }
busy_before=$(busy_ticks)
# Parallel workers; tests of one shared service run in its group on one worker (tests/conftest.py).
# The full tier runs four workers on two cores: its trainings, services and terminals wait on
# processes much of the time (a run paused between steps, a Slurm time limit, a serve loading),
# and a fourth worker fills those waits (916 s of pytest with three, 822-846 s with four, measured
# 2026-12-07). The quick tier is in-process CPU work: three.
if [ "$quick" = 1 ]; then
    python -m pytest -n "${TRAINWIZ_TEST_WORKERS:-3}" --dist loadgroup --quick "$@"
else
    python -m pytest -n "${TRAINWIZ_TEST_WORKERS:-4}" --dist loadgroup "$@"
fi
phase_end pytest
busy_s=$(( ($(busy_ticks) - busy_before) / $(getconf CLK_TCK) ))
pytest_s=$(( $(date +%s) - phase_start ))
echo "== pytest used $busy_s CPU-seconds on $(nproc) cores:" \
     "$(( 100 * busy_s / ( (pytest_s > 0 ? pytest_s : 1) * $(nproc) ) )) % busy"
echo "== total: $(( $(date +%s) - start_all )) s"
