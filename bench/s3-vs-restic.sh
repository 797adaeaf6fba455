#!/usr/bin/env bash
# vouch and restic side by side on one S3 store (docs/performance.md,
# "S3"): until `vouch bench` has an S3 scenario. Per round, in alternating
# order, each tool into a fresh repository of the same bucket: the first
# backup, an unchanged second one, a restore to a tmpfs; the store's own
# request counter (RGW's admin socket) gives the requests of each step.
#
# Usage: bench/s3-vs-restic.sh [SOURCE_DIR] (ROUNDS=3, VOUCH=path/to/vouch)
# Needs: root (tmpfs), restic, bc, the store of .ci/s3-server.sh running
# (its variables are read from `.ci/s3-server.sh start`).
set -euo pipefail
cd "$(dirname "$0")/.."
V=${VOUCH:-target/release/vouch}
SRC=${1:-/var/tmp/vouch-bench/linux-6.1}
ROUNDS=${ROUNDS:-3}
S3DIR=${VOUCH_S3_DIR:-/var/tmp/vouch-s3}
set -a; eval "$(bash .ci/s3-server.sh start 2>/dev/null)"; set +a
export VOUCH_PASSWORD=bench-pass RESTIC_PASSWORD=bench-pass
W=${WORKDIR:-/var/tmp/vouch-s3-bench}
rm -rf $W; mkdir -p $W/restore
mountpoint -q $W/restore || mount -t tmpfs -o size=8g tmpfs $W/restore
trap 'umount $W/restore 2>/dev/null || true' EXIT
find $SRC -type f -print0 | xargs -0 cat > /dev/null   # warm cache
requests() {
  CEPH_CONF=$S3DIR/ceph.conf ceph --admin-daemon $S3DIR/run/client.rgw.vouch.asok perf dump 2>/dev/null |
    python3 -c "import json,sys; print(json.load(sys.stdin)['rgw']['req'])"
}
# step NAME TOOL COMMAND...: prints "TOOL NAME SECONDS REQUESTS"
step() {
  local name=$1 tool=$2; shift 2
  local r0 s e r1
  r0=$(requests); s=$(date +%s.%N)
  "$@" > $W/last.out 2>&1 || { echo "$tool $name failed:"; cat $W/last.out; exit 1; }
  e=$(date +%s.%N); r1=$(requests)
  echo "$tool $name $(echo "$e - $s" | bc) $((r1 - r0))"
}
run_tool() {
  local tool=$1 repo=$2
  if [[ $tool == vouch ]]; then
    export VOUCH_CACHE_DIR=$W/cache-vouch-$round
    $V -r $repo init > /dev/null
    step first vouch $V -r $repo backup --no-session $SRC
    step unchanged vouch $V -r $repo backup --no-session $SRC
    step restore vouch $V -r $repo restore latest --target $W/restore/v
    rm -rf $W/restore/v
  else
    export RESTIC_CACHE_DIR=$W/cache-restic-$round
    restic -r $repo init > /dev/null
    step first restic restic -r $repo backup $SRC
    step unchanged restic restic -r $repo backup $SRC
    step restore restic restic -r $repo restore latest --target $W/restore/r
    rm -rf $W/restore/r
  fi
}
for round in $(seq 1 $ROUNDS); do
  id=$(date +%s%N)
  if (( round % 2 )); then order="vouch restic"; else order="restic vouch"; fi
  for tool in $order; do
    run_tool $tool s3:$VOUCH_S3_ENDPOINT/bench-$id/$tool
  done
done | tee $W/results.txt
echo "== medians over $ROUNDS rounds (seconds, requests); ratio vouch/restic"
python3 - $W/results.txt <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if len(l.split()) == 4]
for step in ("first", "unchanged", "restore"):
    med = {}
    for tool in ("vouch", "restic"):
        t = [float(r[2]) for r in rows if r[0] == tool and r[1] == step]
        q = [int(r[3]) for r in rows if r[0] == tool and r[1] == step]
        med[tool] = (statistics.median(t), statistics.median(q))
    print(f"{step:10} vouch {med['vouch'][0]:7.2f} s {med['vouch'][1]:6d} req   "
          f"restic {med['restic'][0]:7.2f} s {med['restic'][1]:6d} req   ratio {med['vouch'][0] / med['restic'][0]:.2f}")
PY
