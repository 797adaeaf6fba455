#!/usr/bin/env bash
# An agent over loopback against a local backup of the same tree, on one
# machine (docs/agents.md, "Performance"): until `vouch bench` has an
# agent scenario. Usage: bench/agent-vs-local.sh [SOURCE_DIR]
# (VOUCH=path/to/vouch, WORKDIR=scratch directory; needs curl and bc).
set -euo pipefail
V=${VOUCH:-target/release/vouch}
SRC=${1:-/var/tmp/vouch-bench/linux-6.1}
W=${WORKDIR:-/var/tmp/vouch-agent-bench}
rm -rf $W; mkdir -p $W
find $SRC -type f -print0 | xargs -0 cat > /dev/null   # warm cache
export VOUCH_PASSWORD=bench-pass
# 1. local
$V --repo $W/local init --quiet >/dev/null 2>&1 || $V --repo $W/local init
s=$(date +%s.%N); $V --repo $W/local backup --quiet --no-session $SRC; e=$(date +%s.%N)
local_t=$(echo "$e - $s" | bc); echo "local first backup: $local_t s"
s=$(date +%s.%N); $V --repo $W/local backup --quiet --no-session $SRC; e=$(date +%s.%N)
echo "local second backup: $(echo "$e - $s" | bc) s"
# 2. agent over loopback (plain HTTP, 127.0.0.1)
printf '[sources]\nallow = ["/var/tmp"]\n' > $W/vouch.toml
$V serve --listen 127.0.0.1:0 --data-dir $W/data --config $W/vouch.toml > $W/serve.out 2> $W/serve.err &
SP=$!; trap "kill $SP" EXIT
for i in $(seq 1 100); do grep -q '^listening on ' $W/serve.out && break; sleep 0.1; done
URL=$(sed -n 's/^listening on //p' $W/serve.out)
ADMIN=$(cat $W/data/initial-admin-token)
E=$($V token --data-dir $W/data create --role enroll 2>/dev/null)
sleep 1.2
VOUCH_ENROLL_TOKEN=$E $V agent --server $URL --data-dir $W/agent --name bench --enroll-only 2>/dev/null
curl -s -H "Authorization: Bearer $ADMIN" -H 'content-type: application/json' -X POST $URL/api/v1/plans \
  -d "{\"id\":\"bench\",\"source\":\"agent:bench:$SRC\",\"schedule\":\"0 0 1 1 *\",\"verification\":{\"after_backup\":false}}" > /dev/null
for run in first second; do
  curl -s -H "Authorization: Bearer $ADMIN" -X POST $URL/api/v1/plans/bench/run > /dev/null
  s=$(date +%s.%N); VOUCH_LOG=warn $V agent --data-dir $W/agent --jobs 1 --poll-wait 5s; e=$(date +%s.%N)
  echo "agent $run backup (poll + backup + report): $(echo "$e - $s" | bc) s"
done
du -sb $W/local $W/data/agents/bench/repository | cat
