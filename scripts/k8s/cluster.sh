#!/usr/bin/env bash
# A real one-node Kubernetes 1.20 cluster on this machine, from Debian's own packages and
# Kubernetes' source as Debian ships it (facts: docs/deploy.md, "A real cluster on one machine").
#   scripts/k8s/cluster.sh build   install the packages, build the binaries (once; reused)
#   scripts/k8s/cluster.sh up      start etcd, the control plane, containerd, the kubelet, DNS
#   scripts/k8s/cluster.sh down    stop everything `up` started and remove its state
#   scripts/k8s/cluster.sh env     print the exports that point kubectl and helm at it
# Everything lives under $K8S_DIR (default build-k8s/, ignored by git). Needs root.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
dir=${K8S_DIR:-$root/build-k8s}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
bin=$dir/bin
state=$dir/state
netns=rlmesh-k8s
host_ip=10.231.0.1   # the host's end of the veth pair
node_ip=10.231.0.2   # the node: apiserver, kubelet, containerd live in the namespace
pod_cidr=10.232.0.0/16
service_cidr=10.233.0.0/16
dns_ip=10.231.0.2    # dnsmasq answers cluster names on the node address
k8s_version=1.20.2
k8s_tarball=kubernetes_1.20.5+really1.20.2.orig.tar.gz

log() { echo "k8s: $*" >&2; }

packages=(podman buildah runc etcd-server containerd containernetworking-plugins mmdebstrap
  uidmap slirp4netns fuse-overlayfs dnsmasq-base golang-go iproute2 openssl curl rsync
  util-linux)

