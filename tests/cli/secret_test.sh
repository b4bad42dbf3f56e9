#!/bin/bash
# rdzvctl site-key and job-secret (no server): a new site key's file and
# its refusal to overwrite; a job's secret the same on every run and host,
# different per job, written atomically with mode 0400; site keys that
# others may read, or that belong to someone else, refused; and the
# derivation checked against Python's hmac module computing the message
# store/auth/auth.h documents, HMAC-SHA256(site key, "rdzv-job-secret-v1"
# | u8 len(job) | job), on random and fixed keys. Every check prints what
# it ran on failure.
set -u
ctl=$PWD/tools/rdzvctl
py=/usr/bin/python3
dir=$(mktemp -d /tmp/rdzv-secret-test-XXXXXX)
trap 'rm -rf "$dir"' EXIT
fails=0
ok() { echo "ok: $*"; }
fail() {
  echo "FAIL: $*"
  fails=$((fails + 1))
}

# run WANT_RC CMD...: runs rdzvctl, its stdout in $out, stderr in $err.
run() {
  local want=$1
  shift
  out=$("$ctl" "$@" 2>"$dir/err")
  rc=$?
  err=$(cat "$dir/err")
  if [ "$rc" != "$want" ]; then
    fail "rdzvctl $*: status $rc (want $want), stdout [$out], stderr [$err]"
    return 1
  fi
  return 0
}
mode_of() { stat -c %a "$1"; }

# The independent derivation: Python's hmac over the documented message,
# the key being the file's bytes without trailing spaces, tabs, CR, LF.
py_secret() { # KEYFILE JOB
  "$py" - "$1" "$2" <<'EOF'
import hashlib, hmac, sys
key = open(sys.argv[1], "rb").read().rstrip(b" \t\r\n")
job = sys.argv[2].encode()
msg = b"rdzv-job-secret-v1" + bytes([len(job)]) + job
print(hmac.new(key, msg, hashlib.sha256).hexdigest())
EOF
}

# ---- site-key
key=$dir/site.key
if run 0 site-key --out "$key"; then
  content=$(cat "$key")
  if [ "$(mode_of "$key")" = 400 ] && [[ "$content" =~ ^[0-9a-f]{64}$ ]] &&
    [ "$(stat -c %s "$key")" = 65 ] && [ -z "$out" ]; then
    ok "site-key --out: mode 0400, 64 hex digits and a newline, nothing on stdout"
  else
    fail "site-key: mode $(mode_of "$key"), $(stat -c %s "$key") bytes, stdout [$out]"
  fi
fi
before=$(cat "$key")
if run 1 site-key --out "$key"; then
  if [ "$(cat "$key")" = "$before" ] && grep -q "refusing to overwrite" <<<"$err"; then
    ok "site-key refuses an existing file, leaves it as it was: $err"
  else
    fail "site-key over an existing key: changed or said [$err]"
  fi
fi
run 0 site-key --out "$dir/site2.key" &&
  [ "$(cat "$dir/site2.key")" != "$before" ] &&
  ok "two site keys differ" || fail "two site keys are the same"
# Whatever the umask, the key is 0400 (and only the key is left).
(umask 0 && "$ctl" site-key --out "$dir/umask.key") &&
  [ "$(mode_of "$dir/umask.key")" = 400 ] &&
  ok "site-key under umask 0: mode 0400" ||
  fail "site-key under umask 0: mode $(mode_of "$dir/umask.key" 2>&1)"
run 2 site-key && grep -q -- "--out FILE is required" <<<"$err" &&
  ok "site-key without --out: usage error, no key on stdout [$out]"
run 1 site-key --out "$dir/no/such/dir/k" && grep -q "$dir/no/such/dir/k" <<<"$err" &&
  ok "site-key into a missing directory: $err"
if ls "$dir" | grep -q '\.tmp\.'; then
  fail "temporary files left: $(ls "$dir")"
else
  ok "no temporary files left"
fi

