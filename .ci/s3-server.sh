#!/usr/bin/env bash
# A real S3 endpoint for tests: a single-node Ceph cluster (one mon, one mgr,
# one memstore OSD) with one RADOS Gateway, all on loopback, all in one
# private directory. Debian 12's ceph 16.2 packages, installed if missing.
# The approach is that of Ceph's own src/vstart.sh (a private ceph.conf, a
# hand-made monmap and keyring, daemons started directly), without systemd.
#
#   .ci/s3-server.sh start   start (or find running) and print ONE line on
#                            stdout, for eval:
#                              VOUCH_S3_ENDPOINT=http://127.0.0.1:PORT
#                              AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=...
#   .ci/s3-server.sh stop    stop every daemon started here, remove the dir
#   .ci/s3-server.sh status  exit 0 if running and answering, 1 if not
#
# Everything but that one line goes to stderr. The daemons fork into the
# background and outlive this script. Must run as root (apt-get, and the
# daemons are started as root, not as the packages' ceph user).
#
# Environment (all optional):
#   VOUCH_S3_DIR        cluster directory        (/var/tmp/vouch-s3)
#   VOUCH_S3_PORT       S3 (radosgw) TCP port    (7480)
#   VOUCH_S3_MON_PORT   monitor TCP port, msgr2  (3300)
#   VOUCH_S3_MEMSTORE   OSD capacity in bytes    (4 GiB; memory is only used
#                                                 as objects are written)
#   VOUCH_S3_MGR        1: start a ceph-mgr (default); 0: none (RGW does not
#                       need one; saves ~300 MB RSS, `ceph -s` then warns)
#   VOUCH_S3_ACCESS_KEY / VOUCH_S3_SECRET_KEY    fixed S3 keys (default:
#                                                 generated at creation)
# See docs/s3-server.md for the choices and the measured figures.
set -euo pipefail

DIR=${VOUCH_S3_DIR:-/var/tmp/vouch-s3}
PORT=${VOUCH_S3_PORT:-7480}
MON_PORT=${VOUCH_S3_MON_PORT:-3300}
MEMSTORE_BYTES=${VOUCH_S3_MEMSTORE:-4294967296}
CONF=$DIR/ceph.conf
KEYRING=$DIR/keyring
ENV_FILE=$DIR/s3.env
RGW_NAME=client.rgw.vouch
PACKAGES=(ceph-common ceph-mon ceph-mgr ceph-osd radosgw)
WITH_MGR=${VOUCH_S3_MGR:-1}
# The daemons, in start order: pid-file name and the process name (comm).
DAEMONS=("mon.a:ceph-mon")
[[ $WITH_MGR == 1 ]] && DAEMONS+=("mgr.x:ceph-mgr")
DAEMONS+=("osd.0:ceph-osd" "$RGW_NAME:radosgw")
# What `stop` looks for, whatever VOUCH_S3_MGR says now.
ALL_DAEMONS=("mon.a:ceph-mon" "mgr.x:ceph-mgr" "osd.0:ceph-osd" "$RGW_NAME:radosgw")

# All chatter on stderr; fd 3 keeps the real stdout for the one result line.
exec 3>&1 1>&2
T0=${EPOCHREALTIME/[.,]/}
# Messages carry the seconds since the script started.
log() {
  local ds=$(((${EPOCHREALTIME/[.,]/} - T0) / 100000))
  printf 's3-server [%d.%ds]: %s\n' $((ds / 10)) $((ds % 10)) "$*" >&2
}
die() { log "error: $*"; exit 1; }

# Every ceph tool started from here reads this cluster's configuration.
export CEPH_CONF=$CONF

# Refuse directories whose removal by `stop` would be a disaster.
case $DIR in
  "" | / | /var | /var/tmp | /tmp | /root | /home | /usr | /etc) die "refusing VOUCH_S3_DIR=$DIR" ;;
esac

# --- helpers -----------------------------------------------------------------

