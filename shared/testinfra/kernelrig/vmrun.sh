#!/bin/bash
# vmrun.sh: the `go test -exec` wrapper of the kernel rig. Boots the kernel
# that setup.sh prepared in QEMU (TCG) and runs the given static test binary
# as root inside it, with NETDRA_KERNELRIG=1. See README.md beside this file.
#
#   CGO_ENABLED=0 go test -tags kernelrig -exec "$PWD/shared/testinfra/kernelrig/vmrun.sh" -p 1 ./pkg/...
#   shared/testinfra/kernelrig/vmrun.sh ./pkg.test -test.v -test.run TestX
#
# The binary and a script with its arguments go into a second cpio segment
# appended to the base initrd. In the guest the test runs in a copy of the
# current directory's files and testdata/ (go test runs the wrapper in the
# package directory). Its stdout and stderr come back on the guest's ttyS1,
# which is our stdout; the kernel console (ttyS0) goes to a log. The exit
# status is the test's: the guest init writes it to isa-debug-exit (QEMU
# exits (rc<<1)|1) and prints a "KERNELRIG-EXIT: rc" line on the console.
#
# Environment: KERNELRIG_DIR (cache, default /var/cache/netdra/kernelrig),
# KERNELRIG_TIMEOUT (seconds for the whole VM; default -test.timeout + 60 s),
# KERNELRIG_MEM (default 1G), KERNELRIG_SMP (default 1), KERNELRIG_ACCEL
# (default tcg: KVM does not work on the project's machines), KERNELRIG_KEEP=1
# keeps the work directory, KERNELRIG_CONSOLE=1 copies the kernel console to
# stderr, KERNELRIG_MACHINE picks the machine (below).
#
# Machines: "pc" (the default: no NIC, no IOMMU, the fastest boot) and "igb":
# a q35 machine with an emulated Intel IOMMU (intel_iommu=on) and two
# emulated Intel 82576 SR-IOV NICs (QEMU's igb, PCI 8086:10c9, 7 VFs each)
# on PCIe root ports, their ports joined by one QEMU hub (a wire between
# the two PFs; nothing leaves the VM). A package whose directory has a file
# kernelrig.machine holding "igb" boots the igb machine; KERNELRIG_MACHINE
# overrides that file.
set -u
HERE=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
DIR=${KERNELRIG_DIR:-/var/cache/netdra/kernelrig}
fail() {
  echo "kernelrig: $*" >&2
  exit 125
}

