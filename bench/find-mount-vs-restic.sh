#!/usr/bin/env bash
# vouch and restic side by side on the three-backup kernel repository
# (docs/performance.md, "find, stats and mount"): `find` by name and by
# blob, `stats`, and reading through `mount` (the whole linux-6.1 tree,
# and one 512 MiB incompressible file). Page cache dropped before each
# timed step; steps alternate between the tools.
#
# Usage: bench/find-mount-vs-restic.sh (ROUNDS=2, VOUCH=path/to/vouch,
# WORKDIR=/var/tmp/vouch-find-bench). Needs: root, restic, bc,
# ../shared/bench/fetch-data.sh's trees in /var/tmp/vouch-bench.
set -euo pipefail
cd "$(dirname "$0")/.."
V=$(realpath "${VOUCH:-target/release/vouch}")
D=${DATA:-/var/tmp/vouch-bench}
ROUNDS=${ROUNDS:-2}
W=${WORKDIR:-/var/tmp/vouch-find-bench}
export VOUCH_PASSWORD=bench-pass RESTIC_PASSWORD=bench-pass VOUCH_CACHE_DIR=$W/vcache
VR=$W/vouch-repo RR=$W/restic-repo
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
# t LABEL COMMAND...: prints "LABEL SECONDS"
t() {
  local label=$1; shift
  drop
  local s e; s=$(date +%s.%N)
  "$@" > $W/last.out 2>&1 || { echo "$label failed:"; tail -5 $W/last.out; exit 1; }
  e=$(date +%s.%N)
  echo "$label $(echo "$e - $s" | bc)"
}
if [[ ! -d $VR || ! -d $RR ]]; then
  rm -rf $W; mkdir -p $W
  $V init -r $VR > /dev/null
  restic init -r $RR > /dev/null
  for src in linux-6.1 linux-6.12 linux-6.1 big; do
    ( cd $D/$src && $V backup -q -r $VR --host bench . && restic backup -q -r $RR --host bench . ) > /dev/null
  done
fi
rm -rf $W/vcache
echo "# $(date -u +%FT%TZ) $($V --version) / $(restic version | head -1)"
for round in $(seq $ROUNDS); do
  t "vouch find-name" $V -r $VR find 'Makefile'
  t "restic find-name" restic -r $RR --no-cache find 'Makefile'
  t "vouch find-rare" $V -r $VR find '*sched*.c'
  t "restic find-rare" restic -r $RR --no-cache find '*sched*.c'
  t "vouch stats" $V -r $VR stats
  t "restic stats" restic -r $RR --no-cache stats --mode restore-size
done
vfirst=$($V -r $VR snapshots --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])')
vbig=$($V -r $VR snapshots --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[-1]["id"])')
rfirst=$(restic -r $RR --no-cache snapshots --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["short_id"])')
rbig=$(restic -r $RR --no-cache snapshots --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[-1]["short_id"])')
# find --blob: the files holding README's blob (one chunk: 727 bytes), by
# each tool's own id of it (vouch's is keyed; restic's is its SHA-256).
rblob=$(sha256sum $D/linux-6.1/README | cut -c1-64)
blob=$($V -r $VR cat tree "$vfirst:$D/linux-6.1" | python3 -c '
import json,sys
t=json.load(sys.stdin)["tree"]["nodes"]
print(next(n for n in t if bytes(n["name"])==b"README")["content"][0]["blob"])')
if [[ -n $blob ]]; then
  for round in $(seq $ROUNDS); do
    t "vouch find-blob" $V -r $VR find --blob "$blob"
    t "restic find-blob" restic -r $RR --no-cache find --blob "$rblob"
  done
fi
# Reading through the mounts.
mkdir -p $W/vm $W/rm
$V -r $VR mount $W/vm > $W/vmount.log 2>&1 &
VPID=$!
restic -r $RR --no-cache mount $W/rm > $W/rmount.log 2>&1 &
RPID=$!
trap 'kill -INT $VPID $RPID 2>/dev/null || true; sleep 1; umount -l $W/vm $W/rm 2>/dev/null || true' EXIT
for i in $(seq 60); do [[ -d $W/vm/ids && -d $W/rm/ids ]] && break; sleep 1; done
vroot=$(find $W/vm/ids/${vfirst:0:8} -maxdepth 6 -type d -name linux-6.1 | head -1)
rroot=$(find $W/rm/ids/$rfirst -maxdepth 6 -type d -name linux-6.1 | head -1)
# restic keeps a relative source's contents at the snapshot's root.
[[ -n $rroot ]] || rroot=$W/rm/ids/$rfirst
echo "# reading $vroot and $rroot"
for round in $(seq $ROUNDS); do
  # Through a pipe: GNU tar reads no file content when writing /dev/null.
  t "vouch mount-tree" bash -c "tar -C $vroot -cf - . | wc -c"
  t "restic mount-tree" bash -c "tar -C $rroot -cf - . | wc -c"
  vb=$(find $W/vm/ids/${vbig:0:8} -name random.bin | head -1)
  rb=$(find $W/rm/ids/$rbig -name random.bin | head -1)
  t "vouch mount-big" dd if=$vb of=/dev/null bs=1M
  t "restic mount-big" dd if=$rb of=/dev/null bs=1M
done
