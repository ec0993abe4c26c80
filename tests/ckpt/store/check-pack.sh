#!/usr/bin/env bash
# baton ckpt pack/unpack: a round trip gives identical files that read back with every
# CRC checked; a flipped shard byte makes pack refuse (naming file and byte range); a
# damaged, truncated or tampered archive, or one with unsafe entries, makes unpack fail
# leaving neither the checkpoint nor its .partial directory behind, nor the --into it
# created; an existing or empty output refused (exit 2), missing directories created;
# a file size limit (SIGXFSZ) mid-way leaves nothing.
# With a third argument, full: pack into a 1 MB tmpfs (in a mount namespace of its own,
# gone with it) fails naming the archive being written and "No space left on device",
# and leaves nothing there; SKIPPED (77) where no mount namespace can be made.
#   check-pack.sh BATON MAKE_CKPT [full]
set -u
baton=$1 make_ckpt=$2 mode=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/baton-test-pack.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
name=s00-step00000004
# fail, ok and expect (baton ckpt ARGS exits STATUS with PATTERN) come from server-lib.sh
source "$here/server-lib.sh"
# nothing_left DIR: neither DIR/$name nor DIR/$name.partial exists.
nothing_left() {
  if [[ -e $1/$name || -e $1/$name.partial ]]; then fail "$1: a checkpoint or .partial was left behind"
  else ok "$1: nothing left behind"; fi
}

"$make_ckpt" write run 3 700 || exit 1
src=run/checkpoints/$name

if [[ $mode == full ]]; then
  if ! unshare -Urm true 2>/dev/null; then
    echo "SKIPPED: no mount namespace here for a small tmpfs"
    exit 77
  fi
  mkdir small
  unshare -Urm bash -c "mount -t tmpfs -o size=1m tmpfs small &&
    { \"$baton\" ckpt pack run --out small/p.tar.zst >full.out 2>&1; echo \$? >full.rc;
      ls -A small >full.left; }"
  [[ $(cat full.rc) == 1 ]] &&
    grep -q "small/p.tar.zst.partial: cannot write (archiving $src/rank-0000[0-9].bin): No space left on device" full.out &&
    ok "pack on a full disk: exit 1 naming the archive and ENOSPC" ||
    fail "pack on a full disk: exit $(cat full.rc): $(cat full.out)"
  [[ ! -s full.left ]] && ok "pack on a full disk: nothing left" || fail "pack left $(cat full.left)"
  [[ $failures -eq 0 ]] || exit 1
  exit 0
fi

expect 0 'usage: baton ckpt pack' -- pack --help
expect 0 'usage: baton ckpt unpack' -- unpack --help
expect 2 'missing CKPT' -- pack
expect 2 'unexpected argument' -- pack run --frobnicate
expect 2 'nothing|no such|not|ENOENT' -- pack missing-dir

# Round trip, given the run directory (its newest checkpoint) and the default name.
expect 0 "packed .* into $name.tar.zst" -- pack run
[[ -e $name.tar.zst.partial ]] && fail "pack left $name.tar.zst.partial"
mkdir restored
expect 0 "unpacked" -- unpack "$name.tar.zst" --into restored
if diff -r "$src" "restored/$name" >/dev/null; then ok "round trip: identical files"
else fail "round trip: files differ"; fi
if "$make_ckpt" read "restored/$name"; then ok "round trip: every tensor reads back, CRCs ok"
else fail "round trip: tensors do not read back"; fi
# The archive is pax tar + zstd, one top-level directory, manifest.pb last.
listing=$(zstd -dc "$name.tar.zst" | tar -tf -)
if [[ $(head -n 1 <<<"$listing") == "$name/" && $(tail -n 1 <<<"$listing") == "$name/manifest.pb" ]] &&
   ! grep -qv "^$name/" <<<"$listing"; then ok "archive layout: $name/ first, manifest.pb last"
else fail "archive layout: $listing"; fi
expect 2 'already exists' -- unpack "$name.tar.zst" --into restored
expect 0 "into out.tar.zst" -- pack "$src" --out out.tar.zst

# Outputs: an existing one is refused (exit 2) before anything is written, an empty
# path too; missing directories above one are created, and removed again on failure.
cp out.tar.zst keep.tar.zst
expect 2 'out.tar.zst: already exists' -- pack "$src" --out out.tar.zst
cmp -s out.tar.zst keep.tar.zst && ok "pack: an existing --out is left as it was" || fail "pack overwrote out.tar.zst"
mkdir adir
expect 2 'adir: already exists' -- pack "$src" --out adir
[[ -e adir.partial || -n $(ls -A adir) ]] && fail "pack --out DIR wrote something: $(ls -d adir*)"
expect 2 "--out ''" -- pack "$src" --out ""
expect 2 "--into ''" -- unpack out.tar.zst --into ""
expect 0 "into deep/er/x.tar.zst" -- pack "$src" --out deep/er/x.tar.zst
expect 0 "into new/a/$name" -- unpack deep/er/x.tar.zst --into new/a
same_files "$src" "new/a/$name" && ok "unpack into new directories: identical files" || fail "unpack --into new/a"
# a file size limit (SIGXFSZ, not ignored) mid-way: nothing left, the directories gone
(ulimit -f 1000; "$baton" ckpt pack "$src" --out big/x.tar.zst >xfsz.out 2>&1)
rc=$?
[[ $rc -eq 153 && ! -e big ]] && ok "pack stopped by SIGXFSZ -> $rc, nothing left" ||
  fail "pack under ulimit -f: exit $rc, left $(find big 2>/dev/null): $(cat xfsz.out)"
