# Sourced by the scripts that start a small tree of rdzvd on this machine
# (demo.sh, store-bench.sh, comm-bench.sh, tests/gpu/run.sh); run from the
# repository root after building //tools:rdzvd (or set RDZVD to the
# binary, as Bazel tests do with their runfiles).
#
#   rdzv_tree_init PREFIX     temp dir in $dir, daemons stopped at exit
#   rdzv_start NAME ROLE [PARENT]
#                             starts rdzvd (TCP on 127.0.0.1:0 and the Unix
#                             socket $dir/NAME.sock); sets $addr to its TCP
#                             address once it listens
rdzv_pids=()

rdzv_cleanup() {
  for p in "${rdzv_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}

rdzv_tree_init() {
  dir=$(mktemp -d "/tmp/$1-XXXXXX")
  trap rdzv_cleanup EXIT
}

rdzv_start() {
  local name=$1 role=$2 parent=${3:-}
  local args=(--role="$role" --listen=127.0.0.1:0 --port-file="$dir/$name.port"
              --unix="$dir/$name.sock" --log-level=0 --name="$name")
  [ -n "$parent" ] && args+=(--parent="$parent")
  "${RDZVD:-bazel-bin/tools/rdzvd}" "${args[@]}" &
  rdzv_pids+=($!)
  for _ in $(seq 1000); do [ -s "$dir/$name.port" ] && break; sleep 0.01; done
  if [ ! -s "$dir/$name.port" ]; then
    echo "daemons.sh: rdzvd $name did not start (no port file in 10 s)" >&2
    return 1
  fi
  addr="127.0.0.1:$(cat "$dir/$name.port")"
}
