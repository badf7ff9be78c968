#!/usr/bin/env bash
# The project's test command (README, CI): install with the dev tools, then every quality gate:
# ruff, mypy, import-linter, and pytest (unit, Pilot, snapshot, and the integration tests: real
# Docker, sshd, Slurm and real CPU training; as root on Debian/Ubuntu this starts those services).
#
# System tools some tests drive for real: tmux (the wizard in a real terminal, tests/e2e),
# git-lfs (git-lfs clones), busybox-static (a one-binary image for the Docker tests). Installed
# here when missing and we are root on Debian/Ubuntu; otherwise the tests that need one skip
# and say which package is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

install_system_tools() {
    local missing=()
    command -v tmux >/dev/null 2>&1 || missing+=(tmux)
    command -v git-lfs >/dev/null 2>&1 || missing+=(git-lfs)
    command -v busybox >/dev/null 2>&1 || [ -x /bin/busybox ] || missing+=(busybox-static)
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "== installing system tools: ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq && apt-get install -y -qq "${missing[@]}"
    else
        echo "== not installing ${missing[*]} (needs root and apt-get): the tests that need" \
             "them are skipped, each saying which package is missing" >&2
    fi
}

install_system_tools
# The services the integration tests use, started here so this one command works on a fresh
# machine (each script is idempotent; .ci/run calls them too): a Docker engine with the local
# base image, sshd on 127.0.0.1 and a one-host Slurm cluster for the multi-node tests.
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    bash scripts/ci-docker.sh
    bash scripts/ci-sshd.sh >/dev/null
    bash scripts/ci-slurm.sh >/dev/null
fi
bash scripts/install.sh --dev
export PATH="$PWD/.venv/bin:$PATH"
echo "== ruff"; ruff check . && ruff format --check .
echo "== mypy"; mypy
echo "== import-linter"; lint-imports
echo "== pytest"; python -m pytest "$@"