# The pid of daemon $1 (pid-file name) if it is alive and really is process
# $2 started with our ceph.conf (a stale pid file may name a reused pid).
daemon_pid() {
  local pidfile=$DIR/run/$1.pid pid cmdline
  [[ -r $pidfile ]] || return 1
  pid=$(<"$pidfile")
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$2" ]] || return 1
  cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
  [[ $cmdline == *"$CONF"* ]] || return 1
  echo "$pid"
}

# HTTP status of an anonymous GET / on the S3 port ("000" when nothing answers).
http_status() {
  curl -s -o /dev/null -m 5 -w '%{http_code}' "http://127.0.0.1:$PORT/" || true
}

# Running and answering: every daemon alive, keys saved, S3 port answering.
healthy() {
  local d
  [[ -r $ENV_FILE ]] || return 1
  for d in "${DAEMONS[@]}"; do daemon_pid "${d%%:*}" "${d#*:}" >/dev/null || return 1; done
  s3_answers
}
s3_answers() { [[ $(http_status) == 200 ]]; }

# Wait up to $1 seconds for command "${@:2}" to succeed.
wait_for() {
  local timeout=$1 what=$2 start=$SECONDS
  shift 2
  until "$@" >/dev/null 2>&1; do
    ((SECONDS - start < timeout)) || die "timed out after ${timeout}s waiting for $what (logs: $DIR/log)"
    sleep 0.5
  done
}

# Start a daemon with no descriptor but 0-2: it forks into the background and
# would otherwise keep the caller's stdout (fd 3 here: `$(... start)` would
# never see EOF) and the lock (fd 4) open for as long as it lives.
spawn() {
  local fd
  (
    for fd in /proc/self/fd/*; do
      fd=${fd##*/}
      if ((fd > 2)); then eval "exec $fd>&-"; fi
    done 2>/dev/null
    exec "$@"
  )
}

# Bounded: a `ceph` call can hang past its connect timeout (a monitor that
# is up but will not serve), and wait_for only looks at the clock between
# calls.
ceph_cli() { timeout 20 ceph --connect-timeout 10 "$@"; }

# The monitor stops itself when the file system holding its data has less
# than 5 % free (mon_data_avail_crit): say so instead of waiting for it.
check_free_space() {
  local pct
  pct=$(df --output=pcent "$(dirname "$DIR")" 2>/dev/null | tail -1 | tr -dc '0-9')
  [[ -z $pct ]] || ((pct < 94)) ||
    die "the file system of $DIR is ${pct}% full: ceph-mon needs more than 5 % free (free some space, or set VOUCH_S3_DIR elsewhere)"
}
osd_up() { [[ $(ceph_cli osd dump --format json | grep -o '"up":1' | wc -l) -ge 1 ]]; }

# n random characters from the set $2 (no pipe into head: SIGPIPE vs pipefail).
random_string() {
  local s
  s=$(head -c 4096 /dev/urandom | LC_ALL=C tr -dc "$2")
  printf '%s' "${s:0:$1}"
}

print_result() { cat "$ENV_FILE" >&3; }

