package benchworld

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/netdra/netdra/bench/fakesysfs"
	"github.com/netdra/netdra/bench/figures"
)

// The fake node the inventory benchmark publishes: pfs SR-IOV physical functions with vfsPerPF
// virtual functions each, bound to iavf, in a fake sysfs tree.
const pfs, vfsPerPF = fakesysfs.PFs, fakesysfs.VFsPerPF

// BenchmarkWorld_Inventory_1024VFs measures the inventory path at scale:
// 1,024 VFs in a fake sysfs tree (the provisioner's -sysfs-root; the
// host's kernel has no SR-IOV), from the NodeConfig update that enables the
// sr-iov manager (dra configures the provisioner, which discovers; dra
// pipes the devices through the state service and publishes) to every
// device being in the node's ResourceSlices in the apiserver, as a watch
// on them sees it. It reports the time, the
// number of slices and the bytes written to the apiserver for them: the
// request bodies of resourceslices writes as the apiserver's own
// apiserver_request_body_size_bytes histogram counts them, read before
// and after from its /metrics, and the size of the published slices as
// JSON.
func BenchmarkWorld_Inventory_1024VFs(b *testing.B) {
	root := fakeSysfs(b)
	nn := startNetdra(b, "-sysfs-root", root)
	c := nn.cp.Client()
	// A first NodeConfig with the sr-iov manager off: dra registers with
	// the kubelet once it has one, and the clock starts after that.
	spec := func(on bool) map[string]any {
		return map[string]any{
			"deviceManagerConfigs": map[string]any{"sriov": map[string]any{"enabled": on}},
			"pools":                []any{map[string]any{"name": "vf"}},
		}
	}
	nn.applyNodeConfig(b, spec(false))
	waitRegistered(b, nn)
	time.Sleep(time.Second) // the empty pool's publication
	for b.Loop() {
		inv := figures.Inventory{How: fmt.Sprintf("%d PFs x %d VFs (iavf, with netdevs) in a fake sysfs tree; the dra process's default publish debounce", pfs, vfsPerPF)}
		for round := range inventoryRounds {
			if round > 0 {
				// Off again: every device unpublished, and a second for
				// the writes still in flight.
				nn.updateNodeConfig(b, spec(false))
				waitPublished(b, c, nn.node.Name(), 0)
				time.Sleep(time.Second)
			}
			before, err := sliceWrites(c)
			if err != nil {
				b.Fatal(err)
			}
			took := timePublication(b, c, nn.node.Name(), func() { nn.updateNodeConfig(b, spec(true)) })
			inv.RoundsMs = append(inv.RoundsMs, float64(took.Microseconds())/1000)
			if round > 0 {
				continue
			}
			time.Sleep(time.Second) // writes still in flight (the debounce) are counted too
			after, err := sliceWrites(c)
			if err != nil {
				b.Fatal(err)
			}
			if inv.Slices, inv.Devices, inv.ObjectsBytes, err = nodeSlices(c, nn.node.Name()); err != nil {
				b.Fatal(err)
			}
			inv.BodyBytes, inv.Requests = after.bytes-before.bytes, after.count-before.count
			nn.recordRSS(b, "1024 devices", "after the 1,024 VFs of point 4 were published")
		}
		inv.Seconds = figures.Percentile(slices.Sorted(slices.Values(inv.RoundsMs)), 50) / 1000
		b.ReportMetric(inv.Seconds, "publish-s")
		b.ReportMetric(slices.Max(inv.RoundsMs)/1000, "publish-max-s")
		b.ReportMetric(float64(inv.Slices), "slices")
		b.ReportMetric(inv.BodyBytes, "body-bytes")
		b.ReportMetric(inv.Requests, "writes")
		if err := figures.Record(figures.InventoryFile, inv); err != nil {
			b.Fatal(err)
		}
	}
}

// inventoryRounds is how many times the benchmark enables the sr-iov
// manager and times the publication: one sample on a shared machine is
// noise, so the median (an odd count: the middle round) is the figure.
const inventoryRounds = 5

