#!/usr/bin/env bash
# linux/arm64 (issue 18): cross-builds the release binary for
# aarch64-unknown-linux-gnu and runs it under qemu-user for a backup, a
# read-back verify, a restore compared byte for byte, and a served health
# check. Run by hand (as root) before a release; not part of .ci/run: it
# takes about 14 minutes on the 2-core machines here (docs/operations.md,
# "Platforms").
#
# Why this way: the Rust toolchain of these machines has no aarch64
# standard library and none can be fetched; Debian's `libstd-rust-dev:arm64`
# can, with the `rustc` of the same release. Debian 13's is 1.85, older than
# the locked dependencies need (see the workspace's rust-version), so the
# build root is Debian testing (forky: rustc 1.97), made by mmdebstrap with
# amd64 and arm64 enabled: rustc, cargo, libstd-rust-dev:arm64,
# gcc-aarch64-linux-gnu (the linker, and the C parts of ring and zstd) and
# qemu-user. Crates come from this host's cargo registry (fetched here
# first, `--locked`), mounted into the root: the build itself is offline.
#
# The committed tree is built (`git archive HEAD`). Environment:
#   VOUCH_ARM64_ROOT   where the build root lives (kept between runs;
#                      default /var/tmp/vouch-arm64-root)
#   VOUCH_ARM64_SUITE  the Debian suite of the root (default forky)
set -euo pipefail
cd "$(dirname "$0")/.."

root=${VOUCH_ARM64_ROOT:-/var/tmp/vouch-arm64-root}
suite=${VOUCH_ARM64_SUITE:-forky}
target=aarch64-unknown-linux-gnu
started=$(date +%s)

if ! command -v mmdebstrap >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null
fi

mounted=()
cleanup() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
    umount "${mounted[$i]}" 2>/dev/null || umount -l "${mounted[$i]}" 2>/dev/null || true
  done
}
trap cleanup EXIT
bind() {
  mkdir -p "$2"
  mountpoint -q "$2" || { mount --bind "$1" "$2" && mounted+=("$2"); }
}

if [ ! -x "$root/usr/bin/qemu-aarch64" ] || [ ! -x "$root/usr/bin/curl" ] || [ ! -d "$root/usr/lib/rustlib/$target" ]; then
  echo "-- the build root: Debian $suite (amd64 + arm64) by mmdebstrap in $root"
  rm -rf "$root"
  # A testing suite's Release file carries a Valid-Until; a mirror that
  # lags behind it (seen here) would refuse to build the root at all.
  mmdebstrap --quiet --variant=apt --architectures=amd64,arm64 \
    --aptopt='Acquire::Check-Valid-Until "false"' \
    --include=rustc,cargo,libstd-rust-dev:arm64,gcc-aarch64-linux-gnu,libc6-dev:arm64,qemu-user,ca-certificates,diffutils,curl \
    "$suite" "$root" http://deb.debian.org/debian
fi
in_root() {
  chroot "$root" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root "$@"
}
echo "-- $(in_root rustc --version), $(in_root cargo --version)"

echo "-- crates (this host's registry, --locked)"
cargo fetch --locked --quiet
cargo_home=${CARGO_HOME:-$HOME/.cargo}
mountpoint -q "$root/proc" || { mount -t proc proc "$root/proc" && mounted+=("$root/proc"); }
bind "$cargo_home/registry" "$root/root/.cargo/registry"

echo "-- cross build (release, $target)"
rm -rf "$root/build/vouch"
mkdir -p "$root/build/vouch"
git archive HEAD | tar -x -C "$root/build/vouch"
build_start=$(date +%s)
in_root sh -ec "cd /build/vouch && CARGO_HOME=/root/.cargo CARGO_INCREMENTAL=0 \
  CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
  CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc \
  AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc-ar \
  cargo build --release --locked --offline --quiet --target $target --bin vouch"
bin=/build/vouch/target/$target/release/vouch
echo "built in $(($(date +%s) - build_start)) s: $(file -b "$root$bin" 2>/dev/null || true)"
echo "binary: $(stat -c %s "$root$bin") bytes"

echo "-- under qemu-aarch64: version, backup, verify --read-data, restore"
in_root bash -ec "
  run() { qemu-aarch64 $bin \"\$@\"; }
  run --version
  export VOUCH_PASSWORD=correct-horse VOUCH_REPOSITORY=/tmp/arm64-repo
  rm -rf /tmp/arm64-repo /tmp/arm64-src /tmp/arm64-out /tmp/arm64-data
  mkdir -p /tmp/arm64-src/sub /tmp/arm64-src/empty
  head -c 3000000 /dev/urandom > /tmp/arm64-src/sub/data.bin
  seq 1 200000 > /tmp/arm64-src/numbers.txt
  echo hello > /tmp/arm64-src/hello.txt
  ln -s hello.txt /tmp/arm64-src/link
  chmod 640 /tmp/arm64-src/hello.txt
  run init --kdf-memory-kib 1024 --kdf-iterations 1 --insecure-kdf >/dev/null
  run backup /tmp/arm64-src
  seq 1 1000 >> /tmp/arm64-src/numbers.txt
  run backup /tmp/arm64-src
  run verify --read-data
  run restore latest --target /tmp/arm64-out
  diff -r --no-dereference /tmp/arm64-src /tmp/arm64-out/tmp/arm64-src
  [ \"\$(stat -c %a /tmp/arm64-out/tmp/arm64-src/hello.txt)\" = 640 ]
  [ \"\$(readlink /tmp/arm64-out/tmp/arm64-src/link)\" = hello.txt ]
  echo 'restored tree identical to the source'
"

echo "-- under qemu-aarch64: vouch serve answers its health check"
port=$((20000 + RANDOM % 20000))
in_root sh -c "rm -rf /tmp/arm64-data; exec qemu-aarch64 $bin serve --data-dir /tmp/arm64-data \
  --listen 127.0.0.1:$port --insecure-http >/tmp/arm64-serve.log 2>&1" &
serve_pid=$!
healthy=
for _ in $(seq 1 60); do
  if in_root curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1; then
    healthy=1
    break
  fi
  sleep 1
done
kill -TERM "$serve_pid" 2>/dev/null || true
pkill -TERM -f "qemu-aarch64 $bin serve" 2>/dev/null || true
wait "$serve_pid" 2>/dev/null || true
if [ -z "$healthy" ]; then
  echo "the arm64 server did not answer its health check:"
  cat "$root/tmp/arm64-serve.log"
  exit 1
fi
echo "health check answered"
echo "-- linux/arm64 checks passed in $(($(date +%s) - started)) s"
