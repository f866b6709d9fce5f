#!/usr/bin/env bash
# The node's supervisor (cluster/up.sh starts it in the node's network namespace and a
# mount namespace of its own): mounts what the node keeps to itself, starts each
# component, restarts one that exits (as systemd would on a real node) and logs it.
# cluster/down.sh stops it and everything under it.
set -euo pipefail
# shellcheck disable=SC1090
source "$1"
export PATH=$BIN:$PATH
log=$STATE/log
pki=$STATE/pki

# Everything started from here, the pods too (the kubelet's cgroupRoot), in one cgroup.
for hierarchy in /sys/fs/cgroup/*/; do
    mkdir -p "$hierarchy/epochlog-cluster"
    if [ -f "$hierarchy/cpuset.cpus" ]; then
        cat "$hierarchy/cpuset.cpus" >"$hierarchy/epochlog-cluster/cpuset.cpus"
        cat "$hierarchy/cpuset.mems" >"$hierarchy/epochlog-cluster/cpuset.mems"
    fi
    echo $$ >"$hierarchy/epochlog-cluster/cgroup.procs"
done

# /run is the node's own: containerd's sockets, the pods' network namespaces, iptables'
# lock. The state directory is shared with the containers the kubelet mounts it into.
mount -t tmpfs -o mode=755 tmpfs /run
mount --bind "$STATE" "$STATE"
mount --make-rshared "$STATE"
# The kubelet sets these three kernel settings unless they already hold; they are the
# whole host's, not the node's, so the node sees them as already set.
for setting in vm/overcommit_memory=1 kernel/panic=10 kernel/panic_on_oops=1; do
    file=$STATE/run/sysctl-${setting%%=*}
    mkdir -p "$(dirname "$file")"
    echo "${setting#*=}" >"$file"
    mount --bind -o ro "$file" "/proc/sys/${setting%%=*}"
done

supervise() { # name command...
    local name=$1
    shift
    (
        while true; do
            echo "$(date -Is) starting $name" >>"$log/$name.log"
            "$@" >>"$log/$name.log" 2>&1 && status=0 || status=$?
            echo "$(date -Is) $name exited with $status" >>"$log/$name.log"
            echo "$(date -Is) $name exited with $status; restarting"
            sleep 1
        done
    ) &
}
wait_for() { # what url [curl options]
    local what=$1 url=$2
    shift 2
    until curl -sf --max-time 5 "$@" "$url" >/dev/null 2>&1; do
        sleep 0.2
    done
    echo "$(date -Is) $what ready"
}

supervise etcd etcd --name "$NODE" --data-dir "$STATE/etcd" \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster "$NODE=http://127.0.0.1:2380" --listen-metrics-urls http://127.0.0.1:2381
wait_for etcd http://127.0.0.1:2381/health

supervise kube-apiserver kube-apiserver --etcd-servers http://127.0.0.1:2379 \
    --bind-address "$NODE_IP" --advertise-address "$NODE_IP" --secure-port 6443 \
    --service-cluster-ip-range "$SERVICE_CIDR" \
    --client-ca-file "$pki/ca.crt" \
    --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
    --kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" \
    --kubelet-client-key "$pki/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority "$pki/ca.crt" --kubelet-preferred-address-types InternalIP \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
    --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
    --allow-privileged=true --profiling=false
wait_for kube-apiserver "https://$NODE_IP:6443/readyz" --cacert "$pki/ca.crt" \
    --cert "$pki/admin.crt" --key "$pki/admin.key"

supervise kube-controller-manager kube-controller-manager \
    --kubeconfig "$STATE/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$STATE/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$STATE/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --leader-elect=false \
    --allocate-node-cidrs --cluster-cidr "$CLUSTER_CIDR" --node-cidr-mask-size 24 \
    --service-cluster-ip-range "$SERVICE_CIDR" \
    --cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key" \
    --root-ca-file "$pki/ca.crt" --service-account-private-key-file "$pki/sa.key" \
    --use-service-account-credentials
supervise kube-scheduler kube-scheduler --kubeconfig "$STATE/scheduler.kubeconfig" \
    --authentication-kubeconfig "$STATE/scheduler.kubeconfig" \
    --authorization-kubeconfig "$STATE/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --leader-elect=false
supervise containerd containerd --config "$STATE/containerd.toml"
supervise kubelet kubelet --config "$STATE/kubelet.yaml" --kubeconfig "$STATE/node.kubeconfig" \
    --hostname-override "$NODE" --node-ip "$NODE_IP" --root-dir "$STATE/kubelet"
supervise kube-proxy kube-proxy --config "$STATE/kube-proxy.yaml"
supervise kube-router kube-router --kubeconfig "$STATE/netpol.kubeconfig" \
    --hostname-override "$NODE" --run-firewall=true --run-router=false \
    --run-service-proxy=false --health-port 0 --metrics-port 0 --v=1

echo $$ >"$STATE/node.pid"
wait