(ulimit -f 1000; "$baton" ckpt unpack out.tar.zst --into big2/a >xfsz.out 2>&1)
rc=$?
[[ $rc -eq 153 && ! -e big2 ]] && ok "unpack stopped by SIGXFSZ -> $rc, nothing left" ||
  fail "unpack under ulimit -f: exit $rc, left $(find big2 2>/dev/null): $(cat xfsz.out)"
(trap '' XFSZ; ulimit -f 1000; "$baton" ckpt pack "$src" --out big3/x.tar.zst >xfsz.out 2>&1)
rc=$?
[[ $rc -eq 1 && ! -e big3 ]] &&
  ok "pack past a file size limit (SIGXFSZ ignored) -> 1, nothing left" ||
  fail "pack under ulimit -f, SIGXFSZ ignored: exit $rc, left $(find big3 2>/dev/null): $(cat xfsz.out)"

# A flipped byte in a shard file: pack refuses, naming file and byte range.
cp -r "$src" "$name" && chmod -R u+w "$name"
printf '\x5a' | dd of="$name/rank-00001.bin" bs=1 seek=300000 conv=notrunc status=none
expect 1 "rank-00001.bin: CRC32C mismatch in bytes \[262144, 327680\)" -- pack "$name" --out bad.tar.zst
[[ -e bad.tar.zst || -e bad.tar.zst.partial ]] && fail "pack left an archive behind after refusing"
# A truncated shard file: pack refuses too.
cp "$src/rank-00001.bin" "$name/rank-00001.bin" && truncate -s 100000 "$name/rank-00002.bin"
expect 1 "rank-00002.bin: 100000 bytes, the manifest says" -- pack "$name" --out bad.tar.zst

# A damaged archive (bytes overwritten in the middle) and a truncated one.
mkdir into
cp "$name.tar.zst" damaged.tar.zst
size=$(stat -c %s damaged.tar.zst)
head -c 4096 /dev/urandom | dd of=damaged.tar.zst bs=1 seek=$((size / 2)) conv=notrunc status=none
expect 1 "damaged.tar.zst" -- unpack damaged.tar.zst --into into
nothing_left into
head -c $((size * 3 / 4)) "$name.tar.zst" >truncated.tar.zst
expect 1 "truncated.tar.zst" -- unpack truncated.tar.zst --into into
nothing_left into
out=$("$baton" ckpt unpack truncated.tar.zst --into made/here 2>&1)
[[ $? -eq 1 && ! -e made ]] && ok "failed unpack: the --into it created is gone" ||
  fail "failed unpack left $(find made 2>/dev/null)"
[[ $(grep -o 'truncated.tar.zst' <<<"$out" | wc -l) -eq 1 ]] && ok "the archive named once: $out" ||
  fail "the archive named more than once: $out"
# A well-formed archive of tampered data: the CRC check after extraction catches it.
rm -rf "$name" && cp -r "$src" "$name" && chmod -R u+w "$name"
printf '\x01' | dd of="$name/rank-00000.bin" bs=1 seek=5 conv=notrunc status=none
tar --zstd -cf tampered.tar.zst "$name"
expect 1 "rank-00000.bin: CRC32C mismatch in bytes \[0, 65536\)" -- unpack tampered.tar.zst --into into
nothing_left into
# An archive without manifest.pb is not a checkpoint.
rm "$name/manifest.pb" && tar --zstd -cf nomanifest.tar.zst "$name"
expect 1 "manifest" -- unpack nomanifest.tar.zst --into into
nothing_left into

# Unsafe entries: absolute paths, '..', links, a second top-level directory.
/usr/bin/python3 - <<'PY' || exit 1
import io, tarfile
def make(path, entries):
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as t:
        for name, kind, target in entries:
            info = tarfile.TarInfo(name)
            if kind == "file":
                data = b"x" * 10
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
            else:
                info.type = {"dir": tarfile.DIRTYPE, "sym": tarfile.SYMTYPE, "hard": tarfile.LNKTYPE}[kind]
                info.linkname = target
                t.addfile(info)
make("abs.tar", [("/tmp/baton-evil/x", "file", "")])
make("dotdot.tar", [("ck/", "dir", ""), ("ck/../../evil", "file", "")])
make("dotdottop.tar", [("../evil/", "dir", ""), ("../evil/x", "file", "")])
make("symlink.tar", [("ck/", "dir", ""), ("ck/manifest.pb", "sym", "/etc/passwd")])
make("hardlink.tar", [("ck/", "dir", ""), ("ck/a", "file", ""), ("ck/b", "hard", "ck/a")])
make("subdir.tar", [("ck/", "dir", ""), ("ck/sub/x", "file", "")])
make("twotops.tar", [("ck/", "dir", ""), ("ck/a", "file", ""), ("other/a", "file", "")])
PY
for t in abs dotdot dotdottop symlink hardlink subdir twotops; do
  expect 1 "entry '.*'" -- unpack "$t.tar" --into into
done
nothing_left into
[[ -z $(ls -A into) ]] || fail "unsafe archives left files in into/: $(ls -A into)"
[[ -e /tmp/baton-evil || -e evil || -e ../evil ]] && fail "an unsafe entry was written outside"

[[ $failures -eq 0 ]] || { echo "$failures failure(s)"; exit 1; }
echo "all pack/unpack checks passed"