# ---- job-secret: deterministic, per job, atomic --out.
run 0 job-secret --site-key "$key" --job 4242 && s1=$out
run 0 --job 4242 job-secret --site-key="$key" && s2=$out
if [[ "$s1" =~ ^[0-9a-f]{64}$ ]] && [ "$s1" = "$s2" ]; then
  ok "job-secret: the same site key and job give the same secret twice"
else
  fail "job-secret twice: [$s1] [$s2]"
fi
# Another host: a copy of the key elsewhere gives the same secret.
cp -p "$key" "$dir/copy.key"
run 0 job-secret --site-key "$dir/copy.key" --job 4242 && [ "$out" = "$s1" ] &&
  ok "a copy of the site key (another host) gives the same secret"
run 0 job-secret --site-key "$key" --job 4243 && s3=$out
[ "$s3" != "$s1" ] && ok "jobs 4242 and 4243 get different secrets" ||
  fail "jobs 4242 and 4243 share a secret"
run 0 job-secret --site-key "$dir/site2.key" --job 4242 && [ "$out" != "$s1" ] &&
  ok "another site key gives job 4242 another secret"
RDZV_JOB=4242 run 0 job-secret --site-key "$key" && [ "$out" = "$s1" ] &&
  ok "job-secret takes the job from RDZV_JOB"
sec=$dir/4242.secret
if run 0 job-secret --site-key "$key" --job 4242 --out "$sec"; then
  if [ -z "$out" ] && [ "$(cat "$sec")" = "$s1" ] &&
    [ "$(mode_of "$sec")" = 400 ] && [ "$(stat -c %u "$sec")" = "$(id -u)" ] &&
    [ "$(stat -c %s "$sec")" = 65 ]; then
    ok "job-secret --out: the secret and a newline, mode 0400, the caller's, nothing on stdout"
  else
    fail "job-secret --out: [$(cat "$sec")] mode $(mode_of "$sec") stdout [$out]"
  fi
fi
# Again (a Prolog run twice): the file is replaced by a new one (a new
# inode, renamed over it), not written in place; a link there is replaced,
# not followed.
ino=$(stat -c %i "$sec")
run 0 job-secret --site-key "$key" --job 4242 --out "$sec" &&
  [ "$(stat -c %i "$sec")" != "$ino" ] && [ "$(cat "$sec")" = "$s1" ] &&
  ok "job-secret --out over an existing file: replaced by rename (inode $ino -> $(stat -c %i "$sec"))"
echo victim >"$dir/victim"
ln -s "$dir/victim" "$dir/link.secret"
run 0 job-secret --site-key "$key" --job 4242 --out "$dir/link.secret" &&
  [ "$(cat "$dir/victim")" = victim ] && [ ! -L "$dir/link.secret" ] &&
  ok "job-secret --out over a symbolic link: the link replaced, its target untouched"
run 1 job-secret --site-key "$key" --job 4242 --out "$dir/nodir/x" &&
  grep -q "$dir/nodir/x" <<<"$err" && ! grep -q "$s1" <<<"$err" &&
  ok "job-secret --out into a missing directory fails, naming the file, not the secret: $err"
if ls "$dir" | grep -q '\.tmp\.'; then
  fail "temporary files left: $(ls "$dir")"
fi

# ---- site keys refused.
bad() { # WHAT PATTERN ARGS...
  local what=$1 pat=$2
  shift 2
  if run 1 job-secret --job 4242 "$@"; then
    if grep -q -- "$pat" <<<"$err" && [ -z "$out" ]; then
      ok "$what refused: $err"
    else
      fail "$what: stderr [$err] lacks [$pat], stdout [$out]"
    fi
  fi
}
cp "$key" "$dir/k644" && chmod 0644 "$dir/k644"
bad "a site key of mode 0644" "has mode 0644: its group or others may access it" \
  --site-key "$dir/k644"
