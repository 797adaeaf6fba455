#!/usr/bin/env bash
# .ci/boot-guest.sh OUT.raw
#
# Builds a small raw disk image (64 MiB, sparse) that boots by itself from
# its own disk under qemu-system-x86_64 with SeaBIOS (no -kernel), and
# prints a login prompt "vouch-guest login: " on the serial console (ttyS0).
# Everything comes from Debian packages; nothing is mounted, no loop device.
#
#   sector 0        syslinux mbr.bin (first 440 bytes) + DOS partition table
#   sector 2048..   one bootable FAT16 partition (type 0x0e, made with
#                   mkfs.fat --offset), holding ldlinux.sys/ldlinux.c32
#                   (syslinux --offset --install), syslinux.cfg, vmlinuz
#                   (Debian's cloud kernel) and initrd.gz (busybox-static).
#
# The root file system is the initramfs only: /init mounts proc/sys/dev,
# prints a few lines and runs busybox getty on ttyS0 in a loop (a login
# name gives a root shell). Kernel and initrd are loaded from the disk by
# the boot loader, so a disk whose boot sector is zeroed does not boot.
#
# Boot it with (works with if=virtio and with if=ide; ~3-6 s to the prompt
# under TCG on a 2-core machine):
#   qemu-system-x86_64 -accel tcg -m 256 -nodefaults -nographic -no-reboot \
#     -serial stdio -net none -boot reboot-timeout=1000 \
#     -drive file=OUT.raw,format=raw,if=virtio
# -nographic (not -display none) also makes SeaBIOS print to the serial
# port, so a broken disk shows "No bootable device." there; with
# -boot reboot-timeout=1000 and -no-reboot, QEMU then exits (status 0)
# about a second later instead of waiting. Use -accel tcg where /dev/kvm is
# a nested PVM (kvm_pvm) KVM, as on this project's machines: there KVM
# stops inside SYSLINUX with "KVM internal error. Suberror: 1", so
# accel=kvm:tcg never reaches the prompt.
#
# Environment:
#   VOUCH_GUEST_CACHE   optional directory where the downloaded .deb files
#                       (kernel, busybox-static) are kept and reused.
#   VOUCH_GUEST_KERNEL  kernel meta package (default linux-image-cloud-amd64;
#                       linux-image-amd64 works too, bigger).
#   VOUCH_GUEST_SIZE_MIB  image size in MiB (default 64).
#
# Host packages installed when a tool is missing (apt-get install -y
# --no-install-recommends): fdisk (sfdisk), dosfstools (mkfs.fat), mtools
# (mcopy), syslinux + syslinux-common (installer, mbr.bin), cpio.
# busybox-static and the kernel are only downloaded (apt-get download) and
# unpacked (dpkg-deb), never installed on the host.
set -euo pipefail

die() { echo "boot-guest: error: $*" >&2; exit 1; }
log() { echo "boot-guest: $*" >&2; }

