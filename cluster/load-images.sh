#!/usr/bin/env bash
# Loads images from the local image storage (buildah's and podman's) into the test
# cluster's containerd, where the kubelet finds them without a registry:
#   cluster/load-images.sh localhost/epochlog-broker:latest ...
set -euo pipefail
state=${EPOCHLOG_CLUSTER_STATE:-/var/lib/epochlog-cluster}
if [ "$(id -u)" != 0 ]; then
    exec sudo --preserve-env "$0" "$@"
fi
source "$state/node.env"
in_node() { nsenter --target "$(cat "$state/node.pid")" --mount --net -- "$@"; }
for ref in "$@"; do
    archive=$(mktemp "$state/run/image-XXXXXX.tar")
    rm -f "$archive"
    podman save -q --format docker-archive -o "$archive" "$ref"
    in_node ctr -n k8s.io images import "$archive" >/dev/null
    rm -f "$archive"
    echo "cluster: loaded $ref" >&2
done
