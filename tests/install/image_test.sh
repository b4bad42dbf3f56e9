#!/bin/bash
# tools/make-image.sh (tests/install/BUILD says what is checked).
set -u
src=$PWD
work=$(mktemp -d /tmp/rdzv-image-test-XXXXXX)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }
[ "$(id -u)" = 0 ] || { echo "FAIL: needs root (buildah, chroot)"; exit 1; }
for t in buildah umoci debootstrap; do
  command -v "$t" >/dev/null || { echo "FAIL: $t missing (tools/install-deps.sh)"; exit 1; }
done

# 1. The image, named as the manifests name it.
archive=$("$src/tools/make-image.sh" --from "$src" --out "$work" 2>"$work/make.err") || {
  cat "$work/make.err"
  echo "FAIL: tools/make-image.sh"
  exit 1
}
version=$("$src/tools/rdzvd" --version | awk '{print $2}')
names=$(grep -ho 'image: rdzv:[^ ]*' "$src"/deploy/k8s/root.yaml "$src"/deploy/k8s/job.yaml \
  "$src"/deploy/k8s/jobset.yaml | sort -u)
if [ "$names" = "image: rdzv:$version" ] && [ -s "$archive" ] &&
  buildah --storage-driver vfs inspect --type image "rdzv:$version" >/dev/null 2>&1; then
  ok "image rdzv:$version ($(du -h "$archive" | cut -f1) oci-archive), the name and tag of deploy/k8s"
else
  fail "image name: the manifests say [$names], the archive is [$archive]"
fi

# 2. Run it as containers: a root and a node (host network, the node's
# socket in a volume), and rdzvctl from a third container setting a key
# through the node and reading it at the root. crun fails on this machine
# (setrlimit, then cgroups in hybrid mode): runc with cgroupfs and
# rlimits within the caller's hard limits works; where podman cannot run
# containers at all, step 3's unpacked image is what was checked.
ran=""
pod() {
  podman --storage-driver vfs --runtime runc --cgroup-manager cgroupfs "$@"
}
prun() { pod run --rm --network host --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 "$@"; }
if command -v podman >/dev/null && command -v runc >/dev/null &&
  out=$(prun "localhost/rdzv:$version" rdzvd --version 2>&1) &&
  grep -q "^rdzvd $version" <<<"$out"; then
  mkdir -p "$work/vol"
  chown 65532:65532 "$work/vol"
  cname="rdzv-image-test-$$"
  prun -d --name "$cname-root" -v "$work/vol:/run/t" "localhost/rdzv:$version" \
    rdzvd --role=root --name=ctr-root --listen=127.0.0.1:0 --port-file=/run/t/root.port \
    >/dev/null 2>"$work/pod-root.err"
  for _ in $(seq 100); do [ -s "$work/vol/root.port" ] && break; sleep 0.1; done
  prun -d --name "$cname-node" -v "$work/vol:/run/t" "localhost/rdzv:$version" \
    rdzvd --role=node --name=ctr-node --parent="127.0.0.1:$(cat "$work/vol/root.port" 2>/dev/null)" \
    --unix=/run/t/node.sock >/dev/null 2>"$work/pod-node.err"
  for _ in $(seq 100); do [ -S "$work/vol/node.sock" ] && break; sleep 0.1; done
  if prun -v "$work/vol:/run/t" "localhost/rdzv:$version" rdzvctl --addr unix:/run/t/node.sock \
    --job img --timeout 10 set k "from a container" &&
    v=$(prun "localhost/rdzv:$version" rdzvctl --addr "127.0.0.1:$(cat "$work/vol/root.port")" \
      --job img --timeout 10 get k) && [ "$v" = "from a container" ]; then
    ok "podman (runc): a root and a node in containers of rdzv:$version, user 65532; a key set through the node from a third, read at the root"
    ran=podman
  else
    fail "podman: root and node containers: [${v:-}]"
    pod logs "$cname-root" 2>&1 | tail -5
    pod logs "$cname-node" 2>&1 | tail -5
  fi
  pod rm -f "$cname-root" "$cname-node" >/dev/null 2>&1
