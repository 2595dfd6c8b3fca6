#!/bin/bash
# setup.sh: prepares the kernel rig, a QEMU guest that runs Go test binaries
# as root on a real Debian 12 kernel with dummy, 802.1q, veth and netdevsim
# (SR-IOV VFs) loaded, and soft-RoCE (rdma_rxe) for the RDMA tests. See
# README.md beside this file.
#
#   sudo bash shared/testinfra/kernelrig/setup.sh      # `make test-kernel` runs it
#
# Idempotent. Run as root on Debian 12. It
#   1. installs the host tools it needs with apt (apt-get update only when a
#      package is missing or the kernel can't be found or downloaded);
#   2. looks up the current kernel ABI (6.1.0-NN) through linux-image-amd64;
#   3. apt-get downloads that kernel image, its headers and linux-source-6.1
#      into the cache and unpacks them there: the kernel is NEVER installed
#      on the host;
#   4. builds netdevsim out of tree (Debian does not ship it);
#   5. writes vmlinux.elf (uncompressed, PVH boot) and initrd.gz (busybox,
#      modules, init.sh as /init) into the cache.
# A complete cache for the current ABI and unchanged setup.sh/init.sh makes
# it return at once ("kernel rig ready (cached)").
#
# QEMU comes from Debian's bookworm-backports (the suite is added to apt's
# sources when missing): bookworm's QEMU 7.2 has no emulated igb, the
# Intel 82576 SR-IOV NIC the "igb" machine of vmrun.sh boots with. Its
# series is pinned (QEMU_SERIES); the exact version installed is printed.
#
# Environment: KERNELRIG_DIR (cache, default /var/cache/netdra/kernelrig);
# KERNELRIG_ABI pins the kernel ABI (e.g. 6.1.0-57) instead of following
# linux-image-amd64, and fails clearly once Debian no longer has it.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DIR=${KERNELRIG_DIR:-/var/cache/netdra/kernelrig}
# Host packages: QEMU, busybox for the guest, cpio/xz to pack and unpack;
# gcc-12 (the compiler Debian's 6.1 kernel is built with), make, binutils,
# libelf1 (objtool) and libssl3 (kbuild host tools) build netdevsim.
PKGS=(busybox-static cpio xz-utils gzip gcc-12 make binutils libelf1 libssl3 kmod)
# Guest modules, in load order (init.sh loads them in the same order):
# 802.1q, dummy, veth, psample (netdevsim's), then RDMA with soft-RoCE
# (rdma_rxe over any Ethernet netdev), its character devices (ib_uverbs,
# ib_umad, rdma_ucm) and their dependencies (modinfo -F depends), and
# crc32_generic, the "crc32" crypto hash rdma_rxe allocates per device
# (without it: "rdma link add" fails with ENOENT, the guest has no modprobe).
MODS=(net/llc/llc net/802/stp net/802/garp net/802/mrp net/8021q/8021q
  drivers/net/dummy drivers/net/veth drivers/net/macvlan drivers/net/ipvlan/ipvlan drivers/net/vrf net/psample/psample
  net/ipv4/udp_tunnel net/ipv6/ip6_udp_tunnel fs/configfs/configfs
  drivers/infiniband/core/ib_core drivers/infiniband/core/ib_uverbs
  drivers/infiniband/core/ib_umad drivers/infiniband/core/iw_cm
  drivers/infiniband/core/ib_cm drivers/infiniband/core/rdma_cm
  drivers/infiniband/core/rdma_ucm crypto/crc32_generic
  drivers/infiniband/sw/rxe/rdma_rxe
  drivers/dca/dca drivers/i2c/algos/i2c-algo-bit drivers/net/ethernet/intel/igb/igb
  drivers/net/ethernet/intel/igbvf/igbvf virt/lib/irqbypass drivers/vfio/vfio
  drivers/vfio/vfio_iommu_type1 drivers/vfio/vfio_virqfd drivers/vfio/pci/vfio-pci-core
  drivers/vfio/pci/vfio-pci)
