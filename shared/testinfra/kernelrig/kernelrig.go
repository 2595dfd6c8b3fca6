// Package kernelrig is netdra's kernel rig: tests that need a real Linux
// kernel with networking features the development and CI machines lack
// (dummy and veth links, 802.1q VLANs, network namespaces, SR-IOV VFs
// through netdevsim) run as root inside a throwaway QEMU guest.
//
// # Writing a kernel-rig test
//
// Put it in a _test.go file that starts with the build constraint
//
//	//go:build kernelrig
//
// and call [Require] first in each test:
//
//	func TestVFConfig(t *testing.T) {
//		kernelrig.Require(t)
//		// create links, netns, netdevsim devices with netlink ...
//	}
//
// Without the tag such files are not compiled, so plain `go test ./...`
// never sees them. With the tag they only make sense inside the guest:
// [Require] fails the test (it does not skip it) when it runs anywhere
// else, so a kernel-rig test can never pass by being silently skipped.
//
// Each test package gets a fresh VM with llc, stp, garp, mrp, 8021q, dummy,
// veth, macvlan, ipvlan, vrf, psample, netdevsim and soft-RoCE (rdma_rxe, with ib_uverbs, ib_umad
// and rdma_ucm), igb, igbvf and vfio-pci loaded, /proc, /sys, /sys/kernel/debug,
// /dev, tmpfs /tmp, /run and /run/netns mounted (/var/run links to /run)
// and only lo, up. Nothing survives the VM, so tests need no cleanup between
// packages, but tests of one package share the VM: give links unique names.
// The package directory's files and testdata/ are copied into the guest at
// the same path, and the test runs there as usual. The guest has no network
// and only busybox: tests must not need other programs from the host.
// A package whose directory has a file kernelrig.machine holding "igb"
// boots a machine with an IOMMU and two emulated Intel 82576 SR-IOV NICs
// (README.md, "Machines").
//
// # Running kernel-rig tests
//
//	make test-kernel
//
// runs shared/testinfra/kernelrig/setup.sh (installs QEMU, downloads and prepares the
// Debian kernel and netdevsim; minutes the first time, a second when cached)
// and then
//
//	CGO_ENABLED=0 go test -tags kernelrig -exec "$PWD/shared/testinfra/kernelrig/vmrun.sh" -p 1 -count=1 ./pkg/...
//
// for every package with kernelrig files. The test binaries must be static
// (CGO_ENABLED=0). See shared/testinfra/kernelrig/README.md for the details.
package kernelrig

import (
	"os"
	"strings"
	"testing"
)

// EnvVar is set to "1" by the guest's init for the tests it runs.
const EnvVar = "NETDRA_KERNELRIG"

// InGuest reports whether the caller runs inside the kernel rig's guest.
func InGuest() bool { return os.Getenv(EnvVar) == "1" }

// Require fails the test at once unless it runs inside the kernel rig's
// guest. Kernel-rig tests change the host's network: they must never run on
// a development machine, and must never pass by being skipped.
func Require(t testing.TB) {
	t.Helper()
	if !InGuest() {
		t.Fatalf("this test runs only inside the kernel rig (%s=1 is not set): run `make test-kernel`, "+
			"or CGO_ENABLED=0 go test -tags kernelrig -exec <repo>/shared/testinfra/kernelrig/vmrun.sh", EnvVar)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kernel rig: this failure ran on %s", KernelVersion())
		}
	})
}

// KernelVersion returns the guest kernel's release and build, as
// /proc/version gives them (e.g. "6.1.0-57-amd64 ... 6.1.192-3"), so that a
// failure names the kernel it happened on: Debian moves the rig's kernel.
func KernelVersion() string {
	b, err := os.ReadFile("/proc/version")
	if err != nil {
		return "an unknown kernel (" + err.Error() + ")"
	}
	return strings.TrimSpace(string(b))
}
