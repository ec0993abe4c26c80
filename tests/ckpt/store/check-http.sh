#!/usr/bin/env bash
# baton ckpt push/pull against a real WebDAV-style HTTP server: nginx on a free loopback
# port, with its own prefix, config and temp paths in a temp directory, killed on exit.
# Round trip (the fixture's fp8 histories too, in a shard file that holds nothing else);
# push skipping only what the store's manifest.pb lists with the same size and CRC32C
# values (a same-named later checkpoint, files of the same sizes, replaced in full, the
# old manifest.pb removed first, the new one last); pull
# interrupted (a rate limit and a time limit) and resumed with a Range request for
# exactly the missing bytes, as nginx's access log shows; damaged remote data and a
# later checkpoint format refused; a server that accepts and never answers given up on; a
# store without DELETE, or refusing it (401, 403): a checkpoint there not replaced, said
# at once (exit 2, no retry). A password in the URL is sent (nginx sees the Basic user)
# but never shown (push's line, an HTTP error, the retries: http://***@HOST; a token, query
# values and --endpoint credentials neither); without one in the URL, ~/.netrc's for the
# host is sent. Redirects: GET and HEAD follow at most 5, the password not sent to another
# host; PUT and DELETE do not follow, and say so. A checkpoint removed while push reads
# it (a run's retention): the run's newest pushed instead, or, named itself, said removed;
# so before anything was sent, once a file was sent, and with every file already in the
# store just before manifest.pb. A push failing after it sent files (that, or a damaged
# shard) removes them from the store again, also where it replaced another checkpoint of
# the name, and then the replaced one's files the new one has not (as a push that works
# does); a store without DELETE: said to stay, and where. A store whose HEAD gives no
# length: its manifest.pb seen as there (a push replacing files removes it first; one
# whose manifest.pb PUT got no answer leaves the files it lists).
# Exit 77 (SKIPPED) only when nginx is not installed.
#   check-http.sh BATON MAKE_CKPT
set -u
baton=$1 make_ckpt=$2
here=$(cd "$(dirname "$0")" && pwd)
. "$here/server-lib.sh"
nginx=$(PATH=$PATH:/usr/sbin command -v nginx) || { echo "SKIPPED: nginx is not installed"; exit 77; }
work=$(mktemp -d /tmp/baton-test-http.XXXXXX)
server_pid= nodel_pid= nolen_pid=
cleanup() { # every server still running, also when the script dies midway
  local p
  for p in $server_pid $nodel_pid $nolen_pid; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
cd "$work" || exit 1
name=s00-step00000004
log=$work/nginx/access.log auth=$work/nginx/auth.log auth2=$work/nginx/auth2.log

start_nginx() {
  local port=$1 user=
  mkdir -p nginx/www nginx/tmp
  [[ $(id -u) -eq 0 ]] && user="user $(id -un) $(id -gn);"
  cat >nginx/nginx.conf <<CONF
$user
worker_processes 1;
events { worker_connections 64; }
http {
  log_format store '\$request_method \$uri \$status \$body_bytes_sent "\$http_range"';
  access_log $log store;
  log_format auth '\$request_method \$uri \$remote_user';
  access_log $auth auth;
  client_body_temp_path $work/nginx/tmp/body;
  proxy_temp_path $work/nginx/tmp/proxy;
  fastcgi_temp_path $work/nginx/tmp/fastcgi;
  uwsgi_temp_path $work/nginx/tmp/uwsgi;
  scgi_temp_path $work/nginx/tmp/scgi;
  server {
    listen 127.0.0.1:$port;
    root $work/nginx/www;
    client_max_body_size 0;
    location / {
      dav_methods PUT DELETE MKCOL;
      create_full_put_path on;
      dav_access user:rw;
    }
    location /moved/ { rewrite ^/moved/(.*)\$ /store/\$1 redirect; }
    location /away/ { rewrite ^/away/(.*)\$ http://127.0.0.1:$port2/store/\$1 redirect; }
    location /loop/ { rewrite ^ /loop/again redirect; }
  }
  server { # another host for a redirect: credentials must not follow
    listen 127.0.0.1:$port2;
    root $work/nginx/www;
    access_log $auth2 auth;
  }
}
CONF
  "$nginx" -p "$work/nginx" -c "$work/nginx/nginx.conf" \
    -g "daemon off; pid $work/nginx/nginx.pid; error_log stderr;" 2>nginx/error.log &
  server_pid=$!
  wait_port "$port" "$server_pid" || { echo "nginx did not start:"; cat nginx/error.log; exit 1; }
}

port=$(free_port) && port2=$(free_port) || exit 1
[[ $port2 != "$port" ]] || port2=$(free_port) || exit 1
start_nginx "$port"
url=http://127.0.0.1:$port/store
remote=nginx/www/store/$name
"$make_ckpt" write run 2 8192 || exit 1  # two 16 MiB shard files
src=run/checkpoints/$name
size0=$(stat -c %s "$src/rank-00000.bin")

expect 0 'usage: baton ckpt push' -- push --help
expect 0 'usage: baton ckpt pull' -- pull --help
expect 2 'missing' -- push run
expect 2 'expected http' -- push run ftp://example.org/x
expect 2 "^baton ckpt pull: --max-time 'soon': expected a duration such as 250ms, 300s, 5m" -- pull "$url/$name" --max-time soon
expect 2 "^baton ckpt push: --limit-rate '1X': expected bytes per second such as 500K or 100M" -- push run "$url" --limit-rate 1X
[[ $("$baton" ckpt push run "$url" --limit-rate 1X 2>&1) != *usage:* ]] ||
  fail "push: a bad --limit-rate is followed by the whole usage"

# log_wait PATTERN [LOG]: until nginx's access log (or LOG) has a line matching PATTERN (at
# most 10 s): nginx writes a request's line after its response, so the client may be done
# first
log_wait() {
  local i
  for ((i = 0; i < 100; i++)); do
    grep -q "$1" "${2:-$log}" && return 0
    sleep 0.1
  done
}

# Push: every file, manifest.pb last.
expect 0 "pushed .* to $url/$name" -- push run "$url"
same_files "$src" "$remote" && ok "push: the server holds identical files" || fail "push: files differ"
log_wait "^PUT /store/$name/manifest.pb "
last_put=$(grep '^PUT ' "$log" | tail -n 1)
[[ $last_put == "PUT /store/$name/manifest.pb 201"* ]] && ok "push: manifest.pb sent last" ||
  fail "push: last PUT was '$last_put'"

# Push again: nothing but manifest.pb is sent.
: >"$log"
expect 0 "rank-00000.bin: already there" -- push run "$url"
log_wait "^PUT /store/$name/manifest.pb "
puts=$(grep -c '^PUT ' "$log")
[[ $puts -eq 1 ]] && grep -q "^PUT /store/$name/manifest.pb" "$log" &&
  ok "push again: only manifest.pb re-sent" || fail "push again: $puts PUTs: $(cat "$log")"

# A push broken off (a shard cut short, no manifest.pb yet): nothing in the store vouches
# for what is there, so every file is sent again.
rm "$remote/manifest.pb" && truncate -s 12345 "$remote/rank-00001.bin"
: >"$log"
expect 0 "rank-00001.bin: sent" -- push run "$url"
log_wait "^PUT /store/$name/manifest.pb "
[[ $(grep -c '^PUT ' "$log") -eq 4 ]] && ok "resumed push without a manifest: every file sent" ||
  fail "resumed push without a manifest: $(cat "$log")"
same_files "$src" "$remote" && ok "resumed push: identical files" || fail "resumed push: files differ"

# A later checkpoint of the same name (other values, files of the same sizes): nothing is
# skipped for its size; the store's manifest.pb goes before the first file is replaced,
# the new one comes last, and a pull reads the new values.
"$make_ckpt" write run-b 2 8192 1 || exit 1
: >"$log"
out=$("$baton" ckpt push run-b "$url" 2>&1) || fail "second push: $out"
grep -q "already there" <<<"$out" && fail "second push skipped a file: $out"
log_wait "^PUT /store/$name/manifest.pb "
[[ $(grep -E '^(PUT|DELETE) ' "$log" | head -n 1) == "DELETE /store/$name/manifest.pb "* ]] &&
  ok "second push: the old manifest.pb removed before any file" ||
  fail "second push: first change was '$(grep -E '^(PUT|DELETE) ' "$log" | head -n 1)'"
[[ $(grep -c '^PUT ' "$log") -eq 4 ]] && ok "second push: every file sent" ||
  fail "second push: $(grep -c '^PUT ' "$log") PUTs"
same_files run-b/checkpoints/$name "$remote" && ok "second push: the store holds the new files" ||
  fail "second push: files differ"
mkdir got-b
expect 0 "pulled" -- pull "$url/$name" --into got-b
"$make_ckpt" read "got-b/$name" 1 && ok "second push: pull reads the new values" ||
  fail "second push: pull does not read the new values"
# and back to the first: the store's manifest lists other CRC32C values, so again all
: >"$log"
expect 0 "rank-00000.bin: sent" -- push run "$url"
same_files "$src" "$remote" && ok "push back: identical files" || fail "push back: files differ"

# Pull: identical files, every tensor reads back with its CRCs checked.
mkdir got
expect 0 "pulled .* into got/$name" -- pull "$url/$name" --into got
same_files "$src" "got/$name" && ok "pull: identical files" || fail "pull: files differ"
"$make_ckpt" read "got/$name" && ok "pull: tensors read back" || fail "pull: tensors unreadable"
expect 2 'already exists' -- pull "$url/$name" --into got
expect 2 "--into ''" -- pull "$url/$name" --into ""

# A checkpoint of a later format than this baton reads (the manifest's own CRC32C field,
# 6 bytes, then format_version, field 1): pull refuses it and leaves nothing. The CRC32C
# of the bytes after that field is made again, as a newer baton would write it.
cp "$remote/manifest.pb" manifest.keep
PYTHONPATH=$here/../../lib /usr/bin/python3 - "$remote/manifest.pb" <<'PY' || fail "manifest.pb does not start with its CRC32C, then format_version 2"
import sys
from crc32c import crc32c
p = sys.argv[1]; b = bytearray(open(p, "rb").read())
assert b[0:2] == b"\xd5\x01" and crc32c(b[6:]) == int.from_bytes(b[2:6], "little"), b[:6]
assert b[6] == 0x08 and b[7] == 2, b[6:8]
b[7] = 3; b[2:6] = crc32c(b[6:]).to_bytes(4, "little"); open(p, "wb").write(b)
PY
mkdir got4
expect 1 "format 3, written by a newer baton" -- pull "$url/$name" --into got4
[[ -e got4/$name || -e got4/$name.partial ]] && fail "newer format: something was left: $(ls got4)"
cp manifest.keep "$remote/manifest.pb"

# A pull broken off: 10 KiB/s (libcurl lets the first ~1.6 MB of a request through
# quickly) for at most 1 s per try, 3 tries, then fail, leaving a file partly fetched
# (the values in the units recipes use, one of them joined by '=').
mkdir got2
t0=$SECONDS
expect 1 "GET $url/$name/rank-0000[01].bin: .*" -- pull "$url/$name" --into got2 --limit-rate=10K --max-time 1000ms
(( SECONDS - t0 < 15 )) || fail "--max-time 1000ms: the broken pull took $((SECONDS - t0)) s"
[[ -e got2/$name ]] && fail "broken pull: a complete checkpoint was left"
cut= part=0
for f in got2/$name.partial/rank-*.bin; do
  s=$(stat -c %s "$f")
  [[ $s -gt 0 && $s -lt $size0 ]] && cut=$(basename "$f") part=$s
done
if [[ -n $cut ]]; then ok "broken pull: $cut cut at $part of $size0 bytes"
else fail "broken pull: no partly fetched file: $(ls -l got2/$name.partial)"; fi
: >"$log"
expect 0 "$cut: continuing at byte $part" -- pull "$url/$name" --into got2
log_wait "^GET /store/$name/$cut "
line=$(grep "^GET /store/$name/$cut" "$log")
want="GET /store/$name/$cut 206 $((size0 - part)) \"bytes=$part-\""
[[ $line == "$want" ]] && ok "resumed pull: one Range request for the missing $((size0 - part)) bytes" ||
  fail "resumed pull: log has '$line', want '$want'"
same_files "$src" "got2/$name" && ok "resumed pull: identical files" || fail "resumed pull: files differ"
[[ -e got2/$name.partial ]] && fail "resumed pull left the .partial directory"

# before A B: in $out, the first line matching A comes before the first matching B
before() {
  local a b
  a=$(grep -n -m1 -- "$1" <<<"$out" | cut -d: -f1) b=$(grep -n -m1 -- "$2" <<<"$out" | cut -d: -f1)
  [[ -n $a && -n $b && $a -lt $b ]]
}
# files DIR: the files under DIR, one a line ("" when none, or no DIR)
files() { find "$1" -type f 2>/dev/null | sort; }

# dmg/$name: a small checkpoint whose second shard file fails its CRC32C (its first byte
# flipped), so that a push of it fails once it sent the first
"$make_ckpt" write small-b 1 16 1 && mkdir dmg && cp -r "small-b/checkpoints/$name" dmg/ || exit 1
/usr/bin/python3 -c 'import sys; p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[0] ^= 0xff; open(p, "wb").write(b)' \
  "dmg/$name/rank-00001.bin"

# A store without DELETE (a small PUT/GET/HEAD server; DELETE answers 501 Not
# Implemented): a first push works; replacing it with another checkpoint of the same name
# is refused at once (a 501 is not retried), exit 2, saying why, the store untouched.
nport=$(free_port) || exit 1
mkdir nodel
/usr/bin/python3 "$here/teststore.py" "$nport" nodel nodelete 2>nodel.log &
nodel_pid=$!
if wait_port "$nport" "$nodel_pid"; then
  expect 0 "pushed" -- push run "http://127.0.0.1:$nport/store"
  out=$("$baton" ckpt push run-b "http://127.0.0.1:$nport/store" 2>&1)
  rc=$?
  [[ $rc -eq 2 && $out == *"DELETE http://127.0.0.1:$nport/store/$name/manifest.pb: HTTP 501: the store does not support DELETE"*"push under another name"* &&
     $out != *retrying* && $(grep -c '^DELETE' nodel.log) -eq 1 && $(grep -c '^PUT' nodel.log) -eq 4 ]] &&
    ok "push to a store without DELETE: refused at once, exit 2" ||
    fail "push to a store without DELETE: exit $rc: $out; $(grep -E '^(PUT|DELETE)' nodel.log)"
  same_files "$src" "nodel/store/$name" && ok "store without DELETE: its checkpoint untouched" ||
    fail "store without DELETE: its checkpoint changed"
  # ... where a push fails once it sent a file, that file cannot be taken out again: said
  out=$("$baton" ckpt push "dmg/$name" "http://127.0.0.1:$nport/dmg" 2>&1)
  [[ $? -eq 1 && $out == *"baton ckpt push: DELETE http://127.0.0.1:$nport/dmg/$name/rank-00000.bin: HTTP 501: "[12]" file"*" of $name stay"*" under http://127.0.0.1:$nport/dmg/$name/ without a manifest.pb (the next push of $name replaces "*"; or remove "*" by other means)"* ]] &&
    before "rank-00001.bin: CRC32C mismatch" " of $name stays* under " &&
    ok "store without DELETE: a failed push says, after why, what it sent stays there, and where" ||
    fail "store without DELETE: a failed push: $out"
else
  fail "the store without DELETE did not start: $(cat nodel.log)"
fi
kill "$nodel_pid" && wait "$nodel_pid" 2>/dev/null
nodel_pid=
# The same server refusing DELETE to these credentials (401 Unauthorized, 403 Forbidden):
# also said at once with what to do, exit 2, the store untouched.
for code in 401 403; do
  nport=$(free_port) || exit 1
  rm -rf "denied$code" && mkdir "denied$code"
  /usr/bin/python3 "$here/teststore.py" "$nport" "denied$code" deny "$code" 2>"denied$code.log" &
  nodel_pid=$!
  if wait_port "$nport" "$nodel_pid"; then
    expect 0 "pushed" -- push run "http://127.0.0.1:$nport/store"
    out=$("$baton" ckpt push run-b "http://127.0.0.1:$nport/store" 2>&1)
    rc=$?
    [[ $rc -eq 2 && $out == *"DELETE http://127.0.0.1:$nport/store/$name/manifest.pb: HTTP $code: the store refused to delete it"*"push under another name, or check the credentials"* &&
       $out != *retrying* && $(grep -c '^DELETE' "denied$code.log") -eq 1 &&
       $(grep -c '^PUT' "denied$code.log") -eq 4 ]] &&
      ok "push to a store refusing DELETE ($code): refused at once, exit 2" ||
      fail "push to a store refusing DELETE ($code): exit $rc: $out; $(grep -E '^(PUT|DELETE)' "denied$code.log")"
    same_files "$src" "denied$code/store/$name" && ok "store refusing DELETE ($code): its checkpoint untouched" ||
      fail "store refusing DELETE ($code): its checkpoint changed"
  else
    fail "the store refusing DELETE did not start: $(cat "denied$code.log")"
  fi
  kill "$nodel_pid" && wait "$nodel_pid" 2>/dev/null
  nodel_pid=
done

# Credentials in the URL: sent, never shown; else ~/.netrc's.
cred=http://alice:PaSsW0rd@127.0.0.1:$port/store shown="http://***@127.0.0.1:$port/store"
: >"$auth"
out=$("$baton" ckpt push run "$cred" 2>&1)
rc=$?
log_wait "^PUT /store/$name/manifest.pb " "$auth"
[[ $rc == 0 && $out == *" to $shown/$name"* && $out != *PaSsW0rd* ]] &&
  grep -q "^PUT /store/$name/manifest.pb alice$" "$auth" &&
  ok "push with a password: sent as alice, shown as $shown" || fail "push with a password: $out; $(cat "$auth")"
out=$("$baton" ckpt pull "$cred/s00-step00000099" --into got 2>&1)
[[ $? == 1 && $out == *"GET $shown/s00-step00000099/manifest.pb: HTTP 404"* && $out != *PaSsW0rd* ]] &&
  ok "pull error with a password: shown as ***" || fail "pull error with a password: $out"
dead=$(free_port) || exit 1
out=$("$baton" ckpt pull "http://alice:PaSsW0rd@127.0.0.1:$dead/store/$name" --into got4 2>&1)
[[ $? == 1 && $out == *"baton ckpt pull: GET http://***@127.0.0.1:$dead/"*"; retrying"* && $out != *PaSsW0rd* ]] &&
  ok "retries with a password: shown as ***" || fail "retries with a password: $out"
# Whatever the userinfo holds (a token alone, an unencoded '/' in a password) and query
# values (tokens, signatures) are never shown; nor an --endpoint's credentials.
for u in "http://TokEnSecret@127.0.0.1:$port/store" "http://alice:Pa/SsSecret@127.0.0.1:$port/store" \
  "http://127.0.0.1:$port/store?token=QuerySecret&X-Amz-Signature=SigSecret"; do
  out=$("$baton" ckpt pull "$u/s00-step00000099" --into got5 2>&1)
  [[ $out != *Secret* && ($out == *"***@"* || $out == *"token=***&X-Amz-Signature=***"*) ]] &&
    ok "pull of $u: its secrets shown as ***" || fail "pull of $u shows a secret: $out"
done
out=$(AWS_ACCESS_KEY_ID=k AWS_SECRET_ACCESS_KEY=s "$baton" ckpt pull s3://b/s00-step00000099 \
  --endpoint "ftp://ep:EpSecret@127.0.0.1:$port" --into got5 2>&1)
[[ $? == 2 && $out == *"--endpoint ftp://***@127.0.0.1:$port"* && $out != *EpSecret* ]] &&
  ok "a bad --endpoint with credentials: shown as ***" || fail "a bad --endpoint shows a secret: $out"
out=$(AWS_ACCESS_KEY_ID=k AWS_SECRET_ACCESS_KEY=s "$baton" ckpt pull s3://b/s00-step00000099 \
  --endpoint "http://ep:EpSecret@127.0.0.1:$port" --into got5 2>&1)
[[ $out == *"http://***@127.0.0.1:$port/b"* && $out != *EpSecret* ]] &&
  ok "an --endpoint with credentials: shown as ***" || fail "an --endpoint shows a secret: $out"
mkdir home && printf 'machine 127.0.0.1 login bob password NetrcPw\n' >home/.netrc && chmod 600 home/.netrc
: >"$auth"
out=$(HOME=$work/home "$baton" ckpt push run "$url" 2>&1)
rc=$?
log_wait "^PUT /store/$name/manifest.pb " "$auth"
[[ $rc == 0 && $out != *NetrcPw* ]] && grep -q "^PUT /store/$name/manifest.pb bob$" "$auth" &&
  ok "push with ~/.netrc: sent as bob" || fail "push with ~/.netrc: $out; $(cat "$auth")"

# Redirects: GET and HEAD follow them (at most 5); PUT and DELETE do not, and say so; a
# password goes to the URL's own host and port only, never to where a redirect points.
expect 0 "pulled" -- pull "http://127.0.0.1:$port/moved/$name" --into got-moved
log_wait "^GET /moved/$name/manifest.pb 302 "
same_files "$src" "got-moved/$name" && grep -q "^GET /moved/$name/manifest.pb 302 " "$log" &&
  ok "pull through a redirect: identical files" || fail "pull through a redirect"
expect 1 "(PUT|DELETE) http://127.0.0.1:$port/moved/$name/.*: HTTP 302, a redirect to http://127.0.0.1:$port/store/$name/.* not followed: PUT and DELETE go only where the URL says" \
  -- push run "http://127.0.0.1:$port/moved"
: >"$auth" && : >"$auth2"
out=$("$baton" ckpt pull "http://alice:PaSsW0rd@127.0.0.1:$port/away/$name" --into got-away 2>&1)
[[ $? == 0 && $out != *PaSsW0rd* ]] && same_files "$src" "got-away/$name" &&
  grep -q "^GET /away/$name/manifest.pb alice$" "$auth" && grep -q "^GET /store/$name/manifest.pb -$" "$auth2" &&
  ! grep -q alice "$auth2" && ok "pull redirected to another host: the password not sent there" ||
  fail "pull redirected to another host: $out; $(cat "$auth" "$auth2")"
expect 1 "GET http://127.0.0.1:$port/loop/$name/manifest.pb: .*(at most 5 redirects are followed)" \
  -- pull "http://127.0.0.1:$port/loop/$name" --into got-loop

# Damaged remote data, a missing checkpoint, a server that is gone.
printf '\x5a' | dd of="$remote/rank-00001.bin" bs=1 seek=10000000 conv=notrunc status=none
mkdir got3
expect 1 "rank-00001.bin: CRC32C mismatch in bytes \[9961472, 10027008\)" -- pull "$url/$name" --into got3
[[ -e got3/$name ]] && fail "damaged pull: a complete checkpoint was left"
[[ -e got3/$name.partial/rank-00001.bin ]] && fail "damaged pull: kept the damaged file to resume from"
expect 1 "GET $url/s00-step00000099/manifest.pb: HTTP 404" -- pull "$url/s00-step00000099" --into got3
[[ -e got3/s00-step00000099.partial ]] && fail "pull of a missing checkpoint left its .partial"
expect 1 "HTTP 404" -- pull "$url/s00-step00000099" --into new/a
[[ -e new ]] && fail "pull of a missing checkpoint left the --into it created: $(find new)"
# A checkpoint removed while push reads it (a run's retention; BATON_FAULT_CKPT_REMOVE
# removes it, here once push sent a file of it: BATON_FAULT_CKPT_REMOVE_AT=sent): given the run, the newest left is pushed under
# its own name, with a note; given the checkpoint itself, exit 1 saying it was removed (not
# as a missing file); every one of the 3 tries removed, a final message saying so. Each
# time, the file it had sent of a checkpoint removed is taken out of the store again.
"$make_ckpt" write small 1 16 || exit 1
# gone_run N: run g holding N copies of the small checkpoint, s00-step00000001 .. N
gone_run() {
  rm -rf g && mkdir -p g/checkpoints || exit 1
  for i in $(seq "$1"); do cp -r "small/checkpoints/$name" "g/checkpoints/s00-step0000000$i"; done
}
removed1="^baton ckpt push: removed from the store the 1 file of s00-step0000000[0-9] this push left there without a manifest.pb$"
gone_run 2
out=$(BATON_FAULT_CKPT_REMOVE_AT=sent BATON_FAULT_CKPT_REMOVE=s00-step00000002 "$baton" ckpt push g "$url/gone" 2>&1)
rc=$?
[[ $rc -eq 0 ]] && same_files g/checkpoints/s00-step00000001 nginx/www/store/gone/s00-step00000001 &&
  [[ -z $(files nginx/www/store/gone/s00-step00000002) ]] && grep -q "$removed1" <<<"$out" &&
  grep -q "^baton ckpt push: note: g/checkpoints/s00-step00000002 was removed while it was being read (the run's retention, as it saved a newer one); reading g/checkpoints/s00-step00000001, the newest of g, instead$" <<<"$out" &&
  grep -q "^pushed g/checkpoints/s00-step00000001 to $url/gone/s00-step00000001$" <<<"$out" &&
  ok "push of a run whose newest checkpoint went while read: the next newest pushed" ||
  fail "push of a run whose newest checkpoint went while read: exit $rc: $out"
gone_run 1
out=$(BATON_FAULT_CKPT_REMOVE_AT=sent BATON_FAULT_CKPT_REMOVE=s00-step00000001 "$baton" ckpt push g/checkpoints/s00-step00000001 "$url/gone1" 2>&1)
rc=$?
[[ $rc -eq 1 && -z $(files nginx/www/store/gone1) ]] && grep -q "$removed1" <<<"$out" &&
  grep -q "^baton ckpt push: g/checkpoints/s00-step00000001: the checkpoint was removed while it was being read" <<<"$out" &&
  ok "push of a checkpoint removed while read -> 1, said so" ||
  fail "push of a checkpoint removed while read: exit $rc: $out"
gone_run 4
out=$(BATON_FAULT_CKPT_REMOVE_AT=sent BATON_FAULT_CKPT_REMOVE=s00-step00000004,s00-step00000003,s00-step00000002 "$baton" ckpt push g "$url/gone2" 2>&1)
rc=$?
[[ $rc -eq 1 && -z $(files nginx/www/store/gone2) && $(grep -c "$removed1" <<<"$out") -eq 3 ]] &&
  grep -q "^baton ckpt push: g/checkpoints/s00-step00000002 was removed while it was being read, as was each checkpoint of g read before it (3 tried; " <<<"$out" &&
  ok "push of a run whose every checkpoint tried went while read -> 1, said so" ||
  fail "push of a run whose every checkpoint tried went: exit $rc: $out"
# ... removed as push opens it, before anything was sent: exit 1 said so, nothing of it in
# the store and nothing to take out again
gone_run 1
out=$(BATON_FAULT_CKPT_REMOVE=s00-step00000001 "$baton" ckpt push g/checkpoints/s00-step00000001 "$url/gone3" 2>&1)
rc=$?
[[ $rc -eq 1 && -z $(files nginx/www/store/gone3) && $out != *"removed from the store"* && $out != *"  rank-0000"* ]] &&
  grep -q "^baton ckpt push: g/checkpoints/s00-step00000001: the checkpoint was removed while it was being read" <<<"$out" &&
  ok "push of a checkpoint removed before anything was sent -> 1, said so, the store holds nothing of it" ||
  fail "push of a checkpoint removed before anything was sent: exit $rc: $out; $(files nginx/www/store/gone3)"
# ... removed with every file already in the store, just before manifest.pb is sent: the
# store's complete copy (its manifest.pb too) left as it was
gone_run 1
expect 0 pushed -- push g/checkpoints/s00-step00000001 "$url/gone4"
out=$(BATON_FAULT_CKPT_REMOVE=s00-step00000001 BATON_FAULT_CKPT_REMOVE_AT=manifest "$baton" ckpt push g/checkpoints/s00-step00000001 "$url/gone4" 2>&1)
rc=$?
[[ $rc -eq 1 && $(grep -c ": already there" <<<"$out") -eq 2 && $out != *"removed from the store"* ]] &&
  grep -q "^baton ckpt push: g/checkpoints/s00-step00000001: the checkpoint was removed while it was being read" <<<"$out" &&
  same_files "small/checkpoints/$name" nginx/www/store/gone4/s00-step00000001 &&
  ok "push with every file there, its checkpoint removed before manifest.pb -> 1, the store's copy kept" ||
  fail "push with every file there, its checkpoint removed before manifest.pb: exit $rc: $out; $(files nginx/www/store/gone4)"
# Any other failure after files were sent (a shard failing its CRC32C as it is read, the
# first one already sent): what it sent removed again; so too where it replaced another
# checkpoint of the name, whose manifest.pb it had removed.
out=$("$baton" ckpt push "dmg/$name" "$url/dmg" 2>&1)
rc=$?
[[ $rc -eq 1 && $out == *"rank-00001.bin: CRC32C mismatch"* && -z $(files nginx/www/store/dmg) ]] &&
  grep -q "^  rank-00000.bin: sent" <<<"$out" &&
  grep -q "^baton ckpt push: removed from the store the 1 file of $name this push left there without a manifest.pb$" <<<"$out" &&
  before "rank-00001.bin: CRC32C mismatch" "removed from the store" &&
  ok "push failing after a file was sent: that file removed from the store, said after why" ||
  fail "push failing after a file was sent: exit $rc: $out; $(files nginx/www/store/dmg)"
expect 0 pushed -- push "small/checkpoints/$name" "$url/dmg"
out=$("$baton" ckpt push "dmg/$name" "$url/dmg" 2>&1)
rc=$?
[[ $rc -eq 1 && -z $(files nginx/www/store/dmg) ]] &&
  grep -q "^baton ckpt push: removed from the store the 2 files of $name this push left there without a manifest.pb$" <<<"$out" &&
  ok "a failed push replacing another checkpoint: nothing left without a manifest.pb" ||
  fail "a failed push replacing another checkpoint: exit $rc: $out; $(files nginx/www/store/dmg)"
# ... replacing one with more files (world 2 by world 1): the replaced one's rank-00002.bin,
# which no manifest.pb lists any more, removed with its manifest.pb; so after a push that
# works, which leaves exactly the new checkpoint's files
"$make_ckpt" write small2 2 16 || exit 1
extra="^  rank-00002.bin: removed (the checkpoint replaced had it, this one has not)$"
expect 0 pushed -- push "small2/checkpoints/$name" "$url/dmg"
out=$("$baton" ckpt push "dmg/$name" "$url/dmg" 2>&1)
rc=$?
[[ $rc -eq 1 && -z $(files nginx/www/store/dmg) ]] && grep -q "$extra" <<<"$out" &&
  ok "a failed push replacing a checkpoint with more files: nothing left" ||
  fail "a failed push replacing a checkpoint with more files: exit $rc: $out; $(files nginx/www/store/dmg)"
expect 0 pushed -- push "small2/checkpoints/$name" "$url/fewer"
out=$("$baton" ckpt push "small/checkpoints/$name" "$url/fewer" 2>&1)
rc=$?
[[ $rc -eq 0 ]] && grep -q "$extra" <<<"$out" && same_files "small/checkpoints/$name" "nginx/www/store/fewer/$name" &&
  ok "a push replacing a checkpoint with more files: the store holds the new files only" ||
  fail "a push replacing a checkpoint with more files: exit $rc: $out; $(files nginx/www/store/fewer)"
# ... where the store no longer held such a file (its manifest.pb listed it): nothing said
expect 0 pushed -- push "small2/checkpoints/$name" "$url/miss"
rm "nginx/www/store/miss/$name/rank-00002.bin" || exit 1
out=$("$baton" ckpt push "small/checkpoints/$name" "$url/miss" 2>&1)
rc=$?
[[ $rc -eq 0 && $out != *"rank-00002.bin: removed"* ]] && same_files "small/checkpoints/$name" "nginx/www/store/miss/$name" &&
  ok "a replaced checkpoint's file the store did not hold: not said to be removed" ||
  fail "a replaced checkpoint's file the store did not hold: exit $rc: $out; $(files nginx/www/store/miss)"
# ... a run's newest checkpoint removed (its retention) before push touched the store's
# other checkpoint of that name: the store's copy left whole, the next newest pushed
rm -rf keep && mkdir keep && cp -r "small2/checkpoints/$name" keep/s00-step00000002 || exit 1
expect 0 pushed -- push keep/s00-step00000002 "$url/keep"
gone_run 2
out=$(BATON_FAULT_CKPT_REMOVE=s00-step00000002 "$baton" ckpt push g "$url/keep" 2>&1)
rc=$?
[[ $rc -eq 0 && $out != *"manifest.pb: removed"* ]] && same_files keep/s00-step00000002 nginx/www/store/keep/s00-step00000002 &&
  same_files g/checkpoints/s00-step00000001 nginx/www/store/keep/s00-step00000001 &&
  grep -q "^baton ckpt push: note: g/checkpoints/s00-step00000002 was removed while it was being read" <<<"$out" &&
  ok "a checkpoint removed before push replaced the store's: the store's kept whole, the next newest pushed" ||
  fail "a checkpoint removed before push replaced the store's: exit $rc: $out; $(files nginx/www/store/keep)"
# ... a store that lets its manifest.pb be deleted but refuses (403) to delete such a file:
# exit 1 (the store has changed), saying which file
nport=$(free_port) || exit 1
mkdir perobj
/usr/bin/python3 "$here/teststore.py" "$nport" perobj deny 403 manifest 2>perobj.log &
nodel_pid=$!
if wait_port "$nport" "$nodel_pid"; then
  expect 0 pushed -- push "small2/checkpoints/$name" "http://127.0.0.1:$nport/store"
  out=$("$baton" ckpt push "small/checkpoints/$name" "http://127.0.0.1:$nport/store" 2>&1)
  rc=$?
  [[ $rc -eq 1 && ! -e perobj/store/$name/manifest.pb ]] &&
    grep -Fxq "baton ckpt push: DELETE http://127.0.0.1:$nport/store/$name/rank-00002.bin: HTTP 403: the manifest.pb of $name was removed, but the store refused to delete rank-00002.bin (the checkpoint replaced had it, this one has not)" <<<"$out" &&
    ok "a replaced checkpoint's file the store refuses to delete: exit 1, said" ||
    fail "a replaced checkpoint's file the store refuses to delete: exit $rc: $out; $(files perobj)"
else
  fail "the store refusing DELETE but of manifest.pb did not start: $(cat perobj.log)"
fi
kill "$nodel_pid" && wait "$nodel_pid" 2>/dev/null
nodel_pid=

# A store whose HEAD answers 200 with no Content-Length for a manifest.pb (the rest as
# nginx does; a manifest.pb PUT under /lost/ is kept but answered 500, as when its answer
# is lost; a manifest.pb HEAD under /headfail/ answers 400 once it was asked before).
lport=$(free_port) || exit 1
mkdir nolen
/usr/bin/python3 "$here/teststore.py" "$lport" nolen nolen 2>>nolen.log &
nolen_pid=$!
lurl=http://127.0.0.1:$lport
if wait_port "$lport" "$nolen_pid"; then
  # its manifest.pb is seen: a checkpoint of the same name with other values replaces it,
  # the old manifest.pb removed before any file
  expect 0 pushed -- push "small/checkpoints/$name" "$lurl/store"
  : >nolen.log
  out=$("$baton" ckpt push "small-b/checkpoints/$name" "$lurl/store" 2>&1)
  rc=$?
  first=$(grep -E '^(PUT|DELETE) ' nolen.log | head -n 1)
  [[ $rc -eq 0 && $first == "DELETE /store/$name/manifest.pb "* ]] &&
    same_files "small-b/checkpoints/$name" "nolen/store/$name" &&
    ok "store without HEAD lengths: a replacing push removes the old manifest.pb first" ||
    fail "store without HEAD lengths: a replacing push: exit $rc, first change '$first': $out"
  # a push whose manifest.pb arrived, its answer lost: the files it lists stay, pullable
  out=$("$baton" ckpt push "small/checkpoints/$name" "$lurl/lost" 2>&1)
  rc=$?
  [[ $rc -eq 1 && $out == *"PUT $lurl/lost/$name/manifest.pb: HTTP 500"* ]] &&
    grep -q "^baton ckpt push: the store holds a manifest.pb of $name again (this push's, or another's): its files are left as they are$" <<<"$out" &&
    same_files "small/checkpoints/$name" "nolen/lost/$name" &&
    ok "store without HEAD lengths: a push whose manifest.pb answer was lost leaves its files" ||
    fail "store without HEAD lengths: manifest.pb answer lost: exit $rc: $out; $(files nolen/lost)"
  mkdir got-lost
  expect 0 pulled -- pull "$lurl/lost/$name" --into got-lost
  # the undo's HEAD failing: the files may stay, and where
  out=$("$baton" ckpt push "dmg/$name" "$lurl/headfail" 2>&1)
  rc=$?
  [[ $rc -eq 1 && $out == *"baton ckpt push: HEAD $lurl/headfail/$name/manifest.pb: HTTP 400 (file manifest.pb): 2 files of $name may stay under $lurl/headfail/$name/ without a manifest.pb (the next push of $name replaces them; or remove them by other means)"* ]] &&
    before "rank-00001.bin: CRC32C mismatch" "may stay under" &&
    ok "a failed push whose undo cannot tell whether a manifest.pb is there: says the files may stay, and where" ||
    fail "a failed push whose undo's HEAD failed: exit $rc: $out"
else
  fail "the store without HEAD lengths did not start: $(cat nolen.log)"
fi
kill "$nolen_pid" && wait "$nolen_pid" 2>/dev/null
nolen_pid=

kill "$server_pid" && wait "$server_pid" 2>/dev/null
server_pid=
expect 1 "HEAD $url/$name/manifest.pb: .*(onnect|refused)" -- push run "$url"

# A server that accepts and never answers: each request gives up after --stall-time
# seconds without a byte (default 60; no --max-time given), then the tries are spent.
/usr/bin/python3 -c '
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(8)
held = []
while True: held.append(s.accept()[0])' "$port" &
server_pid=$!
wait_port "$port" "$server_pid" || fail "the silent server did not start"
t0=$SECONDS
expect 1 "HEAD $url/$name/manifest.pb: .*too slow" -- push run "$url" --stall-time 1s
(( SECONDS - t0 < 20 )) && ok "stalled server: gave up in $((SECONDS - t0)) s" ||
  fail "stalled server: took $((SECONDS - t0)) s"
expect 2 "^baton ckpt pull: --stall-time 'never': expected a duration" -- pull "$url/$name" --stall-time never

[[ $failures -eq 0 ]] || { echo "$failures failure(s)"; exit 1; }
echo "all http push/pull checks passed"
