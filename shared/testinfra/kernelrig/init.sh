#!/bin/busybox sh
# init.sh: PID 1 of the kernel rig guest (setup.sh packs it as /init).
# Mounts the usual filesystems, loads the modules, runs /run-test (written
# by vmrun.sh) as root with NETDRA_KERNELRIG=1, its output on ttyS1, and
# hands its exit status to QEMU through isa-debug-exit.
/bin/busybox --install -s /bin
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
mkdir -p /proc /sys /dev /tmp /run /var
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t debugfs debugfs /sys/kernel/debug
mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t tmpfs -o mode=755 tmpfs /run
[ -e /var/run ] || ln -s /run /var/run
# Named network namespaces (ip netns, netns.NewNamed) live in /run/netns.
mkdir -p /run/netns
mount -t tmpfs -o mode=755 netns /run/netns
hostname kernelrig
echo "KERNELRIG-BOOTED uptime=$(cut -d' ' -f1 /proc/uptime)s kernel=$(uname -r)"
# Dependency order (modinfo -F depends): llc <- stp <- garp; mrp;
# 8021q needs garp and mrp; netdevsim needs psample; rdma_rxe needs
# ib_core, ib_uverbs, udp_tunnel and ip6_udp_tunnel; rdma_ucm needs
# rdma_cm, which needs ib_cm, iw_cm and configfs; rdma_rxe's devices need
# the crc32 hash (crc32_generic), which nothing would load on demand here;
# igb needs dca and i2c-algo-bit; vfio-pci needs vfio-pci-core, which needs
# vfio, irqbypass and vfio_virqfd; vfio_iommu_type1 is the IOMMU backend.
for m in llc stp garp mrp 8021q dummy veth macvlan ipvlan vrf psample netdevsim \
  udp_tunnel ip6_udp_tunnel configfs ib_core ib_uverbs ib_umad iw_cm ib_cm \
  rdma_cm rdma_ucm crc32_generic rdma_rxe \
  dca i2c-algo-bit igb igbvf irqbypass vfio vfio_iommu_type1 vfio_virqfd \
  vfio-pci-core vfio-pci; do
  insmod /lib/modules/$m.ko || echo "KERNELRIG-WARN insmod $m failed"
done
ip link set lo up

# Test output goes to the second serial port (raw: no CRLF, no kernel
# messages), which vmrun.sh connects to its stdout.
OUT=/dev/console
if grep -q kernelrig.out=ttyS1 /proc/cmdline && [ -c /dev/ttyS1 ]; then
  OUT=/dev/ttyS1
  stty -F /dev/ttyS1 raw -echo 115200
fi
if [ -x /run-test ]; then
  echo "KERNELRIG-BEGIN"
  NETDRA_KERNELRIG=1 HOME=/root TMPDIR=/tmp /run-test >$OUT 2>&1 </dev/null
  rc=$?
else
  echo "kernelrig: no /run-test in the initramfs (run tests through vmrun.sh)" >$OUT
  rc=125
fi
echo "KERNELRIG-EXIT: $rc"
sync
# QEMU has -device isa-debug-exit,iobase=0xf4,iosize=0x04: writing rc to the
# port makes it exit with status (rc<<1)|1. poweroff is the fallback.
code=$((rc & 127))
[ $rc -ne 0 ] && [ $code -eq 0 ] && code=1
printf "\\$(printf %03o $code)" | dd of=/dev/port bs=1 seek=244 count=1 2>/dev/null
poweroff -f