// timePublication runs change and returns how long until a watch of the
// node's ResourceSlices sees all pfs*vfsPerPF devices of netdra in them.
func timePublication(b *testing.B, c kubernetes.Interface, node string, change func()) time.Duration {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	w, err := c.ResourceV1().ResourceSlices().Watch(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	start := time.Now()
	change()
	perSlice := map[string]int{}
	for total := 0; total < pfs*vfsPerPF; {
		ev, ok := <-w.ResultChan()
		if !ok {
			b.Fatalf("the watch of the node's slices ended with %d devices published, want %d", total, pfs*vfsPerPF)
		}
		if s, ok := ev.Object.(*resourceapi.ResourceSlice); ok && s.Spec.Driver == driver {
			if ev.Type == watch.Deleted {
				delete(perSlice, s.Name)
			} else {
				perSlice[s.Name] = len(s.Spec.Devices)
			}
		}
		total = 0
		for _, n := range perSlice {
			total += n
		}
	}
	return time.Since(start)
}

// waitPublished waits until the node's slices of netdra hold want devices.
func waitPublished(b *testing.B, c kubernetes.Interface, node string, want int) {
	b.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		_, n, _, err := nodeSlices(c, node)
		if err == nil && n == want {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("the node's slices hold %d devices (%v), want %d", n, err, want)
		}
	}
}

// waitRegistered waits until the world's kubelet registered dra, which
// publishes nothing before: the clock of the benchmark starts after it.
func waitRegistered(b *testing.B, nn *netdraNode) {
	b.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if _, ok := nn.node.Plugin(driver); ok {
			return
		}
		if time.Now().After(deadline) {
			b.Fatal("dra did not register with the world's kubelet within a minute")
		}
	}
}

// fakeSysfs writes the fake sysfs tree of pfs x vfsPerPF VFs.
func fakeSysfs(b *testing.B) string {
	b.Helper()
	root := b.TempDir()
	if err := fakesysfs.Write(root, pfs, vfsPerPF); err != nil {
		b.Fatal(err)
	}
	return root
}

// nodeSlices counts the node's ResourceSlices of netdra, their devices and
// their size as JSON.
func nodeSlices(c kubernetes.Interface, node string) (slices, devices, bytes int, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := c.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return 0, 0, 0, err
	}
	for _, s := range list.Items {
		if s.Spec.Driver != driver {
			continue
		}
		slices++
		devices += len(s.Spec.Devices)
		raw, _ := json.Marshal(s)
		bytes += len(raw)
	}
	return slices, devices, bytes, nil
}

type bodySize struct{ bytes, count float64 }

// sliceWrites reads the apiserver's apiserver_request_body_size_bytes
// histogram for resourceslices, every verb summed: bytes and requests.
func sliceWrites(c kubernetes.Interface) (bodySize, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	raw, err := c.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return bodySize{}, fmt.Errorf("reading the apiserver's metrics: %w", err)
	}
	var s bodySize
	found := false
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, `resource="resourceslices"`) {
			continue
		}
		name, value, ok := metricLine(line)
		if !ok {
			continue
		}
		switch name {
		case "apiserver_request_body_size_bytes_sum":
			s.bytes += value
			found = true
		case "apiserver_request_body_size_bytes_count":
			s.count += value
		}
	}
	if !found && !strings.Contains(string(raw), "apiserver_request_body_size_bytes") {
		return s, fmt.Errorf("the apiserver's /metrics has no apiserver_request_body_size_bytes")
	}
	return s, nil
}

func metricLine(line string) (name string, value float64, ok bool) {
	i := strings.IndexByte(line, '{')
	j := strings.LastIndexByte(line, ' ')
	if i < 0 || j < i {
		return "", 0, false
	}
	v, err := strconv.ParseFloat(line[j+1:], 64)
	return line[:i], v, err == nil
}
