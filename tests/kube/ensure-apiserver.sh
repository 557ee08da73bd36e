#!/bin/bash
# Build kube-apiserver (Kubernetes 1.20.2 from Debian's source, ../shared/recipes/kubernetes) once per
# machine into a cache outside the repository. run-all.sh starts this in the background before pytest
# (the build takes ~9 min on 2 cores); tests/support/kube_apiserver.py waits for build.done or
# build.failed in the cache. Usage: ensure-apiserver.sh   (cache: $GW_KUBE_CACHE, default /var/cache/gangwatch/kube)
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${GW_KUBE_CACHE:-/var/cache/gangwatch/kube}
SHARED=${GW_SHARED:-$HERE/../../../shared}
BIN=$CACHE/kubernetes-1.20.2/_output/bin/kube-apiserver
mkdir -p "$CACHE" || exit 1
rm -f "$CACHE/build.done" "$CACHE/build.failed"
if [ -x "$BIN" ]; then echo "$BIN" > "$CACHE/build.done"; exit 0; fi
echo $$ > "$CACHE/build.pid"   # the tests wait only while this build lives
trap 'rm -f "$CACHE/build.pid"' EXIT
if "$SHARED/recipes/kubernetes/build-kube-apiserver-from-debian.sh" "$CACHE" > "$CACHE/build.log" 2>&1 && [ -x "$BIN" ]; then
  echo "$BIN" > "$CACHE/build.done"
else
  tail -20 "$CACHE/build.log" > "$CACHE/build.failed"; exit 1
fi