[ $# -eq 1 ] || die "usage: $0 OUT.raw"
out=$1
[ "$(id -u)" -eq 0 ] || die "must run as root (installs packages when missing)"

kernel_meta=${VOUCH_GUEST_KERNEL:-linux-image-cloud-amd64}
size_mib=${VOUCH_GUEST_SIZE_MIB:-64}
cache=${VOUCH_GUEST_CACHE:-}
part_start=2048                     # sectors (1 MiB), partition start
part_off=$((part_start * 512))      # bytes
mbr_bin=/usr/lib/syslinux/mbr/mbr.bin
export DEBIAN_FRONTEND=noninteractive MTOOLS_SKIP_CHECK=1

apt_updated=
apt_update() {
  if [ -z "$apt_updated" ]; then
    log "apt-get update"
    apt-get update -qq || die "apt-get update failed"
    apt_updated=1
  fi
}

# --- host tools -------------------------------------------------------------
need=()
command -v sfdisk   >/dev/null || need+=(fdisk)
command -v mkfs.fat >/dev/null || need+=(dosfstools)
command -v mcopy    >/dev/null || need+=(mtools)
command -v syslinux >/dev/null || need+=(syslinux)
[ -r "$mbr_bin" ]              || need+=(syslinux-common)
command -v cpio     >/dev/null || need+=(cpio)
command -v gzip     >/dev/null || need+=(gzip)
if [ ${#need[@]} -gt 0 ]; then
  log "installing: ${need[*]}"
  apt_update
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null \
    || die "apt-get install ${need[*]} failed"
fi
for t in sfdisk mkfs.fat mcopy mdir syslinux cpio gzip dpkg-deb apt-get apt-cache; do
  command -v "$t" >/dev/null || die "missing tool: $t"
done
[ -r "$mbr_bin" ] || die "missing $mbr_bin (package syslinux-common)"

tmp=$(mktemp -d /tmp/vouch-guest.XXXXXX)
# On failure, no half-built image is left behind.
cleanup() {
  local rc=$?
  rm -rf "$tmp"
  [ "$rc" -eq 0 ] || rm -f "$out"
}
trap cleanup EXIT

# --- .deb download (with optional cache) --------------------------------------
debdir=$tmp/debs
if [ -n "$cache" ]; then
  mkdir -p "$cache" || die "cannot create VOUCH_GUEST_CACHE=$cache"
  debdir=$cache
fi
mkdir -p "$debdir"

candidate() {  # candidate version of package $1, empty if none
  apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ && $2 != "(none)" {print $2}'
}
# try_fetch PACKAGE: sets $deb to the path of PACKAGE_<candidate>_amd64.deb,
# taken from the cache or downloaded; returns 1 on failure.
try_fetch() {
  local pkg=$1 ver file
  ver=$(candidate "$pkg")
  [ -n "$ver" ] || return 1
  file="${pkg}_${ver//:/%3a}_amd64.deb"
  if [ ! -s "$debdir/$file" ]; then
    log "downloading $pkg $ver"
    (cd "$debdir" && apt-get download -qq -o APT::Sandbox::User=root "$pkg=$ver" >/dev/null) || return 1
  fi
  [ -s "$debdir/$file" ] || return 1
  deb=$debdir/$file
}
# try_fetch_all: kernel and busybox-static .debs into $kernel_deb, $busybox_deb.
try_fetch_all() {
  # The meta package depends on the versioned image package (linux-image-*).
  kernel_pkg=$(apt-cache depends "$kernel_meta" 2>/dev/null \
    | awk '$1=="Depends:" && $2 ~ /^linux-image-/ {print $2; exit}')
  [ -n "$kernel_pkg" ] || return 1
  try_fetch "$kernel_pkg" || return 1
  kernel_deb=$deb
  try_fetch busybox-static || return 1
  busybox_deb=$deb
}
# With missing or stale package lists, update them once and try again.
if ! try_fetch_all; then
  apt_update
  try_fetch_all || die "cannot get the .debs of $kernel_meta (${kernel_pkg:-unresolved}) and busybox-static"
fi

# Only the kernel image is unpacked (not the ~400 MB of modules).
mkdir -p "$tmp/k" "$tmp/bb"
dpkg-deb --fsys-tarfile "$kernel_deb" | tar -x -C "$tmp/k" --wildcards './boot/vmlinuz-*' \
  || die "no /boot/vmlinuz-* in $kernel_deb"
kernels=("$tmp"/k/boot/vmlinuz-*)
vmlinuz=${kernels[0]}
[ -f "$vmlinuz" ] || die "no kernel image in $kernel_deb"
dpkg-deb --fsys-tarfile "$busybox_deb" | tar -x -C "$tmp/bb" ./bin/busybox \
  || die "no /bin/busybox in $busybox_deb"
busybox=$tmp/bb/bin/busybox
log "kernel $(basename "$vmlinuz") ($(stat -c %s "$vmlinuz") bytes), busybox $(stat -c %s "$busybox") bytes"

# --- initramfs ----------------------------------------------------------------
root=$tmp/initramfs
mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,etc,proc,sys,dev,tmp,root,run}
chmod 1777 "$root/tmp"
cp "$busybox" "$root/bin/busybox"
chmod 755 "$root/bin/busybox"
# One symlink per applet, at the path busybox itself names.
"$busybox" --list-full | while read -r applet; do
  [ "$applet" = bin/busybox ] && continue
  [ -e "$root/$applet" ] || [ -L "$root/$applet" ] || ln -s /bin/busybox "$root/$applet"
done
if [ ! -L "$root/bin/sh" ] || [ ! -L "$root/sbin/getty" ]; then
  die "busybox lacks sh or getty"
fi

cat > "$root/init" <<'EOF'
#!/bin/sh
# PID 1 of the Vouch test guest: initramfs only, no disk, no network.
export PATH=/bin:/sbin:/usr/bin:/usr/sbin HOME=/root
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null || mdev -s
mkdir -p /dev/pts && mount -t devpts devpts /dev/pts
hostname vouch-guest
exec </dev/console >/dev/console 2>&1
echo
echo "vouch-guest: up, kernel $(uname -r), uptime $(cut -d' ' -f1 /proc/uptime)s"
echo "vouch-guest: root file system is the initramfs; no network"
while :; do
  getty -l /bin/autologin 115200 ttyS0 vt100
  sleep 1
done
EOF
chmod 755 "$root/init"
# getty runs this with the login name as an argument: any name gives a shell.
cat > "$root/bin/autologin" <<'EOF'
#!/bin/sh
exec /bin/sh -l
EOF
chmod 755 "$root/bin/autologin"
echo 'root:x:0:0:root:/root:/bin/sh' > "$root/etc/passwd"
echo 'root:x:0:' > "$root/etc/group"
printf 'Vouch test guest (\\s \\r) on \\l\n\n' > "$root/etc/issue"

(cd "$root" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) \
  | gzip -9n > "$tmp/initrd.gz"

# --- disk image ---------------------------------------------------------------
rm -f "$out"
truncate -s "${size_mib}M" "$out"
printf 'label: dos\nstart=%d, type=e, bootable\n' "$part_start" \
  | sfdisk --quiet --no-reread --no-tell-kernel "$out" >/dev/null \
  || die "sfdisk failed on $out"
dd if="$mbr_bin" of="$out" bs=440 count=1 conv=notrunc status=none
part_sectors=$(( size_mib * 2048 - part_start ))
mkfs.fat -F 16 -n VOUCHGUEST --offset "$part_start" -h "$part_start" \
  "$out" $(( part_sectors / 2 )) >/dev/null || die "mkfs.fat failed"

cat > "$tmp/syslinux.cfg" <<'EOF'
SERIAL 0 115200
PROMPT 0
TIMEOUT 0
DEFAULT linux
LABEL linux
  KERNEL /vmlinuz
  INITRD /initrd.gz
  APPEND console=ttyS0,115200 quiet panic=-1
EOF
img="$out@@$part_off"
mcopy -i "$img" "$vmlinuz" ::/vmlinuz
mcopy -i "$img" "$tmp/initrd.gz" ::/initrd.gz
mcopy -i "$img" "$tmp/syslinux.cfg" ::/syslinux.cfg
syslinux --offset "$part_off" --install "$out" || die "syslinux --install failed"
listing=$(mdir -i "$img" -a ::) || die "mdir failed on $img"
grep -qi "^ldlinux  *sys" <<<"$listing" || die "ldlinux.sys missing after syslinux --install"

log "wrote $out: $(du -h --apparent-size "$out" | cut -f1) apparent, $(du -h "$out" | cut -f1) allocated"
