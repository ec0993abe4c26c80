# Helpers for the remote-store tests: a free loopback port, waiting for a server, and
# the common expect/ok/fail reporting. Sourced by check-http.sh, check-s3.sh and
# check-pack.sh.
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
ok() { echo "ok   $*"; }
# expect STATUS PATTERN -- ARGS: baton ckpt ARGS exits STATUS with PATTERN in its output.
expect() {
  local status=$1 pattern=$2 out rc
  shift 3
  out=$("$baton" ckpt "$@" 2>&1)
  rc=$?
  if [[ $rc -ne $status ]] || ! grep -Eq -- "$pattern" <<<"$out"; then
    fail "baton ckpt $* -> exit $rc (want $status, /$pattern/):"
    echo "$out" | tail -n 8
  else
    ok "baton ckpt $* -> $rc"
  fi
}
free_port() {
  /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
# wait_port PORT PID: until something listens on PORT (1 when PID died or 10 s passed).
wait_port() {
  for _ in $(seq 100); do
    kill -0 "$2" 2>/dev/null || return 1
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}
# same_files A B: every file of checkpoint directory A is in B with the same bytes.
same_files() {
  diff -r "$1" "$2" >/dev/null
}
