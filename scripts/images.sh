#!/usr/bin/env bash
# Builds the images with buildah (`make images`):
#
#   localhost/epochlog-broker:latest    (and :<version> from pyproject.toml)
#   localhost/epochlog-operator:latest  (and :<version>)
#   localhost/epochlog-pipeline:latest  (and :<version>; Spark, with EPOCHLOG_IMAGES)
#
# Steps, each skipped when its result is already there (the script is idempotent):
#
# 1. Installs buildah, podman, debootstrap and runc with apt when missing.
# 2. Picks the base image (ARG BASE of the Dockerfiles):
#    - EPOCHLOG_IMAGE_BASE when set (any image buildah can use), else
#    - the registry base (python:3.11-slim-bookworm) when it is in local storage or
#      can be pulled, else
#    - localhost/epochlog-base:bookworm: Debian 12 made here with debootstrap from the
#      apt mirror (minbase with python3.11, python3.11-venv, ca-certificates) imported
#      with `podman import`. Made once; EPOCHLOG_REBUILD_BASE=1 makes it again.
# 3. Downloads the wheels of each image's lock (requirements/broker-image.txt,
#    requirements/image.txt, requirements/pipeline-image.txt) into
#    build/wheels/<lock>/ with pip on this machine, checking every hash. The
#    Dockerfiles install from there with --no-index and check the hashes again, so
#    the build itself needs no network but the pipeline's Java runtime, which comes
#    from the apt mirror. pyspark is published as a source archive only: the
#    pipeline's lock is downloaded for this machine (x86_64, CPython 3.11, as the
#    image) and the image builds pyspark's wheel from the archive.
# 4. Builds both images with `buildah bud --layers`: an unchanged step is taken
#    from the cache, so a rebuild after a source change redoes only the project's
#    wheel and its install (the Dockerfiles keep the dependencies in stages and
#    layers of their own).
#
# Found on these machines (Debian 12, buildah 1.28, podman 4.3, root, a VM whose
# cgroups are hybrid v1/v2; no registry reachable, only PyPI and the apt mirror):
# - buildah's RUN steps work with `--isolation chroot` and with the default (oci,
#   through runc); chroot is used because it needs no OCI runtime and no cgroups, so
#   it also works where crun is the default runtime (crun refuses the hybrid cgroups)
#   and inside a container. The overlay storage driver works (ext4 underneath): no
#   `--storage-driver vfs`. Storage is root's, shared with podman.
# - podman runs the containers with `--runtime runc` (crun refuses the hybrid
#   cgroups) and `--ulimit nofile=1024:1024 --ulimit nproc=1024:1024`: podman's
#   default limits are above this machine's hard limits, which may not be raised
#   ("error setting rlimit type 7: operation not permitted"). e2e/containers.py has
#   the whole command line.
# - A pull from a registry fails at once (no DNS), so trying it costs nothing.
# - debootstrap does not resolve virtual packages; see build_local_base.
# Measured here (2 cores, other builds and tests running): the base 50-130 s, the
# wheels about 20 s, both images from nothing about 2 minutes, an unchanged tree
# 11-17 s, one changed source file about 11 s per image.
#
# Environment: EPOCHLOG_IMAGE_BASE, EPOCHLOG_REBUILD_BASE=1, EPOCHLOG_APT_MIRROR
# (default: the first mirror in /etc/apt/sources.list.d/debian.sources, else
# deb.debian.org), EPOCHLOG_IMAGES ("broker operator" by default; "pipeline" is the
# Spark image, about 900 MB, which `make e2e` builds too).
set -euo pipefail
cd "$(dirname "$0")/.."
# debootstrap, chroot and the image storage that podman shares with buildah are root's.
if [ "$(id -u)" != 0 ]; then
    exec sudo --preserve-env "$0" "$@"
fi

REGISTRY_BASE=docker.io/library/python:3.11-slim-bookworm
LOCAL_BASE=localhost/epochlog-base:bookworm
VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml | head -n1)
IMAGES=${EPOCHLOG_IMAGES:-broker operator}

say() { printf 'images: %s\n' "$*" >&2; }
elapsed() { printf '%ss' "$((SECONDS - $1))"; }

apt_install() {
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
}

ensure_tools() {
    local missing=()
    command -v buildah >/dev/null 2>&1 || missing+=(buildah)
    command -v podman >/dev/null 2>&1 || missing+=(podman)
    command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
    command -v runc >/dev/null 2>&1 || missing+=(runc)
    if [ "${#missing[@]}" -gt 0 ]; then
        say "installing ${missing[*]} with apt"
        apt_install "${missing[@]}"
    fi
}

image_exists() { buildah inspect --type image "$1" >/dev/null 2>&1; }

apt_mirror() {
    if [ -n "${EPOCHLOG_APT_MIRROR:-}" ]; then
        echo "$EPOCHLOG_APT_MIRROR"
        return
    fi
    local uri
    uri=$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null \
        | grep -v security | head -n1 || true)
    echo "${uri:-http://deb.debian.org/debian}"
}