# The igb machine's NIC: the igb (PF) and igbvf (VF) drivers with their
# dependencies (dca, i2c-algo-bit; ptp and pps are built in), and vfio-pci
# with the type1 IOMMU backend for the VFs DPDK uses. They load in every
# guest; without the igb machine's devices they bind to nothing.
# QEMU_SERIES: the QEMU release series installed from bookworm-backports
# (KERNELRIG_QEMU_SERIES overrides it): the first with igb is 8.0, and the
# rig is tested on this one.
QEMU_SERIES=${KERNELRIG_QEMU_SERIES:-10.0}
BACKPORTS_LIST=/etc/apt/sources.list.d/netdra-bookworm-backports.list

export DEBIAN_FRONTEND=noninteractive LC_ALL=C
T0=$SECONDS
say() { echo ">> $* (+$((SECONDS - T0))s)"; }
die() { echo "kernelrig setup: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (apt-get install, cache in $DIR)"
command -v apt-get >/dev/null || die "needs a Debian system with apt"

mkdir -p "$DIR"
exec 9>"$DIR/.lock"
flock 9 # one setup at a time per cache

LOG=$DIR/setup.log
: >"$LOG"
run_logged() { # run_logged CMD...: quiet unless it fails
  if ! "$@" >>"$LOG" 2>&1; then
    tail -n 30 "$LOG" >&2
    die "failed: $* (full log: $LOG)"
  fi
}

UPDATED=0
apt_update() {
  [ $UPDATED = 1 ] && return 0
  say "apt-get update"
  run_logged apt-get update -q
  UPDATED=1
}

# 1. host packages
installed=" $(dpkg-query -W -f='${Package} ${Status}\n' "${PKGS[@]}" 2>/dev/null |
  sed -n 's/ install ok installed$//p' | tr '\n' ' ' || true) "
missing=()
for p in "${PKGS[@]}"; do
  [[ $installed == *" $p "* ]] || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  apt-cache show "${missing[@]}" >/dev/null 2>&1 || apt_update
  say "installing ${missing[*]}"
  if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >>"$LOG" 2>&1; then
    apt_update # stale lists: the package files may be gone from the mirror
    run_logged apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
fi

# 1b. QEMU of series $QEMU_SERIES from bookworm-backports
qemu_version() { dpkg-query -W -f='${Status} ${Version}\n' qemu-system-x86 2>/dev/null | sed -n 's/^install ok installed //p'; }
qemu_ok() { case $(qemu_version) in 1:"$QEMU_SERIES".*) return 0 ;; *) return 1 ;; esac; }
if ! qemu_ok; then
  if ! grep -rqsE '^[^#]*bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    say "adding bookworm-backports to apt's sources ($BACKPORTS_LIST)"
    echo 'deb http://deb.debian.org/debian bookworm-backports main' >"$BACKPORTS_LIST"
    UPDATED=0
  fi
  apt_update
  qv=$(apt-cache madison qemu-system-x86 | awk -F' *[|] *' -v s="1:$QEMU_SERIES." \
    'index($2, s) == 1 && $3 ~ /bookworm-backports/ {print $2; exit}')
  [ -n "$qv" ] || die "bookworm-backports has no qemu-system-x86 of series $QEMU_SERIES (apt-cache madison qemu-system-x86)"
  say "installing qemu-system-x86 $qv from bookworm-backports"
  run_logged apt-get install -y -q --no-install-recommends -t bookworm-backports "qemu-system-x86=$qv"
  qemu_ok || die "qemu-system-x86 $qv did not install"
fi
qemu-system-x86_64 -device help 2>/dev/null | grep -q '"igb"' || die "qemu-system-x86 $(qemu_version) has no igb device"

