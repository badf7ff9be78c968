#!/usr/bin/env bash
# Install trainwiz into ./.venv with what the embedded default trains with (the `train` extra)
# and, with --dev, the test tools. Safe to re-run. Needs python3 (>= 3.10) and, on Debian/Ubuntu,
# the venv module (installed here when missing and we are root).
#
# torch: TRAINWIZ_TORCH_SPEC (default torch==2.13.0; on a CPU-only machine point pip at a CPU
# build, e.g. PIP_INDEX_URL/--find-links, before running this).
set -euo pipefail
cd "$(dirname "$0")/.."

extras="train"
[ "${1:-}" = "--dev" ] && extras="train,dev,modelscope"

if [ ! -x .venv/bin/python ]; then
    if ! python3 -m venv .venv 2>/dev/null; then
        rm -rf .venv
        if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
            pyver=$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
            DEBIAN_FRONTEND=noninteractive apt-get update -qq
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "python${pyver}-venv" || \
                DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv
            python3 -m venv .venv
        else
            echo "install.sh: python3 -m venv failed: install python3-venv (sudo apt-get install python3-venv)" >&2
            exit 2
        fi
    fi
fi
# --no-compile: pip would byte-compile every module of every package (torch and transformers
# alone hold ~4,500), most of which trainwiz never imports; measured here, torch's install took
# 37 CPU-seconds compiled and 8.5 without. Python compiles what is imported, once, on first use.
.venv/bin/python -m pip install -q --no-compile --upgrade pip
.venv/bin/python -m pip install -q --no-compile "${TRAINWIZ_TORCH_SPEC:-torch==2.13.0}"
.venv/bin/python -m pip install -q --no-compile -e ".[${extras}]"
echo "install.sh: trainwiz installed in $(pwd)/.venv (extras: ${extras})"

# `trainwiz` on PATH: a link in ~/.local/bin (XDG_BIN_HOME), made only where nothing is, or
# where an earlier install.sh made one (a link to some .venv/bin/trainwiz). The plans trainwiz
# prints name this installation's trainwiz by its absolute path, so they work either way.
target="$(pwd)/.venv/bin/trainwiz"
bin_dir="${XDG_BIN_HOME:-$HOME/.local/bin}"
link="$bin_dir/trainwiz"
mkdir -p "$bin_dir"
if [ ! -e "$link" ] && [ ! -L "$link" ]; then
    ln -s "$target" "$link"
    echo "install.sh: linked $link -> $target"
elif [ -L "$link" ] && case "$(readlink "$link")" in */.venv/bin/trainwiz) true ;; *) false ;; esac; then
    ln -sfn "$target" "$link"
    echo "install.sh: linked $link -> $target"
else
    echo "install.sh: $link exists and is not an install.sh link: left as it is; run $target"
fi
case ":$PATH:" in
    *":$bin_dir:"*) echo "install.sh: 'trainwiz' is on PATH ($bin_dir)" ;;
    *) echo "install.sh: $bin_dir is not on PATH: add it (export PATH=\"$bin_dir:\$PATH\") or run $target" ;;
esac