# Debian 12 with Python 3.11 and nothing else that the images need: minbase (no
# systemd, no apt recommends), docs, man pages, locales and apt's lists removed.
build_local_base() {
    local start=$SECONDS mirror root
    mirror=$(apt_mirror)
    root=$(mktemp -d /var/tmp/epochlog-base.XXXXXX)
    # shellcheck disable=SC2064  # expand now: the trap must remove this very directory
    trap "rm -rf '$root'" EXIT
    say "debootstrap bookworm from $mirror (a few minutes)"
    # python3-distutils is named because debootstrap does not resolve virtual packages:
    # python3.11-venv depends on python3.11-distutils, which it provides.
    debootstrap --variant=minbase \
        --include=python3.11,python3.11-venv,python3-distutils,ca-certificates \
        bookworm "$root" "$mirror" >"$root.log" 2>&1 || {
        tail -n 30 "$root.log" >&2
        exit 1
    }
    rm -f "$root.log"
    chroot "$root" apt-get clean
    rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/var/log/* \
        "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* \
        "$root"/usr/share/locale/* "$root"/tmp/* "$root"/debootstrap
    say "importing it as $LOCAL_BASE"
    tar -C "$root" --numeric-owner -c . | podman import --quiet \
        --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3.11"]' - "$LOCAL_BASE" >/dev/null
    rm -rf "$root"
    trap - EXIT
    say "base $LOCAL_BASE made in $(elapsed "$start")"
}

choose_base() {
    if [ -n "${EPOCHLOG_IMAGE_BASE:-}" ]; then
        echo "$EPOCHLOG_IMAGE_BASE"
        return
    fi
    if [ "${EPOCHLOG_REBUILD_BASE:-}" = 1 ]; then
        image_exists "$LOCAL_BASE" && buildah rmi "$LOCAL_BASE" >/dev/null
        build_local_base
        echo "$LOCAL_BASE"
        return
    fi
    if image_exists "$REGISTRY_BASE"; then
        echo "$REGISTRY_BASE"
    elif image_exists "$LOCAL_BASE"; then
        echo "$LOCAL_BASE"
    elif buildah pull -q "$REGISTRY_BASE" >/dev/null 2>&1; then
        echo "$REGISTRY_BASE"
    else
        say "cannot pull $REGISTRY_BASE; making a Debian 12 base here instead"
        build_local_base
        echo "$LOCAL_BASE"
    fi
}

# The wheels of one lock, every hash checked by pip; downloaded again only when the
# lock changes. The lock targets x86_64 manylinux and CPython 3.11, as the images do.
download_wheels() {
    local lock=$1 dir stamp pip target
    dir=build/wheels/$(basename "$lock" .txt)
    stamp=$dir/.lock-$(sha256sum "$lock" | cut -c1-16)
    if [ -f "$stamp" ]; then
        return
    fi
    pip=(python3 -m pip)
    if [ -x .venv/bin/python ]; then
        pip=(.venv/bin/python -m pip)
    elif ! python3 -m pip --version >/dev/null 2>&1; then
        apt_install python3-pip
    fi
    target=(--only-binary :all: --python-version 3.11 --implementation cp
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
        --platform manylinux2014_x86_64 --platform linux_x86_64 --platform any)
    if grep -q '^pyspark==' "$lock"; then
        target=()  # a source archive in the lock: pip may pick only for this machine
    fi
    say "downloading the wheels of $lock"
    rm -rf "$dir"
    mkdir -p "$dir"
    "${pip[@]}" download -q --disable-pip-version-check --require-hashes --no-deps \
        "${target[@]}" -r "$lock" -d "$dir" 2>&1 \
        | { grep -v "^WARNING: Location .* is ignored" || true; } >&2
    # pipefail: a failed download stops the script here, before the stamp is written.
    touch "$stamp"
}

build_image() {
    local name=$1 base=$2 dockerfile lock start=$SECONDS
    case "$name" in
        broker) dockerfile=broker_image/Dockerfile lock=requirements/broker-image.txt ;;
        operator) dockerfile=operator/Dockerfile lock=requirements/image.txt ;;
        pipeline) dockerfile=pipeline/Dockerfile lock=requirements/pipeline-image.txt ;;
        *)
            echo "images: no image named '$name' (broker, operator, pipeline)" >&2
            exit 2
            ;;
    esac
    download_wheels "$lock"
    say "building localhost/epochlog-$name:$VERSION from $base"
    buildah bud --isolation chroot --quiet --layers --build-arg "BASE=$base" \
        --build-arg "APT_MIRROR=$(apt_mirror)" -f "$dockerfile" \
        -t "localhost/epochlog-$name:$VERSION" -t "localhost/epochlog-$name:latest" . >/dev/null
    say "localhost/epochlog-$name:$VERSION built in $(elapsed "$start")"
}

main() {
    local start=$SECONDS base
    ensure_tools
    base=$(choose_base)
    say "base image: $base"
    for name in $IMAGES; do
        build_image "$name" "$base"
    done
    say "done in $(elapsed "$start")"
}

main "$@"
