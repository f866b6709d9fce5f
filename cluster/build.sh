#!/usr/bin/env bash
# Builds what the test cluster runs (`make cluster` calls it), once per set of pinned
# versions, into a cache outside the repository:
#
#   $EPOCHLOG_CLUSTER_CACHE/bin-<key>/   (default ~/.cache/epochlog-cluster)
#     etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy
#     kubectl                   from k8s.io/kubernetes and etcd (cluster/kubernetes)
#     coredns                   CoreDNS with the plugins of a cluster (cluster/coredns)
#     kube-router               kube-router's NetworkPolicy controller (cluster/netpol)
#     local-path-provisioner    Rancher's provisioner (cluster/localpath)
#     helm                      Helm's command line (cluster/helm)
#     pause                     the pod sandbox's process (cluster/pause/pause.c)
#
# and the images the node runs from them, in the local image storage that buildah
# shares with podman (cluster/up.sh imports them into the node's containerd):
#
#   localhost/epochlog-cluster/pause, .../coredns, .../local-path-provisioner and
#   .../busybox (the provisioner's helper pods: Debian's busybox-static), tagged <key>.
#
# <key> is a hash of every go.mod and go.sum here, the sources, this script and the Go
# version: a pinned version changed is a new build; anything else reuses the cache.
# Go's own caches (~/go/pkg/mod, ~/.cache/go-build) are reused across keys. The
# time a build took is in bin-<key>/BUILD_SECONDS. Prints the binaries' directory.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${EPOCHLOG_CLUSTER_CACHE:-$HOME/.cache/epochlog-cluster}

say() { printf 'cluster build: %s\n' "$*" >&2; }

key=$( (go version; cd "$here" && cat build.sh ./*/go.mod ./*/go.sum ./*/*.go pause/pause.c) \
    | sha256sum | cut -c1-12)
out=$cache/bin-$key
if [ -f "$out/BUILD_SECONDS" ]; then
    echo "$out"
    exit 0
fi

apt_install() {
    local missing=()
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
    done
    if [ "${#missing[@]}" -gt 0 ]; then
        say "installing ${missing[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
}
apt_install gcc libc6-dev buildah podman busybox-static

started=$SECONDS
mkdir -p "$out.partial"
kubernetes=$(awk '$1 == "k8s.io/kubernetes" {print $2}' "$here/kubernetes/go.mod")
minor=$(echo "$kubernetes" | cut -d. -f2)
# What `kubectl version` and the API server's /version report: the release built.
version_flags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    version_flags+=" -X $pkg.gitVersion=$kubernetes -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    version_flags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
export CGO_ENABLED=0 GOFLAGS="-trimpath -buildvcs=false"

build() {
    local module=$1
    shift
    local t=$SECONDS
    say "$module: building $* (minutes on 2 cores when Go's caches are cold)"
    (cd "$here/$module" && go build -ldflags "-s -w $version_flags" -o "$out.partial/" "$@")
    say "$module: built in $((SECONDS - t)) s"
}
build kubernetes ./etcd k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy k8s.io/kubernetes/cmd/kubectl
build coredns .
build netpol github.com/cloudnativelabs/kube-router/v2/cmd/kube-router
build localpath github.com/rancher/local-path-provisioner
build helm helm.sh/helm/v4/cmd/helm
gcc -static -O2 -Wall -o "$out.partial/pause" "$here/pause/pause.c"
strip "$out.partial/pause"

# Images of one static binary each, on nothing.
image() {
    local name=$1 binary=$2
    shift 2
    local ref=localhost/epochlog-cluster/$name:$key
    local c
    c=$(buildah from scratch)
    buildah copy "$c" "$binary" "/$(basename "$binary")" >/dev/null
    buildah config --entrypoint "[\"/$(basename "$binary")\"]" "$@" "$c"
    buildah commit -q "$c" "$ref" >/dev/null
    buildah rm "$c" >/dev/null
    say "image $ref"
}
image pause "$out.partial/pause" --user 65535:65535
image coredns "$out.partial/coredns" --user 65532:65532
image local-path-provisioner "$out.partial/local-path-provisioner"
c=$(buildah from scratch)
buildah copy "$c" /bin/busybox /bin/busybox >/dev/null
for tool in sh mkdir rm rmdir chmod ls cat; do
    buildah run --isolation chroot "$c" /bin/busybox ln -s busybox "/bin/$tool"
done
buildah config --entrypoint '["/bin/sh"]' --env PATH=/bin "$c"
buildah commit -q "$c" "localhost/epochlog-cluster/busybox:$key" >/dev/null
buildah rm "$c" >/dev/null

echo "$((SECONDS - started))" >"$out.partial/BUILD_SECONDS"
rm -rf "$out"
mv "$out.partial" "$out"
say "built in $((SECONDS - started)) s: $out"
echo "$out"
