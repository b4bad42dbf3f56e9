#!/bin/bash
# The Python bindings end to end (tests/python/BUILD says what).
set -u
src=$PWD
dir=$(mktemp -d /tmp/rdzv-python-XXXXXX)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT
"$src/tools/rdzvd" --role=root --listen=127.0.0.1:0 --port-file="$dir/root.port" \
  --log-level=0 & pids+=($!)
for _ in $(seq 100); do [ -s "$dir/root.port" ] && break; sleep 0.1; done
for n in a b; do
  "$src/tools/rdzvd" --role=node --parent="127.0.0.1:$(cat "$dir/root.port")" \
    --unix="$dir/$n.sock" --log-level=0 & pids+=($!)
done
# Two more nodes for the limits of TCPStore key spaces: none, and one.
"$src/tools/rdzvd" --role=node --parent="127.0.0.1:$(cat "$dir/root.port")" \
  --unix="$dir/z.sock" --name=z --tcpstore-spaces=0 --log-level=0 & pids+=($!)
"$src/tools/rdzvd" --role=node --parent="127.0.0.1:$(cat "$dir/root.port")" \
  --unix="$dir/s.sock" --name=s --tcpstore-spaces=1 --log-level=0 & pids+=($!)
for n in a b z s; do
  for _ in $(seq 100); do [ -S "$dir/$n.sock" ] && break; sleep 0.1; done
done
# Installed as a user installs it, with pip from a copy of the checkout's
# python/ (offline: no index, no build isolation).
cp -rL "$src/python" "$dir/pkg"
if ! /usr/bin/python3 -m pip install --quiet --no-build-isolation --no-deps \
  --no-index --target "$dir/site" "$dir/pkg" >"$dir/pip.log" 2>&1; then
  cat "$dir/pip.log"
  echo "FAIL: pip install of python/"
  exit 1
fi
echo "ok: pip install of python/ into $dir/site"
export RDZV_LIBRARY=$src/librdzv.so.0 PYTHONPATH=$dir/site
want=$("$src/tools/rdzvd" --version | awk '{print $2}')
/usr/bin/python3 "$src/tests/python/python_test.py" "$dir" "$want" \
  "$src/python/pyproject.toml" py311 || exit 1

# The same with the torch 2.6 chroot's Python 3.13 (Debian trixie; the
# chroot sees the host's /tmp and loopback): the package and the library
# copied under $dir, the daemons outside.
chroot_sh=$src/tools/torch2-chroot.sh
croot="${RDZV_TORCH2_CHROOT:-/var/cache/rdzv/trixie-torch}"
if [ "$(id -u)" != 0 ] || ! "$chroot_sh" --dir "$croot" --check; then
  echo "FAIL: no torch 2.x chroot at $croot, or not root: build it with" \
    "tools/torch2-chroot.sh (tools/install-deps.sh does)"
  exit 1
fi
cp -L "$src/librdzv.so.0" "$src/tests/python/python_test.py" \
  "$src/python/pyproject.toml" "$dir/"
"$chroot_sh" --dir "$croot" --exec /usr/bin/env RDZV_LIBRARY="$dir/librdzv.so.0" \
  PYTHONPATH="$dir/site" python3 "$dir/python_test.py" "$dir" "$want" \
  "$dir/pyproject.toml" py313 || exit 1
