#!/usr/bin/env bash
# Creates .venv and installs epochlog with the requested extras, at the exact
# versions (and hashes) of the lock in requirements/: dev.txt holds the dev, operator
# and docs extras, spark.txt those and the spark extra (`make lock` writes both).
# Nothing is resolved here, so a fresh clone installs what CI installed when the
# lock was written. Installs the Debian packages it needs when they are missing
# (python3 venv support; a Java runtime when the spark extra is asked for, kcat for
# the dev extra), and promtool for the dev extra, taken out of Debian's package.
# Idempotent: re-installs only when pyproject.toml, the lock or the extras change.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-dev}"
venv=.venv

lock=requirements/dev.txt
for extra in ${extras//,/ }; do
    case "$extra" in
        dev | operator | docs) ;;
        spark) lock=requirements/spark.txt ;;
        *)
            echo "bootstrap: no lock holds the extra '$extra' (see requirements/)" >&2
            exit 2
            ;;
    esac
done

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

# kcat (librdkafka's command-line client) is one of the Kafka clients the dev extra's
# interop tests run against the Kafka listener (tests/e2e/test_kafka_kcat.py).
if [[ ",$extras," == *",dev,"* ]] && ! command -v kcat >/dev/null 2>&1; then
    apt_install kcat
fi

if [ ! -x "$venv/bin/python" ]; then
    if ! "$py" -m venv "$venv" 2>/dev/null; then
        rm -rf "$venv"
        apt_install python3.11-venv
        "$py" -m venv "$venv"
    fi
fi

# promtool (Prometheus' rule checker, Debian's 2.42) checks the chart's alert rules and
# runs their unit tests (tests/monitoring/test_rules.py). Debian ships it in the
# prometheus package, whose installation starts a Prometheus server and enables its
# service (the package's postinst) and pulls in a node exporter: only promtool is taken
# out of the package, into the venv, and nothing is installed or started.
if [[ ",$extras," == *",dev,"* ]] && [ ! -x "$venv/bin/promtool" ]; then
    deb_dir=$(mktemp -d)
    if [ "$(id -u)" = 0 ]; then
        # apt downloads as its own user where it can write.
        chown _apt "$deb_dir" 2>/dev/null || true
        apt-get update -qq
    else
        sudo apt-get update -qq
    fi
    (cd "$deb_dir" && apt-get download -qq prometheus)
    dpkg-deb --fsys-tarfile "$deb_dir"/prometheus_*.deb \
        | tar -x -O ./usr/bin/promtool >"$venv/bin/promtool.part"
    chmod 755 "$venv/bin/promtool.part"
    mv "$venv/bin/promtool.part" "$venv/bin/promtool"
    rm -rf "$deb_dir"
fi

stamp="$venv/.installed-$(cat pyproject.toml "$lock" | sha256sum | cut -c1-16)-${extras//,/_}"
if [ ! -f "$stamp" ]; then
    # The lock pins pip, setuptools and wheel too: the project is built with the
    # locked setuptools (no build isolation, which would fetch the newest one).
    "$venv/bin/python" -m pip install -q --require-hashes --no-deps -r "$lock"
    "$venv/bin/python" -m pip install -q --no-deps --no-build-isolation -e .
    if ! problems=$("$venv/bin/python" -m pip check); then
        echo "$problems" >&2
        exit 1
    fi
    rm -f "$venv"/.installed-*
    touch "$stamp"
fi

# Bytecode for the project's own modules, written even where PYTHONDONTWRITEBYTECODE is
# set (Python then reads .pyc files but never writes them): every broker, operator and
# CLI process would otherwise compile them again, a third of a second each. Only
# changed files are compiled.
"$venv/bin/python" -m compileall -q -j 0 epochlog tools/epochlog_tools broker_image/epochlog_broker \
    operator/epochlog_operator pipeline/epochlog_spark >/dev/null

# Bytecode inside Spark's pyspark.zip, which its Python processes import from: the
# streaming source's planner must connect back to the JVM within 10 s of its start, and
# compiling pyspark each time took most of that on a busy machine (scripts/compile_zip.py).
pyspark_zip="$venv/lib/python3.11/site-packages/pyspark/python/lib/pyspark.zip"
if [ -f "$pyspark_zip" ]; then
    "$venv/bin/python" scripts/compile_zip.py "$pyspark_zip"
fi
