#!/usr/bin/env bash
# baton ckpt push/pull to s3:// (path-style, SigV4 signed by libcurl) against
# s3_server.py, a local S3-compatible server that verifies every request's signature
# with its own SigV4 implementation, itself first checked against AWS's published test
# vectors. Round trip; a same-named later checkpoint replacing the store's (manifest.pb
# deleted first); a pull resumed from a partly fetched file (Range request); wrong
# credentials answered 403 and reported; missing credentials refused; a push failing after
# it sent a file deletes it again.
#   check-s3.sh BATON MAKE_CKPT SOURCE_DIR
set -u
baton=$1 make_ckpt=$2 here=$3
. "$here/server-lib.sh"
python=/usr/bin/python3
[[ -x $python ]] || { echo "SKIPPED: $python is not installed"; exit 77; }
work=$(mktemp -d /tmp/baton-test-s3.XXXXXX)
server_pid=
cleanup() {
  [[ -n $server_pid ]] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
cd "$work" || exit 1
name=s00-step00000004
log=$work/s3.log

"$python" "$here/s3_server.py" --selftest || exit 1
export AWS_ACCESS_KEY_ID=AKIDBATONTEST AWS_SECRET_ACCESS_KEY=baton/secret+key AWS_REGION=eu-test-1
"$python" "$here/s3_server.py" s3root ckpts "$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY" \
  "$AWS_REGION" port "$log" 2>server.err &
server_pid=$!
for _ in $(seq 100); do [[ -s port ]] && break; sleep 0.1; done
port=$(cat port 2>/dev/null)
wait_port "${port:-0}" "$server_pid" || { echo "s3_server did not start:"; cat server.err; exit 1; }
endpoint=http://127.0.0.1:$port
remote=s3root/ckpts/pre/$name

"$make_ckpt" write run 2 1024 || exit 1
src=run/checkpoints/$name
size0=$(stat -c %s "$src/rank-00000.bin")

expect 0 "pushed .* to $endpoint/ckpts/pre/$name" -- push run s3://ckpts/pre --endpoint "$endpoint"
same_files "$src" "$remote" && ok "s3 push: the server holds identical files" || fail "s3 push: files differ"
if grep -q ' 403 ' "$log"; then fail "s3 push: requests failed verification: $(cat server.err)"
elif grep -Eq '^(PUT|HEAD) /ckpts/pre/.* host;x-amz-content-sha256;x-amz-date$' "$log"; then
  ok "s3 push: every request's SigV4 signature verified (host;x-amz-content-sha256;x-amz-date)"
else fail "s3 push: unexpected log: $(cat "$log")"; fi
[[ $(grep '^PUT ' "$log" | tail -n 1) == "PUT /ckpts/pre/$name/manifest.pb 200"* ]] &&
  ok "s3 push: manifest.pb last" || fail "s3 push: manifest.pb not last"

mkdir got
expect 0 "pulled .* into got/$name" -- pull "s3://ckpts/pre/$name" --endpoint "$endpoint" --into got
same_files "$src" "got/$name" && ok "s3 pull: identical files" || fail "s3 pull: files differ"
"$make_ckpt" read "got/$name" && ok "s3 pull: tensors read back" || fail "s3 pull: tensors unreadable"

# A pull that stopped part way through rank-00000.bin: only the rest is fetched.
mkdir -p "got2/$name.partial"
head -c 300000 "$src/rank-00000.bin" >"got2/$name.partial/rank-00000.bin"
: >"$log"
expect 0 "rank-00000.bin: continuing at byte 300000" -- pull "s3://ckpts/pre/$name" --endpoint "$endpoint" --into got2
line=$(grep "^GET /ckpts/pre/$name/rank-00000.bin" "$log" | cut -d' ' -f1-5)
want="GET /ckpts/pre/$name/rank-00000.bin 206 $((size0 - 300000)) bytes=300000-"
[[ $line == "$want" ]] && ok "s3 resumed pull: signed Range request for the rest" ||
  fail "s3 resumed pull: log has '$line', want '$want'"
same_files "$src" "got2/$name" && ok "s3 resumed pull: identical files" || fail "s3 resumed pull: files differ"

# A later checkpoint of the same name, files of the same sizes: none skipped for its size,
# the store's manifest.pb deleted before the first file is replaced, the new one last.
"$make_ckpt" write run-b 2 1024 1 || exit 1
: >"$log"
out=$("$baton" ckpt push run-b s3://ckpts/pre --endpoint "$endpoint" 2>&1) || fail "s3 second push: $out"
grep -q "already there" <<<"$out" && fail "s3 second push skipped a file: $out"
[[ $(grep -E '^(PUT|DELETE) ' "$log" | head -n 1) == "DELETE /ckpts/pre/$name/manifest.pb 204"* ]] &&
  ok "s3 second push: the old manifest.pb deleted (signed) before any file" ||
  fail "s3 second push: $(cat "$log")"
[[ $(grep '^PUT ' "$log" | tail -n 1) == "PUT /ckpts/pre/$name/manifest.pb 200"* &&
   $(grep -c '^PUT ' "$log") -eq 4 ]] && ok "s3 second push: every file, manifest.pb last" ||
  fail "s3 second push: $(cat "$log")"
mkdir got-b
expect 0 "pulled" -- pull "s3://ckpts/pre/$name" --endpoint "$endpoint" --into got-b
"$make_ckpt" read "got-b/$name" 1 && ok "s3 second push: pull reads the new values" ||
  fail "s3 second push: pull does not read the new values"
: >"$log"
expect 0 "already there" -- push run-b s3://ckpts/pre --endpoint "$endpoint"
[[ $(grep -c '^PUT ' "$log") -eq 1 ]] && ! grep -q '^DELETE ' "$log" &&
  ok "s3 push of the same files again: only manifest.pb sent" || fail "s3 push again: $(cat "$log")"

# A push that fails once it sent a file (the next one fails its CRC32C as it is read):
# what it sent deleted again (signed), nothing of it left in the store.
mkdir dmg && cp -r "run-b/checkpoints/$name" dmg/ || exit 1
"$python" -c 'import sys; p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[0] ^= 0xff; open(p, "wb").write(b)' \
  "dmg/$name/rank-00001.bin"
out=$("$baton" ckpt push "dmg/$name" s3://ckpts/dmg --endpoint "$endpoint" 2>&1)
rc=$?
[[ $rc -eq 1 && $out == *"rank-00001.bin: CRC32C mismatch"* && -z $(find s3root/ckpts/dmg -type f 2>/dev/null) ]] &&
  grep -q "^baton ckpt push: removed from the store the [12] files\? of $name this push left there without a manifest.pb$" <<<"$out" &&
  ok "s3 push failing after a file was sent: deleted again" ||
  fail "s3 push failing after a file was sent: exit $rc: $out; $(find s3root/ckpts/dmg -type f 2>/dev/null)"

# Wrong secret: 403 reported with the URL; missing credentials and a bad URL refused.
AWS_SECRET_ACCESS_KEY=wrong expect 1 "HEAD $endpoint/ckpts/pre/$name/manifest.pb: HTTP 403" -- \
  push run s3://ckpts/pre --endpoint "$endpoint"
AWS_REGION=us-west-2 expect 1 "HTTP 403" -- pull "s3://ckpts/pre/$name" --endpoint "$endpoint" --into got3
env -u AWS_ACCESS_KEY_ID "$baton" ckpt push run s3://ckpts/pre --endpoint "$endpoint" >out 2>&1
rc=$?
[[ $rc -eq 2 ]] && grep -q AWS_ACCESS_KEY_ID out && ok "s3 without credentials -> 2" ||
  fail "s3 without credentials -> $rc: $(cat out)"
expect 2 "no bucket" -- push run s3:// --endpoint "$endpoint"
expect 2 "for s3:// only" -- push run http://127.0.0.1:1/x --endpoint "$endpoint"

[[ $failures -eq 0 ]] || { echo "$failures failure(s)"; exit 1; }
echo "all s3 push/pull checks passed"