install_packages() {
  local missing=() p s
  for p in "${packages[@]}"; do
    s=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    [[ $s == "install ok installed" ]] || missing+=("$p")
  done
  if ((${#missing[@]})); then
    log "installing Debian packages: ${missing[*]}"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
}

# Kubernetes' source from Debian's archive (the orig tarball of the kubernetes source package,
# vendor/ included), and the four binaries built from it. Skipped when they are there.
build_binaries() {
  local want=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl) missing=() w
  for w in "${want[@]}"; do [[ -x $bin/$w ]] || missing+=("$w"); done
  ((${#missing[@]})) || return 0
  local src=$dir/src/kubernetes
  if [[ ! -f $src/Makefile ]]; then
    mkdir -p "$dir/src"
    local mirror
    mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    [[ -n $mirror ]] || mirror=http://deb.debian.org/debian
    log "fetching Kubernetes $k8s_version source from $mirror"
    /usr/lib/apt/apt-helper download-file "$mirror/pool/main/k/kubernetes/$k8s_tarball" "$dir/src/$k8s_tarball"
    rm -rf "$src.tmp" && mkdir -p "$src.tmp"
    tar -xzf "$dir/src/$k8s_tarball" -C "$src.tmp" --strip-components=1
    mv "$src.tmp" "$src"
  fi
  local gopath=$dir/gopath
  mkdir -p "$gopath/src/k8s.io" "$bin"
  ln -sfn "$src" "$gopath/src/k8s.io/kubernetes"
  for w in "${missing[@]}"; do
    log "building $w (all five: about 10 minutes on 2 cores)"
    (cd "$gopath/src/k8s.io/kubernetes" &&
      GOPATH=$gopath GO111MODULE=off CGO_ENABLED=0 GOFLAGS=-mod=vendor KUBE_GIT_VERSION=v$k8s_version \
        KUBE_GIT_TREE_STATE=clean KUBE_BUILD_PLATFORMS=linux/amd64 make WHAT=cmd/$w >&2)
    cp "$src/_output/local/bin/linux/amd64/$w" "$bin/$w.tmp" && mv "$bin/$w.tmp" "$bin/$w"
  done
}

# The network: the node lives in its own namespace behind a veth pair, so its pods, bridge
# and addresses leave the host's network alone; the host routes the pod range to it (that is
# how a Prometheus outside the cluster reaches the pods).
in_node() { nsenter --net=/var/run/netns/$netns "$@"; }

setup_network() {
  ip netns add $netns
  ip link add rlk8s-host type veth peer name rlk8s-node
  ip link set rlk8s-node netns $netns
  ip addr add $host_ip/24 dev rlk8s-host
  ip link set rlk8s-host up
  in_node ip addr add $node_ip/24 dev rlk8s-node
  in_node ip link set rlk8s-node up
  in_node ip link set lo up
  in_node ip route add default via $host_ip
  in_node sysctl -q -w net.ipv4.ip_forward=1
  ip route add $pod_cidr via $node_ip
}

# Starts "$@" in the node's namespace in the background, its output in $state/log/NAME.log.
# nsenter and setsid exec, so $! is the process itself.
start() {
  local name=$1; shift
  nsenter --net=/var/run/netns/$netns setsid "$@" >"$state/log/$name.log" 2>&1 </dev/null &
  echo $! >"$state/pid/$name"
}

wait_for() {  # wait_for WHAT SECONDS COMMAND...
  local what=$1 budget=$2 i; shift 2
  for ((i = 0; i < budget; i++)); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 1
  done
  log "$what did not come up in ${budget}s; its log:"; tail -n 30 "$state/log/$what.log" >&2 || true
  return 1
}

write_configs() {
  mkdir -p "$state"/{log,pid,pki,etcd,containerd,kubelet,cni/net.d,cni/cache,pods}
  local pki=$state/pki
  openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
  # The API server's serving certificate, signed by a CA of its own (the root CA that
  # service-account tokens carry).
  openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj /CN=rlmesh-k8s-ca \
    -keyout "$pki/ca.key" -out "$pki/ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj /CN=kube-apiserver -keyout "$pki/apiserver.key" \
    -out "$pki/apiserver.csr" 2>/dev/null
  printf 'subjectAltName=IP:%s,IP:10.233.0.1,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default.svc.cluster.local\n' \
    "$node_ip" >"$pki/san.ext"
  openssl x509 -req -in "$pki/apiserver.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
    -days 30 -extfile "$pki/san.ext" -out "$pki/apiserver.crt" 2>/dev/null
  local token; token=$(openssl rand -hex 16)
  echo "$token,admin,admin,system:masters" >"$pki/tokens.csv"
  cat >"$state/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: rlmesh-k8s
  cluster: {server: "https://$node_ip:6443", certificate-authority: "$pki/ca.crt"}
users:
- name: admin
  user: {token: "$token"}
contexts:
- name: rlmesh-k8s
  context: {cluster: rlmesh-k8s, user: admin}
current-context: rlmesh-k8s
KC
  cat >"$state/containerd/config.toml" <<CT
version = 2
root = "$state/containerd/root"
state = "$state/containerd/state"
[grpc]
  address = "$state/containerd/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/pause:3.2"
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
    conf_dir = "$state/cni/net.d"
CT
  cat >"$state/cni/net.d/10-rlmesh.conflist" <<CNI
{"cniVersion": "0.4.0", "name": "rlmesh-k8s", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$pod_cidr"}]],
            "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$state/cni/cache"}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
CNI
  printf 'nameserver %s\n' "$dns_ip" >"$state/resolv.conf"
  cat >"$state/kubelet.yaml" <<KL
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failSwapOn: false
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
clusterDomain: cluster.local
clusterDNS: ["$dns_ip"]
resolvConf: "$state/resolv.conf"
staticPodPath: "$state/pods"
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%"}
imageGCHighThresholdPercent: 100
serializeImagePulls: false
KL
}

up() {
  [[ $(id -u) == 0 ]] || { log "needs root (network namespaces, containerd, kubelet)"; exit 1; }
  if [[ -e /var/run/netns/$netns ]]; then log "already up (scripts/k8s/cluster.sh down first)"; exit 1; fi
  for w in kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl; do
    [[ -x $bin/$w ]] || { log "$bin/$w missing: run scripts/k8s/cluster.sh build"; exit 1; }
  done
  rm -rf "$state"
  write_configs
  [[ -e /var/log/pods || -e /var/log/containers ]] || touch "$state/owns-var-log-pods"
  setup_network
  local kc=$state/kubeconfig pki=$state/pki
  start etcd etcd --name rlmesh-k8s --data-dir "$state/etcd" \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster rlmesh-k8s=http://127.0.0.1:2380
  wait_for etcd 30 in_node curl -sf http://127.0.0.1:2379/health
  start kube-apiserver "$bin/kube-apiserver" --etcd-servers=http://127.0.0.1:2379 \
    --bind-address=0.0.0.0 --advertise-address=$node_ip --secure-port=6443 \
    --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
    --client-ca-file="$pki/ca.crt" --token-auth-file="$pki/tokens.csv" \
    --authorization-mode=AlwaysAllow --anonymous-auth=false --allow-privileged=true \
    --kubelet-preferred-address-types=InternalIP \
    --service-cluster-ip-range=$service_cidr --endpoint-reconciler-type=none \
    --service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local
  wait_for kube-apiserver 120 "$bin/kubectl" --kubeconfig "$kc" get --raw /readyz
  start kube-controller-manager "$bin/kube-controller-manager" --kubeconfig="$kc" \
    --service-account-private-key-file="$pki/sa.key" --root-ca-file="$pki/ca.crt" \
    --leader-elect=false --controllers='*,-nodeipam,-cloud-node-lifecycle' --node-monitor-grace-period=20s
  start kube-scheduler "$bin/kube-scheduler" --kubeconfig="$kc" --leader-elect=false
  start containerd containerd --config "$state/containerd/config.toml"
  wait_for containerd 30 test -S "$state/containerd/containerd.sock"
  start kubelet "$bin/kubelet" --config="$state/kubelet.yaml" --kubeconfig="$kc" \
    --container-runtime=remote --container-runtime-endpoint="unix://$state/containerd/containerd.sock" \
    --root-dir="$state/kubelet" --cert-dir="$state/kubelet/pki" --hostname-override=rlmesh-node \
    --node-ip=$node_ip --pod-infra-container-image=localhost/pause:3.2
  wait_for kubelet 120 node_ready
  # DNS: dnsmasq answers the cluster's names from a hosts file that dns-sync keeps in step with
  # the Services' endpoints and the pods' per-pod names (Debian ships no CoreDNS).
  : >"$state/hosts"
  start dnsmasq dnsmasq --keep-in-foreground --no-resolv --no-hosts --local=/cluster.local/ \
    --addn-hosts="$state/hosts" --listen-address=$dns_ip --bind-interfaces --pid-file="$state/dnsmasq.pid" \
    --user=root --log-facility=-
  sleep 1
  start dns-sync node scripts/k8s/dns-sync.mjs --kubectl "$bin/kubectl" --kubeconfig "$kc" \
    --hosts "$state/hosts" --dnsmasq-pid-file "$state/dnsmasq.pid"
  log "up: export KUBECONFIG=$kc (node $node_ip, pods $pod_cidr)"
}

node_ready() {
  "$bin/kubectl" --kubeconfig "$state/kubeconfig" get node rlmesh-node \
    -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' | grep -q True
}

down() {
  local f pid
  # The kubelet first, then every container it left, then the rest.
  for name in dns-sync dnsmasq kubelet; do
    [[ -f $state/pid/$name ]] && kill "$(cat "$state/pid/$name")" 2>/dev/null || true
  done
  if [[ -S $state/containerd/containerd.sock ]]; then
    local ctr=(ctr --address "$state/containerd/containerd.sock" -n k8s.io)
    for t in $("${ctr[@]}" tasks ls -q 2>/dev/null); do "${ctr[@]}" tasks kill -s SIGKILL "$t" 2>/dev/null || true; done
    sleep 2
    for t in $("${ctr[@]}" tasks ls -q 2>/dev/null); do "${ctr[@]}" tasks delete -f "$t" 2>/dev/null || true; done
  fi
  for f in "$state"/pid/*; do
    [[ -f $f ]] || continue
    pid=$(cat "$f"); kill "$pid" 2>/dev/null || true
  done
  sleep 2
  for f in "$state"/pid/*; do
    [[ -f $f ]] || continue
    pid=$(cat "$f"); kill -9 "$pid" 2>/dev/null || true
  done
  # Anything else of this cluster (every process of it names a path under $state), then the
  # containers' shims, which outlive containerd.
  pkill -9 -f -- "$state/" 2>/dev/null || true
  # Containers left running (their processes sit in the kubelet's kubepods cgroups), and then
  # those cgroups. This assumes no other kubelet runs on the machine, as on a development or
  # CI machine: the kubepods cgroups are not named after the cluster.
  for f in /proc/[0-9]*/cgroup; do
    grep -q '/kubepods' "$f" 2>/dev/null && kill -9 "$(basename "$(dirname "$f")")" 2>/dev/null || true
  done
  sleep 1
  find /sys/fs/cgroup -depth -type d -name 'kubepods*' 2>/dev/null | while read -r d; do
    find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  if [[ -d $state ]]; then
    grep -o " $state[^ ]*" /proc/mounts | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
  fi
  # The pods' network namespaces (containerd names them cni-*), once nothing is in them.
  for n in $(ip netns list 2>/dev/null | awk '$1 ~ /^cni-/ {print $1}'); do
    [[ -z $(ip netns pids "$n" 2>/dev/null) ]] && ip netns del "$n" 2>/dev/null || true
  done
  # The kubelet's container logs, where this cluster made those folders.
  if [[ -f $state/owns-var-log-pods ]]; then rm -rf /var/log/pods /var/log/containers; fi
  ip route del $pod_cidr 2>/dev/null || true
  ip link del rlk8s-host 2>/dev/null || true
  ip netns del $netns 2>/dev/null || true
  rm -rf "$state"
  log "down"
}

case ${1:-} in
  build) install_packages; build_binaries ;;
  up) up ;;
  down) down ;;
  env) echo "export KUBECONFIG=$state/kubeconfig PATH=$bin:\$PATH" ;;
  *) echo "usage: $0 build|up|down|env" >&2; exit 2 ;;
esac
