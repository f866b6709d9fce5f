#!/usr/bin/env bash
# Starts the test cluster (`make cluster`): a single-node Kubernetes, the node in a
# network namespace of its own, and prints the path of its kubeconfig.
#
# What runs, all built by cluster/build.sh from pinned versions:
# - in the node (network namespace `epochlog-node`, reached from this host at
#   10.203.0.2 through a veth pair; a mount namespace with /run on a tmpfs):
#   etcd (loopback only), kube-apiserver (10.203.0.2:6443), kube-controller-manager,
#   kube-scheduler, kubelet, kube-proxy (iptables), kube-router (NetworkPolicy,
#   iptables and ipset) and Debian's containerd and runc; cluster/node.sh runs them;
# - as pods: CoreDNS (the Service kube-system/kube-dns, 10.96.0.10) and Rancher's
#   local-path provisioner (the default StorageClass, `local-path`).
# Pods get addresses in 10.244.0.0/24 (Debian's CNI bridge plugin), Services in
# 10.96.0.0/16. Nothing listens outside the node's namespaces and this host's
# side of the veth carries only the node's address.
#
# Everything the node writes is under $EPOCHLOG_CLUSTER_STATE (default
# /var/lib/epochlog-cluster): its certificates, etcd, containerd's images, the
# kubelet's volumes, the local-path volumes, each component's log in log/. Every
# process it starts is in the cgroup /epochlog-cluster (pods included: it is the
# kubelet's cgroupRoot), which is how cluster/down.sh stops them all.
#
# Idempotent: a running cluster is left as it is. The kubeconfig of an
# administrator is $EPOCHLOG_CLUSTER_STATE/admin.kubeconfig; the last line printed
# is that path. Needs root (namespaces, cgroups, iptables).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
state=${EPOCHLOG_CLUSTER_STATE:-/var/lib/epochlog-cluster}
netns=epochlog-node
node=epochlog-node
host_ip=10.203.0.1
node_ip=10.203.0.2
service_cidr=10.96.0.0/16
cluster_cidr=10.244.0.0/16
api=https://$node_ip:6443

say() { printf 'cluster: %s\n' "$*" >&2; }
if [ "$(id -u)" != 0 ]; then
    exec sudo --preserve-env "$0" "$@"
fi