cp "$key" "$dir/k640" && chmod 0640 "$dir/k640"
bad "a site key of mode 0640" "has mode 0640" --site-key "$dir/k640"
cp "$key" "$dir/k604" && chmod 0604 "$dir/k604"
bad "a site key of mode 0604" "has mode 0604" --site-key "$dir/k604"
bad "a missing site key" "rdzvctl site-key --out FILE" --site-key "$dir/none"
bad "a directory as site key" "is not a regular file" --site-key "$dir"
printf 'short\n' >"$dir/kshort" && chmod 0400 "$dir/kshort"
bad "a site key of 5 bytes" "16 to 1024 bytes" --site-key "$dir/kshort"
if [ "$(id -u)" = 0 ] && id nobody >/dev/null 2>&1; then
  cp "$key" "$dir/knobody" && chown nobody "$dir/knobody" && chmod 0400 "$dir/knobody"
  bad "a site key owned by nobody, read by root" "belongs to uid $(id -u nobody)" \
    --site-key "$dir/knobody"
  # A user who cannot read the site key gets no secret.
  chmod 0711 "$dir"
  if out=$(setpriv --reuid=nobody --regid=nogroup --clear-groups \
    "$ctl" job-secret --site-key "$key" --job 4242 2>&1); then
    fail "user nobody derived a secret from root's site key: [$out]"
  elif grep -q "Permission denied" <<<"$out"; then
    ok "user nobody cannot use root's site key: $out"
  else
    fail "user nobody and root's site key: [$out]"
  fi
  chmod 0700 "$dir"
fi
# Usage errors.
run 2 job-secret --job 4242 && grep -q -- "--site-key FILE is required" <<<"$err" &&
  ok "job-secret without --site-key: usage error"
run 2 job-secret --site-key "$key" && grep -q "no job id" <<<"$err" &&
  ok "job-secret without a job: usage error"
long=$(printf 'j%.0s' $(seq 256))
run 2 job-secret --site-key "$key" --job "$long" && grep -q "256 bytes; at most 255" <<<"$err" &&
  ok "job-secret with a 256-byte job id: usage error"
run 2 hostnames n1 --site-key "$key" && ok "--site-key is job-secret's option only"

# ---- The derivation, checked independently.
for j in 4242 1 rdzv-job-with-a-longer-name "$(printf 'x%.0s' $(seq 255))"; do
  run 0 job-secret --site-key "$key" --job "$j" || continue
  want=$(py_secret "$key" "$j")
  if [ "$out" = "$want" ]; then
    ok "job ${j:0:30} (${#j} bytes): rdzvctl and Python's hmac agree ($out)"
  else
    fail "job ${j:0:30}: rdzvctl [$out], Python's hmac [$want]"
  fi
done
# A fixed key, given by hand with trailing whitespace (dropped), and its
# value computed here once by Python: a change to the derivation (label,
# length byte, hex) would show even if both sides changed alike.
printf '0123456789abcdef0123456789abcdef \t\r\n\n' >"$dir/fixed.key"
chmod 0400 "$dir/fixed.key"
want=$(py_secret "$dir/fixed.key" slurm-17)
run 0 job-secret --site-key "$dir/fixed.key" --job slurm-17 &&
  [ "$out" = "$want" ] &&
  ok "a hand-made key with trailing whitespace: agrees with Python ($out)" ||
  fail "the hand-made key: rdzvctl [$out], Python [$want]"
fixed=a231418c8b43d5556b4b324bf35ce3b682f8a49969c63cfa8712d32a5c5c54fd
[ "$want" = "$fixed" ] && ok "Python's value is the one recorded in this test" ||
  fail "Python computes [$want] for the fixed key, not the recorded [$fixed]"
# The file --out writes is what a daemon loads: the same bytes as stdout.
[ "$(cat "$sec")" = "$(py_secret "$key" 4242)" ] &&
  ok "the --out file holds Python's value" || fail "the --out file differs from Python's"

# help names the commands and warns about stdout.
"$ctl" help | grep -q "never for a log" && "$ctl" help | grep -q "site-key --out FILE" &&
  ok "help documents site-key and job-secret, and that stdout is not for logs" ||
  fail "help lacks the secret commands"

[ "$fails" -eq 0 ] && echo "secret_test: PASS" || echo "secret_test: $fails FAILED"
[ "$fails" -eq 0 ]