install_packages() {
  local missing=() p
  for p in "${PACKAGES[@]}"; do
    [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) == *"ok installed" ]] || missing+=("$p")
  done
  command -v curl >/dev/null || missing+=(curl)
  ((${#missing[@]} == 0)) && return 0
  log "installing ${missing[*]}"
  apt-get update -qq
  # No recommends: they pull in smartmontools, nvme-cli and the like, and
  # the cluster needs none of them (ceph-mgr-modules-core is a dependency).
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# --- stop ----------------------------------------------------------------------

# SIGKILL, not SIGTERM: the cluster is thrown away with its directory, and a
# clean shutdown only costs time (radosgw waits up to rgw_exit_timeout_secs,
# 120 s, for RADOS once the OSD and monitor are going down; a memstore OSD
# writes its whole store to disk).
stop_daemons() {
  local d pid pids=() i
  for d in "${ALL_DAEMONS[@]}"; do
    if pid=$(daemon_pid "${d%%:*}" "${d#*:}"); then
      log "killing ${d%%:*} (pid $pid)"
      kill -KILL "$pid" 2>/dev/null || true
      pids+=("$d:$pid")
    fi
  done
  # Wait until they are gone (a zombie no longer counts: empty cmdline).
  for ((i = 0; i < 100; i++)); do
    local alive=0
    for d in "${pids[@]}"; do
      [[ -d /proc/${d##*:} && -s /proc/${d##*:}/cmdline ]] && alive=1
    done
    ((alive == 0)) && return 0
    sleep 0.1
  done
  log "warning: some daemons still alive after SIGKILL and 10 s"
}

cmd_stop() {
  if [[ -d $DIR ]]; then
    stop_daemons
    rm -rf -- "$DIR"
    log "stopped; removed $DIR"
  else
    log "not running ($DIR does not exist)"
  fi
}

# --- start ---------------------------------------------------------------------

write_conf() {
  local fsid
  fsid=$(cat /proc/sys/kernel/random/uuid)
  cat >"$CONF" <<EOF
# Generated by .ci/s3-server.sh: a throw-away single-node cluster on loopback.
[global]
fsid = $fsid
mon host = v2:127.0.0.1:$MON_PORT
public addr = 127.0.0.1
cluster addr = 127.0.0.1
# msgr2 only: one port per daemon role, no legacy v1 listeners.
ms bind msgr1 = false
# Ports for the mgr and OSD, below the S3 port and the ephemeral range.
ms bind port min = 6800
ms bind port max = 7300
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
keyring = $KEYRING
# Nothing outside this directory: run dir, sockets, pid files, logs, crashes.
run dir = $DIR/run
pid file = $DIR/run/\$name.pid
admin socket = $DIR/run/\$name.asok
log file = $DIR/log/\$name.log
mon cluster log file = $DIR/log/cluster.log
crash dir = $DIR/crash
# One OSD: one copy of everything, PGs placed across OSDs, not hosts.
osd pool default size = 1
osd pool default min size = 1
osd crush chooseleaf type = 0
# RGW creates 7 pools and the mgr 1: 8 PGs each keeps well under the limit
# (the default 32 each would pass 250 PGs on one OSD and creation fails).
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
mon max pg per osd = 1000
mon warn on pool no redundancy = false
mon warn on insecure global id reclaim allowed = false
mon allow pool delete = true
# A nearly full host disk must not stop the monitor (default: 5 % free).
mon data avail crit = 1
mon data avail warn = 2

[mon]
mon data = $DIR/mon.\$id
# Commit map changes (pool creation, OSD boot) at once rather than batching
# them for 1 s: radosgw's first start creates its pools one after the other.
paxos propose interval = 0.05
paxos min wait = 0.01

[mgr]
mgr data = $DIR/mgr.\$id

[osd]
osd data = $DIR/osd.\$id
# Objects (data and omap, which RGW's bucket indexes use) live in the OSD's
# memory: no block file, no fsync; a test cluster loses nothing it needs.
osd objectstore = memstore
memstore device bytes = $MEMSTORE_BYTES
osd memory target = 536870912
osd op num shards = 2
osd op num threads per shard = 2

[$RGW_NAME]
# tcp_nodelay: without it beast sends an answer's head and body as two
# small writes and Nagle holds the body until the client's delayed ACK
# (40 ms), which measured 1 in 5 small ranged reads taking 42-45 ms instead
# of 1-2 ms (what a production RGW should set too).
rgw frontends = beast endpoint=127.0.0.1:$PORT tcp_nodelay=1
rgw data = $DIR/rgw
rgw thread pool size = 64
rgw enable usage log = false
# Deleted objects' data is freed by RGW's garbage collector, by default after
# 2 h and checked hourly: in a memstore OSD that is RAM held for nothing.
rgw gc obj min wait = 30
rgw gc processor period = 30
EOF
}

# One keyring with every key and its caps: ceph-mon --mkfs imports all of
# them into the monitor's auth database, so no later `ceph auth add` is needed.
make_keyring() {
  ceph-authtool --create-keyring "$KEYRING" --gen-key -n mon. --cap mon 'allow *' >/dev/null
  ceph-authtool "$KEYRING" --gen-key -n client.admin \
    --cap mon 'allow *' --cap osd 'allow *' --cap mgr 'allow *' --cap mds 'allow *' >/dev/null
  ceph-authtool "$KEYRING" --gen-key -n mgr.x \
    --cap mon 'allow profile mgr' --cap osd 'allow *' --cap mds 'allow *' >/dev/null
  ceph-authtool "$KEYRING" --gen-key -n osd.0 \
    --cap mon 'allow profile osd' --cap mgr 'allow profile osd' --cap osd 'allow *' >/dev/null
  ceph-authtool "$KEYRING" --gen-key -n "$RGW_NAME" \
    --cap mon 'allow rw' --cap osd 'allow rwx' --cap mgr 'allow rw' >/dev/null
  chmod 600 "$KEYRING"
}

cmd_start() {
  [[ $(id -u) == 0 ]] || die "must run as root"
  if healthy; then
    log "already running ($DIR)"
    print_result
    return 0
  fi
  # Anything half-started or left from an earlier machine state: start over.
  if [[ -e $DIR ]]; then
    log "found $DIR but not a healthy cluster: removing it"
    cmd_stop
  fi
  install_packages
  check_free_space
  [[ $(http_status) == 000 ]] || die "something else answers on 127.0.0.1:$PORT (set VOUCH_S3_PORT)"

  local uuid access secret
  mkdir -p "$DIR"/{run,log,crash,rgw,mon.a,mgr.x,osd.0}
  chmod 700 "$DIR"
  write_conf
  make_keyring

  log "monitor on 127.0.0.1:$MON_PORT"
  monmaptool --create --fsid "$(sed -n 's/^fsid = //p' "$CONF")" \
    --addv a "[v2:127.0.0.1:$MON_PORT]" "$DIR/monmap" >/dev/null
  ceph-mon --mkfs -i a --monmap "$DIR/monmap" --keyring "$KEYRING"
  spawn ceph-mon -i a -c "$CONF"
  wait_for 30 "the monitor" ceph_cli mon stat

  if [[ $WITH_MGR == 1 ]]; then
    log "manager"
    spawn ceph-mgr -i x -c "$CONF"
  fi

  log "OSD (memstore, $((MEMSTORE_BYTES >> 20)) MiB)"
  uuid=$(cat /proc/sys/kernel/random/uuid)
  ceph_cli osd new "$uuid" 0 >/dev/null
  ceph-osd -i 0 -c "$CONF" --mkfs --osd-uuid "$uuid" 2>"$DIR/log/osd-mkfs.log" ||
    die "ceph-osd --mkfs failed: $(tail -3 "$DIR/log/osd-mkfs.log")"
  spawn ceph-osd -i 0 -c "$CONF"
  wait_for 60 "the OSD to be up" osd_up

  log "radosgw on 127.0.0.1:$PORT"
  # On its first start radosgw creates its pools and waits for their PGs.
  spawn radosgw -n "$RGW_NAME" -c "$CONF"
  wait_for 120 "radosgw to answer on 127.0.0.1:$PORT" s3_answers

  # The S3 user: fixed keys if given, else generated now, kept in s3.env.
  access=${VOUCH_S3_ACCESS_KEY:-$(random_string 20 'A-Z0-9')}
  secret=${VOUCH_S3_SECRET_KEY:-$(random_string 40 'A-Za-z0-9')}
  radosgw-admin user create --uid=vouch --display-name="Vouch tests" \
    --access-key="$access" --secret-key="$secret" >/dev/null
  umask 077
  printf 'VOUCH_S3_ENDPOINT=http://127.0.0.1:%s AWS_ACCESS_KEY_ID=%s AWS_SECRET_ACCESS_KEY=%s\n' \
    "$PORT" "$access" "$secret" >"$ENV_FILE"
  log "ready ($DIR)"
  print_result
}

cmd_status() {
  if healthy; then log "running ($DIR)"; else log "not running"; exit 1; fi
}

# One invocation at a time (two test jobs starting it at once must not both
# build a cluster). The lock file sits beside the directory, which stop removes.
exec 4>"$DIR.lock"
flock -w 300 4 || die "another s3-server.sh holds $DIR.lock"

case ${1:-} in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  *) die "usage: $0 start|stop|status" ;;
esac
