#!/usr/bin/env bash
# The Debian package end to end (issue 18): build it (the release binary,
# its man pages and shell completions, `cargo deb`), install it into a clean
# Debian root made by mmdebstrap and used under chroot (`vouch --version`,
# a backup and a restore, the system user, the conffile, the man page),
# then check the units with systemd-analyze: `verify` in that root, and
# `security` on the server unit, which must stay below 2.0 ("OK").
# Prints the .deb's and the binary's sizes. Run by .ci/run; alone:
# `bash .ci/deb.sh` (as root).
set -euo pipefail
cd "$(dirname "$0")/.."

install_pkg() {
  if ! command -v "$1" >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$2" >/dev/null
  fi
}
install_pkg mmdebstrap mmdebstrap
install_pkg systemd-analyze systemd
if ! command -v cargo-deb >/dev/null; then
  cargo install --locked --quiet cargo-deb --version "^3.8"
fi

echo "-- release build"
cargo build --release --locked --bin vouch
gen=target/generated
rm -rf "$gen"
mkdir -p "$gen/completions"
target/release/vouch generate man --out "$gen/man"
target/release/vouch generate completions bash > "$gen/completions/vouch.bash"
target/release/vouch generate completions zsh > "$gen/completions/_vouch"
target/release/vouch generate completions fish > "$gen/completions/vouch.fish"
deb=$(cargo deb --no-build --no-strip --output target/debian/ 2>&1 | tail -1)
[ -f "$deb" ] || { echo "cargo deb did not make a package: $deb"; exit 1; }
echo "package: $deb ($(stat -c %s "$deb") bytes; binary $(stat -c %s target/release/vouch) bytes)"

echo "-- a clean Debian root (mmdebstrap), the package installed there"
suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
root=$(mktemp -d /tmp/vouch-deb-root.XXXXXX)
cleanup() {
  umount "$root/proc" 2>/dev/null || true
  rm -rf "$root"
}
trap cleanup EXIT
mmdebstrap --quiet --variant=minbase --include=systemd,man-db,passwd,procps \
  "$suite" "$root" http://deb.debian.org/debian
cp "$deb" "$root/tmp/vouch.deb"
mount -t proc proc "$root/proc"
in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root "$@"; }
in_root dpkg -i /tmp/vouch.deb
in_root vouch --version
in_root getent passwd vouch | grep -q '/usr/sbin/nologin'
in_root dpkg-query -W -f='${Conffiles}\n' vouch | grep -q '/etc/vouch/vouch.toml'
[ "$(in_root stat -c '%U:%G %a' /etc/vouch/vouch.toml)" = "root:vouch 640" ]
in_root man -w vouch-serve >/dev/null
in_root test -s /usr/share/bash-completion/completions/vouch

echo "-- a backup and a restore in that root"
in_root sh -ec '
  export VOUCH_PASSWORD=correct-horse VOUCH_REPOSITORY=/tmp/repo
  mkdir -p /tmp/src/sub
  head -c 3000000 /dev/urandom > /tmp/src/sub/data.bin
  echo hello > /tmp/src/hello.txt
  vouch init --kdf-memory-kib 1024 --kdf-iterations 1 --insecure-kdf >/dev/null
  vouch backup /tmp/src >/dev/null
  vouch restore latest --target /tmp/out >/dev/null
  cmp /tmp/src/sub/data.bin /tmp/out/tmp/src/sub/data.bin
  cmp /tmp/src/hello.txt /tmp/out/tmp/src/hello.txt
'

echo "-- systemd-analyze verify (in the root) and security (server unit)"
for unit in vouch.service vouch-agent.service; do
  in_root systemd-analyze verify "/usr/lib/systemd/system/$unit"
done
score=$(systemd-analyze security --offline=yes --root="$root" vouch.service 2>/dev/null \
  | sed -n 's/.*Overall exposure level for vouch.service: \([0-9.]*\).*/\1/p')
echo "systemd-analyze security vouch.service: ${score:-?}"
awk -v s="${score:-99}" 'BEGIN { exit !(s < 2.0) }' || {
  echo "the server unit's exposure is ${score:-unknown}, not below 2.0"
  exit 1
}
in_root dpkg --purge vouch >/dev/null
in_root test ! -e /etc/vouch/vouch.toml
echo "-- .deb checks passed"