# 2. current kernel ABI, e.g. ABI=6.1.0-57 KV=6.1.0-57-amd64 VER=6.1.158-1
resolve() {
  # One apt-cache call (about 1 s without apt's binary cache): the metapackage
  # depends on "linux-image-6.1.0-NN-amd64 (= VERSION)". KERNELRIG_ABI pins
  # the ABI instead (e.g. KERNELRIG_ABI=6.1.0-57).
  local dep
  if [ -n "${KERNELRIG_ABI:-}" ]; then
    ABI=$KERNELRIG_ABI VER=
  else
    dep=$(apt-cache show --no-all-versions linux-image-amd64 2>/dev/null |
      sed -n 's/^Depends:.*linux-image-\([0-9.]*-[0-9]*\)-amd64\( (= \([^)]*\))\)\{0,1\}.*/\1 \3/p' | head -1)
    read -r ABI VER <<<"$dep" || true
  fi
  [ -n "$ABI" ] || return 1
  KV=$ABI-amd64
  SER=${ABI%.*-*} # 6.1
  [ -n "$VER" ] ||
    VER=$(apt-cache show --no-all-versions "linux-image-$KV" 2>/dev/null | sed -n 's/^Version: //p' | head -1)
  [ -n "$VER" ]
}
resolve || { apt_update; resolve; } || {
  [ -z "${KERNELRIG_ABI:-}" ] || die "KERNELRIG_ABI=$KERNELRIG_ABI: Debian no longer has linux-image-$KERNELRIG_ABI-amd64 (see 'apt-cache search linux-image-6.1'); unset KERNELRIG_ABI to follow linux-image-amd64"
  die "cannot find the kernel that linux-image-amd64 depends on"
}

INPUTS=$(cat "$HERE/setup.sh" "$HERE/init.sh" | sha256sum | cut -d' ' -f1)
want_stamp() { printf 'kernel=%s\nversion=%s\ninputs=%s\n' "$KV" "$VER" "$INPUTS"; }
cached() {
  [ -f "$DIR/stamp" ] && [ -s "$DIR/initrd.gz" ] && [ -s "$DIR/vmlinux.elf" ] &&
    [ "$(cat "$DIR/stamp")" = "$(want_stamp)" ]
}
if cached; then
  echo "kernel rig ready (cached): kernel $KV ($VER), qemu $(qemu_version) in $DIR"
  exit 0
fi
rm -f "$DIR/stamp" # from here on the cache is incomplete until the end

