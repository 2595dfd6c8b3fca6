package e2e

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netdra/netdra/shared/testinfra/testworld/worldtest"
)

// The fake SR-IOV VF of the vfio tests: VF 0 of PF fakepf0, bound to
// vfio-pci, in IOMMU group 42.
const (
	vfioPF    = "0000:03:00.0"
	vfioVF    = "0000:03:00.1"
	vfioGroup = "42"
)

// fakeVfioSysfs writes a sysfs tree under dir with one Ethernet PF and its
// VF bound to vfio-pci, as the kernel shows them (relative links).
func fakeVfioSysfs(t *testing.T, dir string) {
	t.Helper()
	parent := "devices/pci0000:00/0000:00:02.0/"
	files := map[string]string{
		parent + vfioPF + "/class": "0x020000", parent + vfioPF + "/vendor": "0x8086", parent + vfioPF + "/device": "0x1572",
		parent + vfioPF + "/net/fakepf0/address": "3c:fd:fe:00:00:01", parent + vfioPF + "/net/fakepf0/mtu": "1500",
		parent + vfioVF + "/class": "0x020000", parent + vfioVF + "/vendor": "0x8086", parent + vfioVF + "/device": "0x154c",
		"kernel/iommu_groups/" + vfioGroup + "/type": "DMA",
		"bus/pci/drivers/vfio-pci/new_id":            "",
	}
	for p, content := range files {
		writeLine(t, filepath.Join(dir, p), content)
	}
	links := map[string]string{
		"bus/pci/devices/" + vfioPF:      parent + vfioPF,
		"bus/pci/devices/" + vfioVF:      parent + vfioVF,
		parent + vfioPF + "/virtfn0":     parent + vfioVF,
		parent + vfioVF + "/physfn":      parent + vfioPF,
		parent + vfioVF + "/driver":      "bus/pci/drivers/vfio-pci",
		parent + vfioVF + "/iommu_group": "kernel/iommu_groups/" + vfioGroup,
		"class/net/fakepf0":              parent + vfioPF + "/net/fakepf0",
	}
	for p, target := range links {
		at := filepath.Join(dir, p)
		rel, err := filepath.Rel(filepath.Dir(at), filepath.Join(dir, target))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(at), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(rel, at); err != nil {
			t.Fatal(err)
		}
	}
}

// writeLine writes a sysfs-style file: content and a newline.
func writeLine(t *testing.T, path, content string) { write(t, path, content+"\n") }

// fakeVfioNodes makes the group's and the container's character devices
// under devRoot/vfio, with the numbers of /dev/null and /dev/zero (the
// container cannot do anything with them a container cannot do anyway).
func fakeVfioNodes(t *testing.T, devRoot string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(devRoot, "vfio"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, dev := range map[string]uint64{vfioGroup: unix.Mkdev(1, 3), "vfio": unix.Mkdev(1, 5)} {
		if err := unix.Mknod(filepath.Join(devRoot, "vfio", name), unix.S_IFCHR|0o666, int(dev)); err != nil {
			t.Fatalf("mknod: %v", err)
		}
	}
}

// TestE2E_VfioPodGetsDeviceNode is a DPDK-style pod on the real node: its
// claim gets an SR-IOV VF bound to vfio-pci (a fake sysfs tree, device
// nodes made for the test), and its container sees /dev/vfio/<group> and
// /dev/vfio/vfio as character devices, PCIDEVICE_NETDRA_IO_NET with the
// VF's PCI address and its device metadata file, all through CDI (dra's
// spec, the kubelet's CDI device IDs, containerd's CDI injection). After
// the pod's deletion the claim's spec is gone.
func TestE2E_VfioPodGetsDeviceNode(t *testing.T) {
	dir := t.TempDir()
	sysfs, devRoot := filepath.Join(dir, "sys"), filepath.Join(dir, "dev")
	fakeVfioSysfs(t, sysfs)
	fakeVfioNodes(t, devRoot)
	nn := startNetdraWith(t, []string{"-dev-root", devRoot})
	c := nn.cp.Client()
	nn.applyNodeConfig(t, map[string]any{
		"sysfsRoot":            sysfs,
		"deviceManagerConfigs": map[string]any{"sriov": map[string]any{"enabled": true}},
		"pools":                []any{map[string]any{"name": "dpdk", "filter": map[string]any{"deviceManagers": []any{"sr-iov"}}}},
	})
	ns := worldtest.Namespace(t, c)
	tmpl := claimTemplate(t, c, ns, deviceClass(t, c, "dpdk"), map[string]any{"vfio": true})
	pod := newPod(t, c, ns, "dpdk", nn.node.Name(), tmpl)
	waitFor(t, "the pod to run", 2*time.Minute, func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, nil
	})
	specs, _ := filepath.Glob(filepath.Join(nn.node.CDIDir(), "netdra.io-net_*.json"))
	if len(specs) != 1 {
		t.Fatalf("netdra CDI specs in %s: %q, want one", nn.node.CDIDir(), specs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, code, err := nn.node.Exec(ctx, pod.UID, "app", "/testapp", "devices")
	if err != nil || code != 0 {
		t.Fatalf("exec testapp devices: %v (exit %d): %s", err, code, out)
	}
	requireLines(t, "the container", out,
		"node /dev/vfio/"+vfioGroup+" char 1:3\n", "node /dev/vfio/vfio char 1:5\n",
		"env PCIDEVICE_NETDRA_IO_NET="+vfioVF+"\n",
		`"resource.kubernetes.io/pciBusID": { "string": "`+vfioVF+`" }`)
	if !strings.Contains(out, "metadata /var/run/kubernetes.io/dra-device-attributes/") {
		t.Errorf("the container has no device metadata file:\n%s", out)
	}

	if err := c.CoreV1().Pods(ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the claim's CDI spec to be gone", 2*time.Minute, func(context.Context) (bool, error) {
		_, err := os.Stat(specs[0])
		return errors.Is(err, os.ErrNotExist), nil
	})
}

// TestE2E_VfioOnANetdev: a claim that asks vfio of a device that has no
// vfio (a host interface) keeps the pod from starting with an event naming
// config.vfio, and nothing on the node changes: no CDI spec, the device in
// the host.
func TestE2E_VfioOnANetdev(t *testing.T) {
	nn := startNetdra(t, "data0")
	c := nn.cp.Client()
	nn.applyNodeConfig(t, map[string]any{
		"deviceManagerConfigs": map[string]any{"host": map[string]any{"enabled": true, "ifNames": []any{"data0"}}},
		"pools":                []any{map[string]any{"name": "net"}},
	})
	ns := worldtest.Namespace(t, c)
	tmpl := claimTemplate(t, c, ns, deviceClass(t, c, "net"), map[string]any{"vfio": true})
	newPod(t, c, ns, "app", nn.node.Name(), tmpl)
	waitFor(t, "an event naming config.vfio", 2*time.Minute, func(ctx context.Context) (bool, error) {
		evs, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Kind == "ResourceClaim" && strings.Contains(e.Message, "config.vfio:") {
				return true, nil
			}
		}
		return false, nil
	})
	if specs, _ := filepath.Glob(filepath.Join(nn.node.CDIDir(), "netdra.io-net_*.json")); len(specs) > 0 {
		t.Errorf("CDI specs for a refused claim: %q", specs)
	}
	if _, ok := link(t, nn.hostNS, "data0"); !ok {
		t.Error("data0 left the host netns")
	}
}
