#!/usr/bin/env bash
# Stops the test cluster (`make cluster-down`): every process in the cgroup
# /epochlog-cluster (the node's components, containerd's shims, every pod), then the
# node's network namespace and veth pair. The state directory stays, so the next
# `make cluster` starts the same cluster with its data; `cluster/down.sh --wipe`
# removes it too.
set -euo pipefail
state=${EPOCHLOG_CLUSTER_STATE:-/var/lib/epochlog-cluster}
if [ "$(id -u)" != 0 ]; then
    exec sudo --preserve-env "$0" "$@"
fi

procs() { cat /sys/fs/cgroup/pids/epochlog-cluster/cgroup.procs \
    $(find /sys/fs/cgroup/pids/epochlog-cluster -mindepth 2 -name cgroup.procs 2>/dev/null) \
    2>/dev/null || true; }
# The kubelet and the supervisor first, so nothing is restarted while the rest stop.
if [ -d /sys/fs/cgroup/pids/epochlog-cluster ]; then
    for signal in TERM KILL; do
        pids=$(procs)
        [ -n "$pids" ] && kill "-$signal" $pids 2>/dev/null || true
        for _ in $(seq 50); do
            [ -z "$(procs)" ] && break
            sleep 0.1
        done
    done
    while [ -n "$(procs)" ]; do
        kill -KILL $(procs) 2>/dev/null || true
        sleep 0.1
    done
    # Leaf cgroups first: a cgroup with children cannot be removed.
    for hierarchy in /sys/fs/cgroup/*/; do
        [ -d "$hierarchy/epochlog-cluster" ] || continue
        find "$hierarchy/epochlog-cluster" -depth -type d -exec rmdir {} \; 2>/dev/null || true
    done
fi
ip link del elnode0 2>/dev/null || true
ip netns del epochlog-node 2>/dev/null || true
rm -f "$state/node.pid"
if [ "${1:-}" = --wipe ]; then
    rm -rf "$state"
fi
echo "cluster: stopped" >&2