# 3. download (apt only) into $DIR/debs, keeping only the current version
deb() { echo "$DIR/debs/${1}_${VER}_"*.deb; } # path of the downloaded package
DEBS=()
set_debs() { DEBS=("linux-image-$KV" "linux-headers-$KV" "linux-headers-$ABI-common" "linux-kbuild-$SER" "linux-source-$SER"); }
download() {
  local need=() p
  set_debs
  for p in "${DEBS[@]}"; do [ -f "$(deb "$p")" ] || need+=("$p=$VER"); done
  [ ${#need[@]} -eq 0 ] && return 0
  say "downloading kernel $ABI ($VER): ${need[*]%=*}"
  rm -rf "$DIR/debs/.dl" && mkdir -p "$DIR/debs/.dl"
  (cd "$DIR/debs/.dl" && apt-get download -q "${need[@]}") >>"$LOG" 2>&1 || return 1
  mv "$DIR/debs/.dl/"*.deb "$DIR/debs/" && rmdir "$DIR/debs/.dl"
}
mkdir -p "$DIR/debs"
if ! download; then
  # The lists name a version the mirror no longer has (security updates
  # move the ABI): refresh them once and try again.
  [ $UPDATED = 0 ] || { tail -n 20 "$LOG" >&2; die "apt-get download failed (log: $LOG)"; }
  apt_update
  resolve || die "cannot find the kernel that linux-image-amd64 depends on"
  if cached; then
    echo "kernel rig ready (cached): kernel $KV ($VER), qemu $(qemu_version) in $DIR"
    exit 0
  fi
  download || { tail -n 20 "$LOG" >&2; die "apt-get download failed (log: $LOG)"; }
fi
for f in "$DIR"/debs/*.deb; do # drop other kernel versions
  case $f in *"_${VER}_"*) ;; *) rm -f "$f" ;; esac
done

# 4. unpack (never install) and build netdevsim
B=$DIR/build
rm -rf "$B"
mkdir -p "$B/kernel" "$B/hdr" "$B/src" "$B/initramfs"
say "unpacking kernel $KV"
pats=("*/boot/vmlinuz-$KV")
for m in "${MODS[@]}"; do pats+=("*/modules/$KV/kernel/$m.ko*"); done
dpkg-deb --fsys-tarfile "$(deb "linux-image-$KV")" | tar -x -C "$B/kernel" --wildcards "${pats[@]}"
for p in "linux-headers-$KV" "linux-headers-$ABI-common" "linux-kbuild-$SER"; do
  dpkg-deb -x "$(deb "$p")" "$B/hdr"
done
H=$B/hdr/usr/src/linux-headers-$KV
[ -f "$H/Makefile" ] || die "no $H/Makefile in linux-headers-$KV"
# The headers' Makefile includes the -common one by absolute path.
sed -i "s#^include /usr/src/#include $B/hdr/usr/src/#" "$H/Makefile"

say "unpacking netdevsim from linux-source-$SER"
dpkg-deb --fsys-tarfile "$(deb "linux-source-$SER")" | tar -xO "./usr/src/linux-source-$SER.tar.xz" |
  xz -dc | tar -x -C "$B/src" --wildcards "*/drivers/net/netdevsim/*"
NS=$(echo "$B"/src/*/drivers/net/netdevsim)
[ -f "$NS/Makefile" ] || die "netdevsim sources not found in linux-source-$SER"

say "building netdevsim"
run_logged make -C "$H" M="$NS" CONFIG_NETDEVSIM=m -j"$(nproc)" modules
[ -f "$NS/netdevsim.ko" ] || die "netdevsim.ko was not built (log: $LOG)"

# 5. kernel image and base initramfs
say "writing vmlinux.elf and initrd.gz"
# Debian's bzImage carries an xz-compressed ELF vmlinux: unpacked, QEMU boots
# it through PVH (no real-mode setup, no decompression under TCG): ~2x faster.
vmlinuz=$B/kernel/boot/vmlinuz-$KV
[ -f "$vmlinuz" ] || die "no /boot/vmlinuz-$KV in linux-image-$KV"
off=$(grep -obUaP '\xfd7zXZ\x00' "$vmlinuz" | head -1 | cut -d: -f1 || true)
[ -n "$off" ] || die "no xz payload in $vmlinuz"
tail -c +$((off + 1)) "$vmlinuz" | xz -dcq >"$B/vmlinux.elf" 2>/dev/null || true # trailing data after the xz stream is expected
[ "$(head -c 4 "$B/vmlinux.elf" | od -An -tx1 | tr -d ' \n')" = 7f454c46 ] || die "unpacked vmlinux is not an ELF file"
readelf -nW "$B/vmlinux.elf" 2>/dev/null | grep -q '^ *Xen .*(0x00000012)' ||
  echo "warning: vmlinux.elf has no PVH entry note; QEMU may fail to boot it" >&2

R=$B/initramfs
mkdir -p "$R"/{bin,sbin,usr/bin,usr/sbin,lib/modules,proc,sys,dev,tmp,run,etc,root,var}
readelf -lW /bin/busybox | grep -q 'program interpreter' && die "/bin/busybox is not static (install busybox-static)"
cp /bin/busybox "$R/bin/busybox"
cp "$HERE/init.sh" "$R/init"
chmod 755 "$R/init" "$R/bin/busybox"
for m in "${MODS[@]}"; do
  f=$(echo "$B"/kernel/*/modules/"$KV"/kernel/"$m".ko*)
  n=$(basename "$m").ko
  case $f in
  *.ko) cp "$f" "$R/lib/modules/$n" ;;
  *.ko.xz) xz -dc "$f" >"$R/lib/modules/$n" ;;
  *) die "module $m.ko not found in linux-image-$KV" ;;
  esac
done
strip --strip-debug -o "$R/lib/modules/netdevsim.ko" "$NS/netdevsim.ko"
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$R/etc/passwd"
printf 'root:x:0:\n' >"$R/etc/group"
printf '127.0.0.1 localhost\n::1 localhost\n' >"$R/etc/hosts"
(cd "$R" && find . -print0 | cpio --null -o -H newc --owner=0:0 --quiet) | gzip -6 >"$B/initrd.gz"

mv "$B/vmlinux.elf" "$B/initrd.gz" "$DIR/"
rm -rf "$B"
want_stamp >"$DIR/stamp"
echo "kernel rig ready: kernel $KV ($VER), qemu $(qemu_version) in $DIR ($((SECONDS - T0))s)"
