#!/bin/bash
# librdzv.so.0's ABI (tests/abi/BUILD says what is checked).
set -u
src=$PWD
lib=$src/librdzv.so.0
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }

soname=$(readelf -d "$lib" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ "$soname" = librdzv.so.0 ] && ok "soname $soname" || fail "soname [$soname]"

want=$(python3 "$src/tools/gen-version-script.py" --list "$src"/include/rdzv/*.h)
got=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRVW]$/ {sub(/@.*/, "", $3); print $3}' |
  grep -v '^RDZV_0$' | sort -u)
extra=$(comm -13 <(echo "$want") <(echo "$got"))
missing=$(comm -23 <(echo "$want") <(echo "$got"))
[ -z "$extra" ] && ok "no export beyond the public headers" ||
  fail "exported but not in include/rdzv: $(echo $extra)"
[ -z "$missing" ] && ok "every public function exported ($(echo "$want" | wc -l))" ||
  fail "in include/rdzv but not exported: $(echo $missing)"
# Each export carries the version node.
unversioned=$(objdump -T "$lib" | awk '/ rdzv_/ && $0 !~ /RDZV_0/ {print $NF}')
[ -z "$unversioned" ] && ok "every export in version RDZV_0" ||
  fail "exports without RDZV_0: $unversioned"
needed=$(readelf -d "$lib" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p' | sort | tr '\n' ' ')
[ "$needed" = "libc.so.6 libcrypto.so.3 libssl.so.3 " ] && ok "needs only: $needed" ||
  fail "needs: $needed"

# A client through the library: a root, a node, a key set and read back.
dir=$(mktemp -d /tmp/rdzv-abi-XXXXXX)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT
"$src/tools/rdzvd" --role=root --listen=127.0.0.1:0 --port-file="$dir/root.port" \
  --log-level=0 & pids+=($!)
for _ in $(seq 100); do [ -s "$dir/root.port" ] && break; sleep 0.1; done
"$src/tools/rdzvd" --role=node --parent="127.0.0.1:$(cat "$dir/root.port")" \
  --unix="$dir/node.sock" --log-level=0 & pids+=($!)
for _ in $(seq 100); do [ -S "$dir/node.sock" ] && break; sleep 0.1; done
out=$(python3 - "$lib" "unix:$dir/node.sock" <<'PY'
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
lib.rdzv_strerror.restype = ctypes.c_char_p
print(lib.rdzv_strerror(-1009).decode())

# struct rdzv_client_opts's first fields (include/rdzv/client.h), then room
# for the rest, which rdzv_client_opts_init fills.
class Opts(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("version", ctypes.c_uint32),
                ("addr", ctypes.c_char_p), ("job_id", ctypes.c_char_p),
                ("rest", ctypes.c_byte * 4096)]

opts = Opts()
lib.rdzv_client_opts_init(ctypes.byref(opts))
assert 0 < opts.size <= ctypes.sizeof(Opts), opts.size
opts.addr, opts.job_id = sys.argv[2].encode(), b"abi"
client = ctypes.c_void_p()
rc = lib.rdzv_client_create(ctypes.byref(opts), ctypes.byref(client))
assert rc == 0, rc
rc = lib.rdzv_store_set(client, b"k", b"through librdzv.so", 18, 0,
                        ctypes.c_double(10.0))
assert rc == 0, rc
val, n = ctypes.c_void_p(), ctypes.c_size_t()
rc = lib.rdzv_store_get(client, b"k", ctypes.byref(val), ctypes.byref(n),
                        ctypes.c_double(10.0))
assert rc == 0, rc
print(ctypes.string_at(val, n.value).decode())
lib.rdzv_free(val)
lib.rdzv_client_destroy(client)
PY
)
rc=$?
if [ "$rc" = 0 ] && [ "$out" = "deadline passed
through librdzv.so" ]; then
  ok "ctypes client through librdzv.so.0: a status named, a key set and read"
else
  fail "ctypes client: status $rc, output [$out]"
fi
[ "$fails" = 0 ] && echo "abi_test: PASS" || echo "abi_test: FAIL"
[ "$fails" = 0 ]
