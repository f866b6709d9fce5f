#!/usr/bin/env bash
# Fetches the jars of the Java clients the interop tests run (Apache Kafka's client and
# tools, Spark's own Kafka source) with Maven from Maven Central into
# ~/.cache/epochlog-interop (tests/interop/jars.py says which and where). Installs Maven
# and a Java runtime with apt when they are missing. Idempotent: with every set in the
# cache it asks nothing of the network and takes a fraction of a second.
set -euo pipefail
cd "$(dirname "$0")/.."

apt_install() {
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
    else
        sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
    fi
}

if ! .venv/bin/python -m tests.interop.jars --check 2>/dev/null; then
    if ! command -v java >/dev/null 2>&1; then
        apt_install openjdk-17-jre-headless
    fi
    if ! command -v mvn >/dev/null 2>&1; then
        apt_install maven
    fi
    .venv/bin/python -m tests.interop.jars
fi
