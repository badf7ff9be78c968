#!/usr/bin/env bash
# The project's test command (README, CI): install with the dev tools, then every quality gate:
# ruff, mypy, import-linter, and pytest (unit, Pilot, snapshot, and the integration tests: real
# Docker and real CPU training — start Docker first with scripts/ci-docker.sh, as .ci/run does).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --dev
export PATH="$PWD/.venv/bin:$PATH"
echo "== ruff"; ruff check . && ruff format --check .
echo "== mypy"; mypy
echo "== import-linter"; lint-imports
echo "== pytest"; python -m pytest "$@"