started=$SECONDS
bin=$("$here/build.sh")
key=${bin##*/bin-}
export PATH=$bin:$PATH

kubectl_admin() { kubectl --kubeconfig "$state/admin.kubeconfig" "$@"; }
api_ready() {
    curl -sf --max-time 5 --cacert "$state/pki/ca.crt" --cert "$state/pki/admin.crt" \
        --key "$state/pki/admin.key" "$api/readyz" >/dev/null 2>&1
}
if [ -f "$state/node.pid" ] && kill -0 "$(cat "$state/node.pid")" 2>/dev/null && api_ready; then
    say "already running"
    echo "$state/admin.kubeconfig"
    exit 0
fi

missing=()
for pkg in containerd runc containernetworking-plugins iptables ipset conntrack iproute2 \
    openssl curl util-linux; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
    say "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

mkdir -p "$state"/{pki,log,cni,etcd,containerd,kubelet,pod-logs,local-path,run}

# -- the network: a namespace and a veth pair, nothing else on this host --------------
if ! ip netns list | grep -qw "$netns"; then
    ip netns add "$netns"
fi
if ! ip link show elnode0 >/dev/null 2>&1; then
    ip link add elnode0 type veth peer name eth0 netns "$netns"
    ip addr add "$host_ip/24" dev elnode0
    ip link set elnode0 up
    ip -n "$netns" addr add "$node_ip/24" dev eth0
    ip -n "$netns" link set eth0 up
    ip -n "$netns" link set lo up
    ip -n "$netns" route add default via "$host_ip"
fi
# Pod traffic that crosses the bridge goes through iptables (Services, NetworkPolicy);
# per namespace, so the host's setting is not touched.
ip netns exec "$netns" sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1

# -- certificates -------------------------------------------------------------------
pki=$state/pki
issue() { # name subject extended-key-usage [subjectAltName]
    local name=$1 subject=$2 usage=$3 san=${4:-}
    [ -f "$pki/$name.crt" ] && return
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "$subject" \
        -keyout "$pki/$name.key" -out "$pki/$name.csr" 2>/dev/null
    openssl x509 -req -in "$pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -days 365 \
        -set_serial "0x$(openssl rand -hex 16)" -out "$pki/$name.crt" \
        -extfile <(printf 'keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=%s\n%s' \
            "$usage" "${san:+subjectAltName=$san}") 2>/dev/null
    rm "$pki/$name.csr"
}
if [ ! -f "$pki/ca.crt" ]; then
    openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 \
        -subj "/CN=epochlog-cluster-ca" -keyout "$pki/ca.key" -out "$pki/ca.crt" 2>/dev/null
    openssl ecparam -name prime256v1 -genkey -noout -out "$pki/sa.key"
    openssl ec -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
fi
issue apiserver "/CN=kube-apiserver" serverAuth \
    "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:10.96.0.1,IP:$node_ip,IP:127.0.0.1"
issue apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
issue kubelet "/CN=$node" serverAuth "DNS:$node,IP:$node_ip"
issue admin "/O=system:masters/CN=epochlog-cluster-admin" clientAuth
issue controller-manager "/CN=system:kube-controller-manager" clientAuth
issue scheduler "/CN=system:kube-scheduler" clientAuth
issue node "/O=system:nodes/CN=system:node:$node" clientAuth
issue proxy "/CN=system:kube-proxy" clientAuth
issue netpol "/CN=epochlog-cluster:kube-router" clientAuth
chmod 600 "$pki"/*.key

kubeconfig() { # name user
    cat >"$state/$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: epochlog-cluster
  cluster:
    server: $api
    certificate-authority: $pki/ca.crt
users:
- name: $1
  user:
    client-certificate: $pki/$1.crt
    client-key: $pki/$1.key
contexts:
- name: epochlog-cluster
  context: {cluster: epochlog-cluster, user: $1}
current-context: epochlog-cluster
EOF
}
for who in admin controller-manager scheduler node proxy netpol; do
    kubeconfig "$who"
done

# -- configuration --------------------------------------------------------------------
cat >"$state/containerd.toml" <<EOF
version = 2
root = "$state/containerd"
state = "/run/containerd"
[grpc]
  address = "/run/containerd/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/epochlog-cluster/pause:$key"
  # runc cannot lower the oom_score_adj of its own child without CAP_SYS_RESOURCE,
  # which this machine does not grant: without this, no sandbox starts.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$state/cni"
EOF
cat >"$state/cni/10-epochlog.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "epochlog",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.0.0/24"}]],
              "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$state/cni/ipam"}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
# No upstream resolver: the node reaches nothing beyond this host.
echo "options ndots:1" >"$state/resolv.conf"
cat >"$state/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $node_ip
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
tlsCertFile: $pki/kubelet.crt
tlsPrivateKeyFile: $pki/kubelet.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
cgroupDriver: cgroupfs
cgroupRoot: /epochlog-cluster
# This machine's kernel mounts cgroup v1, which Kubernetes 1.35 runs only when told to.
failCgroupV1: false
failSwapOn: false
clusterDomain: cluster.local
clusterDNS: [10.96.0.10]
resolvConf: $state/resolv.conf
podLogsDir: $state/pod-logs
serializeImagePulls: false
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 99
imageGCLowThresholdPercent: 98
maxPods: 110
EOF
cat >"$state/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clusterCIDR: $cluster_cidr
hostnameOverride: $node
bindAddress: $node_ip
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
clientConnection: {kubeconfig: $state/proxy.kubeconfig}
# The conntrack table is the node namespace's own; its size is the host's to set.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
cat >"$state/node.env" <<EOF
STATE=$state
BIN=$bin
NODE=$node
NODE_IP=$node_ip
SERVICE_CIDR=$service_cidr
CLUSTER_CIDR=$cluster_cidr
EOF

# -- start ----------------------------------------------------------------------------
say "starting the node (logs in $state/log)"
: >"$state/node.pid"
setsid nsenter --net="/run/netns/$netns" -- unshare --mount --propagation private -- \
    "$here/node.sh" "$state/node.env" >>"$state/log/node.log" 2>&1 </dev/null &
until [ -s "$state/node.pid" ]; do
    kill -0 $! 2>/dev/null || { tail -20 "$state/log/node.log" >&2; exit 1; }
    sleep 0.2
done
until api_ready; do
    kill -0 "$(cat "$state/node.pid")" 2>/dev/null || { tail -20 "$state/log/node.log" >&2; exit 1; }
    sleep 0.5
done
say "API server ready after $((SECONDS - started)) s"

# The node's images: what build.sh made, into containerd's k8s.io namespace.
"$here/load-images.sh" "localhost/epochlog-cluster/pause:$key" \
    "localhost/epochlog-cluster/coredns:$key" \
    "localhost/epochlog-cluster/local-path-provisioner:$key" \
    "localhost/epochlog-cluster/busybox:$key"

sed -e "s|@KEY@|$key|g" -e "s|@STATE@|$state|g" "$here/addons.yaml" | kubectl_admin apply -f - >/dev/null
kubectl_admin wait --for=condition=Ready "node/$node" --timeout=300s >/dev/null
kubectl_admin -n kube-system rollout status deployment/coredns --timeout=300s >/dev/null
kubectl_admin -n local-path-storage rollout status deployment/local-path-provisioner \
    --timeout=300s >/dev/null
say "node Ready, DNS and storage running, $((SECONDS - started)) s after start"
say "kubectl: export KUBECONFIG=$state/admin.kubeconfig PATH=$bin:\$PATH"
echo "$state/admin.kubeconfig"