[ $# -ge 1 ] || fail "usage: vmrun.sh TEST-BINARY [ARGS...]"
if ! [ -s "$DIR/initrd.gz" ] || ! [ -s "$DIR/vmlinux.elf" ] || ! [ -f "$DIR/stamp" ]; then
  fail "no kernel rig in $DIR: run 'bash $HERE/setup.sh' as root first (make test-kernel does)"
fi
inputs=$(cat "$HERE/setup.sh" "$HERE/init.sh" | sha256sum | cut -d' ' -f1)
grep -qx "inputs=$inputs" "$DIR/stamp" ||
  fail "the kernel rig in $DIR was built by another setup.sh/init.sh: run 'bash $HERE/setup.sh' again"
command -v qemu-system-x86_64 >/dev/null || fail "qemu-system-x86_64 not found: run 'bash $HERE/setup.sh'"
bin=$(readlink -f "$1") || fail "no test binary $1"
shift
[ -f "$bin" ] || fail "no test binary $bin"
if readelf -lW "$bin" 2>/dev/null | grep -q 'program interpreter'; then
  fail "$bin is dynamically linked: build the test with CGO_ENABLED=0"
fi

# dur_secs converts a Go duration (10m0s, 1h30m, 90s, 1.5s) to whole seconds.
dur_secs() {
  local d=$1 n u t=0
  while [[ $d =~ ^([0-9]+)(\.[0-9]+)?(h|m|s|ms|us|µs|ns)(.*)$ ]]; do
    n=${BASH_REMATCH[1]} u=${BASH_REMATCH[3]} d=${BASH_REMATCH[4]}
    case $u in h) t=$((t + n * 3600)) ;; m) t=$((t + n * 60)) ;; s) t=$((t + n + 1)) ;; esac
  done
  echo $t
}
TIMEOUT=
q() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; } # shell-quote
mkdirs=()
for a in "$@"; do
  case $a in
  -test.timeout=*) TIMEOUT=$(($(dur_secs "${a#*=}") + 60)) ;;
  esac
  case $a in
  -test.*=/*) mkdirs+=("$(dirname "${a#*=}")") ;; # e.g. -test.testlogfile: must be writable
  esac
done
[ -n "$TIMEOUT" ] && [ "$TIMEOUT" -gt 60 ] || TIMEOUT=660 # -test.timeout=0 (none) or absent
TIMEOUT=${KERNELRIG_TIMEOUT:-$TIMEOUT}

work=$(mktemp -d "${TMPDIR:-/tmp}/kernelrig.XXXXXX") || fail "mktemp failed"
qpid=
cleanup() {
  [ -n "$qpid" ] && kill "$qpid" 2>/dev/null && wait "$qpid" 2>/dev/null
  if [ -n "${KERNELRIG_KEEP:-}" ]; then echo "kernelrig: kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP QUIT

root=$work/root
mkdir -p "$root/kernelrig/pkg"
cp "$bin" "$root/testbin"
# The package directory's files and testdata/, recreated at the same path in
# the guest at run time (it may be under /tmp, a tmpfs there).
find . -maxdepth 1 -type f -exec cp {} "$root/kernelrig/pkg/" \;
[ -d testdata ] && cp -a testdata "$root/kernelrig/pkg/"
{
  echo '#!/bin/sh'
  printf 'mkdir -p %s' "$(q "$PWD")"
  for d in "${mkdirs[@]}"; do printf ' %s' "$(q "$d")"; done
  printf '\ncp -a /kernelrig/pkg/. %s/ && cd %s || exit 125\n' "$(q "$PWD")" "$(q "$PWD")"
  printf 'exec /testbin'
  for a in "$@"; do printf ' %s' "$(q "$a")"; done
  printf '\n'
} >"$root/run-test"
chmod 755 "$root/run-test" "$root/testbin"
(cd "$root" && find . -print0 | cpio --null -o -H newc --owner=0:0 --quiet) | gzip -1 >"$work/extra.cpio.gz"
cat "$DIR/initrd.gz" "$work/extra.cpio.gz" >"$work/initrd.gz" # the kernel unpacks both segments

machine=${KERNELRIG_MACHINE:-}
[ -n "$machine" ] || [ ! -f kernelrig.machine ] || machine=$(tr -d ' \n' <kernelrig.machine)
append=
case ${machine:-pc} in
pc) mach=(-nic none) ;;
igb)
  mach=(-machine q35,kernel-irqchip=split -device intel-iommu,intremap=on
    -netdev hubport,id=n0,hubid=0 -netdev hubport,id=n1,hubid=0
    -device pcie-root-port,id=rp0,slot=1,chassis=1 -device igb,bus=rp0,netdev=n0,mac=52:54:00:4e:44:00
    -device pcie-root-port,id=rp1,slot=2,chassis=2 -device igb,bus=rp1,netdev=n1,mac=52:54:00:4e:44:01)
  # no_timer_check: with interrupt remapping the kernel panics ("timer
  # doesn't work through Interrupt-remapped IO-APIC") when its boot-time
  # check of the timer misses its ticks, which a TCG guest on a busy host
  # does; the timer itself works.
  append=" intel_iommu=on no_timer_check"
  ;;
*) fail "unknown machine \"$machine\" (KERNELRIG_MACHINE or kernelrig.machine): pc or igb" ;;
esac

timeout -k 5 "$TIMEOUT" qemu-system-x86_64 -accel "${KERNELRIG_ACCEL:-tcg}" \
  -m "${KERNELRIG_MEM:-1G}" -smp "${KERNELRIG_SMP:-1}" \
  -nodefaults -display none -no-reboot "${mach[@]}" \
  -serial "file:$work/console.log" -serial stdio \
  -device isa-debug-exit,iobase=0xf4,iosize=0x04 \
  -kernel "$DIR/vmlinux.elf" -initrd "$work/initrd.gz" \
  -append "console=ttyS0 panic=-1 oops=panic quiet kernelrig.out=ttyS1$append" </dev/null &
qpid=$!
wait "$qpid"
qrc=$?
qpid=

[ -n "${KERNELRIG_CONSOLE:-}" ] && tr -d '\r' <"$work/console.log" >&2
grep -a '^KERNELRIG-WARN' "$work/console.log" | tr -d '\r' >&2
rc=$(tr -d '\r' <"$work/console.log" | sed -n 's/^KERNELRIG-EXIT: \([0-9]*\)$/\1/p' | tail -1)
if [ -z "$rc" ] && [ $((qrc % 2)) -eq 1 ] && [ "$qrc" -gt 1 ]; then
  rc=$(((qrc - 1) / 2)) # isa-debug-exit
fi
if [ -z "$rc" ]; then
  if [ "$qrc" -eq 124 ]; then
    echo "kernelrig: the VM timed out after ${TIMEOUT}s (KERNELRIG_TIMEOUT); kernel console tail:" >&2
  else
    echo "kernelrig: the guest gave no exit status (qemu rc=$qrc); kernel console tail:" >&2
  fi
  tail -n 40 "$work/console.log" | tr -d '\r' >&2
  rc=125
fi
if [ "$rc" -ne 0 ]; then
  # Debian moves the kernel under the rig: say which one this ran on.
  echo "kernelrig: $(basename "$bin") exited $rc on kernel $(sed -n 's/^kernel=//p' "$DIR/stamp") ($(sed -n 's/^version=//p' "$DIR/stamp")), rig $DIR" >&2
fi
exit "$rc"