else
  why=$(if command -v podman >/dev/null; then tail -1 <<<"${out:-}"; else echo "podman is not installed"; fi)
  echo "note: not run as a container ($why): the unpacked image is checked instead"
fi

# 3. The image unpacked (umoci): its config, its files, and a root and a
# node run from its root as user 65532.
mkdir -p "$work/oci"
tar -xf "$archive" -C "$work/oci"
if ! umoci unpack --image "$work/oci:rdzv:$version" "$work/bundle" >"$work/umoci.log" 2>&1; then
  cat "$work/umoci.log"
  fail "umoci unpack"
  exit 1
fi
cfg=$work/bundle/config.json
r=$work/bundle/rootfs
if python3 - "$cfg" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
p = c["process"]
assert p["user"]["uid"] == 65532 and p["user"]["gid"] == 65532, p["user"]
path = [e for e in p["env"] if e.startswith("PATH=")][0]
assert "/usr/sbin" in path.split("=", 1)[1].split(":"), path
assert p["args"] == ["rdzvd", "--help"], p["args"]
PY
then
  ok "config: user 65532:65532, PATH with /usr/sbin, command rdzvd --help"
else
  fail "the image's config ($cfg)"
fi
missing=""
for f in usr/sbin/rdzvd usr/bin/rdzvctl usr/bin/rdzv-example usr/lib/librdzv.so.0 bin/sh; do
  [ -e "$r/$f" ] || missing+=" $f"
done
grep -q '^rdzv:x:65532:65532:' "$r/etc/passwd" || missing+=" (user 65532 in /etc/passwd)"
unresolved=$(chroot "$r" /usr/bin/ldd /usr/sbin/rdzvd /usr/bin/rdzvctl /usr/bin/rdzv-example \
  /usr/lib/librdzv.so.0 2>&1 |
  grep -c "not found")
if [ -z "$missing" ] && [ "$unresolved" = 0 ]; then
  ok "files: rdzvd, rdzvctl, rdzv-example, librdzv.so.0, /bin/sh, user rdzv; every library resolves inside"
else
  fail "the image lacks:$missing; $unresolved libraries not found inside"
fi

# A root and a node from the image's root, as user 65532, and a key set
# and read back through the node.
mkdir -p "$r/run/t"
chown 65532:65532 "$r/run/t"
as() { chroot --userspec=65532:65532 "$r" "$@"; }
as /usr/sbin/rdzvd --role=root --name=img-root --listen=127.0.0.1:0 \
  --port-file=/run/t/root.port --log-level=1 2>"$work/root.log" & pids+=($!)
for _ in $(seq 100); do [ -s "$r/run/t/root.port" ] && break; sleep 0.1; done
as /usr/sbin/rdzvd --role=node --name=img-node --parent="127.0.0.1:$(cat "$r/run/t/root.port")" \
  --unix=/run/t/node.sock --log-level=1 2>"$work/node.log" & pids+=($!)
for _ in $(seq 100); do [ -S "$r/run/t/node.sock" ] && break; sleep 0.1; done
if as /usr/bin/rdzvctl --addr unix:/run/t/node.sock --job img --timeout 10 set k "from the image" &&
  v=$(as /usr/bin/rdzvctl --addr "127.0.0.1:$(cat "$r/run/t/root.port")" --job img \
    --timeout 10 get k) && [ "$v" = "from the image" ]; then
  ok "in the image as user 65532: a root and a node; a key set through the node, read at the root"
  ran=${ran:+$ran and }unpacked
else
  fail "root and node from the image: [${v:-}]"
  tail -5 "$work/root.log" "$work/node.log"
fi
echo "ran: ${ran:-nothing}"
[ "$fails" = 0 ] && echo "image_test: PASS" || echo "image_test: FAIL"
[ "$fails" = 0 ]
