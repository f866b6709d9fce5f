#!/usr/bin/env bash
# Creates .venv and installs epochlog with the requested extras. Installs the
# Debian packages it needs when they are missing (python3 venv support; a Java
# runtime when the spark extra is asked for). Idempotent: re-runs only when
# pyproject.toml or the extras change.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-dev}"
venv=.venv

apt_install() {
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
    else
        sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
    fi
}

py=""
for cand in python3.11 python3; do
    if command -v "$cand" >/dev/null 2>&1 \
        && "$cand" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
        py=$cand; break
    fi
done
if [ -z "$py" ]; then
    apt_install python3.11 python3.11-venv
    py=python3.11
fi

if [[ ",$extras," == *",spark,"* ]] && ! command -v java >/dev/null 2>&1; then
    apt_install openjdk-17-jre-headless
fi

if [ ! -x "$venv/bin/python" ]; then
    if ! "$py" -m venv "$venv" 2>/dev/null; then
        rm -rf "$venv"
        apt_install python3.11-venv
        "$py" -m venv "$venv"
    fi
fi

stamp="$venv/.installed-$(cat pyproject.toml | sha256sum | cut -c1-16)-${extras//,/_}"
if [ ! -f "$stamp" ]; then
    "$venv/bin/python" -m pip install -q --upgrade pip
    "$venv/bin/python" -m pip install -q -e ".[${extras}]"
    rm -f "$venv"/.installed-*
    touch "$stamp"
fi
