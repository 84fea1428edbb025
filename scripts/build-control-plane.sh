#!/usr/bin/env bash
# Builds the real Kubernetes control plane the tests in tests/controlplane start:
# kube-apiserver and kube-scheduler (k8s.io/kubernetes) and etcd
# (go.etcd.io/etcd/server/v3), from the versions pinned in tools/controlplane/go.mod,
# into DIR (default .tools/bin). One `go build` of the three shares their packages.
# Idempotent: a stamp holding go.sum's hash skips the build when nothing changed.
# Without Go it says so and exits 0; the tests then skip with that reason.
set -euo pipefail
cd "$(dirname "$0")/.."
target="$(realpath -m "${1:-.tools/bin}")"
module="$PWD/tools/controlplane"

if ! command -v go >/dev/null; then
  echo "build-control-plane: no Go toolchain on PATH; tests/controlplane will skip" >&2
  exit 0
fi

stamp="$target/.control-plane.stamp"
want="$(sha256sum "$module/go.mod" "$module/go.sum" | sha256sum | cut -d' ' -f1)"
if [ -x "$target/kube-apiserver" ] && [ -x "$target/kube-scheduler" ] && [ -x "$target/etcd" ] \
   && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  exit 0
fi

mkdir -p "$target"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
start=$SECONDS
(
  cd "$module"
  # The machine's own Go (go.mod needs 1.26); -p follows the cores.
  GOTOOLCHAIN=local GOFLAGS="-mod=readonly -buildvcs=false" \
    go build -p "$(nproc)" -trimpath -ldflags="-s -w" -o "$out/" tool
)
# A package path ending in a major version (.../server/v3) names its binary after
# the element before it.
mv "$out/server" "$out/etcd"
for bin in kube-apiserver kube-scheduler etcd; do
  install -m 0755 "$out/$bin" "$target/$bin"
done
echo "$want" > "$stamp"
echo "build-control-plane: built kube-apiserver, kube-scheduler, etcd in $((SECONDS - start))s" >&2
