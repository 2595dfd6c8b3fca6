package e2e

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	drav1 "github.com/netdra/netdra/protos/netdra/dra/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/shared/apis/v1alpha1"
	"github.com/netdra/netdra/shared/rpc"
	"github.com/netdra/netdra/shared/testinfra/testworld/worldtest"
)

// nodeConfig reads the node's NodeConfig.
func (nn *netdraNode) nodeConfig(ctx context.Context) (*v1alpha1.NodeConfig, error) {
	u, err := nn.dyn.Resource(nodeConfigs).Get(ctx, nn.node.Name(), metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	nc := &v1alpha1.NodeConfig{}
	return nc, runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, nc)
}

// waitStatus waits until the NodeConfig's status satisfies ok and returns it.
func (nn *netdraNode) waitStatus(t *testing.T, what string, ok func(*v1alpha1.NodeConfig) bool) *v1alpha1.NodeConfig {
	t.Helper()
	var last *v1alpha1.NodeConfig
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for {
		nc, err := nn.nodeConfig(ctx)
		if err == nil {
			last = nc
			if ok(nc) {
				return nc
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s; last status: %+v", what, last.Status)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func applied(nc *v1alpha1.NodeConfig) *metav1.Condition {
	return meta.FindStatusCondition(nc.Status.Conditions, v1alpha1.ConditionApplied)
}

func pools(nc *v1alpha1.NodeConfig) string {
	var s []string
	for _, p := range nc.Status.PublishedPools {
		s = append(s, fmt.Sprintf("%s=%d", p.Name, p.Devices))
	}
	return strings.Join(s, " ")
}

// TestE2E_NodeConfigStatus: dra writes the pools it publishes (the Pools
// printer column and a device count per pool), the driver name it is
// registered under and the generation it applied; a sysfsRoot the
// provisioner cannot use is refused on the status, naming the field, and
// the configuration in force stays.
func TestE2E_NodeConfigStatus(t *testing.T) {
	nn := startNetdra(t, "data0", "data1")
	host := func(names ...any) map[string]any {
		return map[string]any{"host": map[string]any{"enabled": true, "ifNames": names}}
	}
	nn.applyNodeConfig(t, map[string]any{"deviceManagerConfigs": host("data0", "data1"), "sysfsRoot": "/sys",
		"pools": []any{
			map[string]any{"name": "red", "filter": map[string]any{"ifNames": []any{"data0"}}},
			map[string]any{"name": "empty", "filter": map[string]any{"ifNames": []any{"nothing0"}}},
			map[string]any{"name": "blue", "filter": map[string]any{"ifNames": []any{"data1"}}},
		}})
	nc := nn.waitStatus(t, "three pools published", func(nc *v1alpha1.NodeConfig) bool {
		c := applied(nc)
		return pools(nc) == "blue=1 empty=0 red=1" && nc.Status.Pools == 3 && c != nil && c.Status == metav1.ConditionTrue
	})
	if nc.Status.DriverName != driver || nc.Status.ObservedGeneration != nc.Generation {
		t.Errorf("status driver %q, observed generation %d of %d", nc.Status.DriverName, nc.Status.ObservedGeneration, nc.Generation)
	}
	// dra's admin socket says the same.
	conn, err := rpc.Dial(nn.dra.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st, err := drav1.NewDraServiceClient(conn).Status(context.Background(), &drav1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var stPools []string
	for _, p := range st.GetPools() {
		stPools = append(stPools, fmt.Sprintf("%s=%d", p.GetName(), p.GetDevices()))
	}
	if !st.GetRegistered() || st.GetDriverName() != driver || st.GetConfiguredDriverName() != driver || st.GetConfigGeneration() != nc.Generation ||
		st.GetLastPublication() == nil || st.GetRegistrationAttempts() < 1 || st.GetRegistrationError() != "" ||
		strings.Join(stPools, " ") != "blue=1 empty=0 red=1" {
		t.Errorf("dra Status: %v", st)
	}

	nn.applyNodeConfig(t, map[string]any{"deviceManagerConfigs": host("data0", "data1"),
		"pools": []any{map[string]any{"name": "red"}}})
	nn.waitStatus(t, "one pool with both devices", func(nc *v1alpha1.NodeConfig) bool {
		return pools(nc) == "red=2" && nc.Status.Pools == 1 && nc.Status.ObservedGeneration == nc.Generation
	})

	nn.applyNodeConfig(t, map[string]any{"deviceManagerConfigs": host("data0"), "sysfsRoot": "/nonexistent/sys",
		"pools": []any{map[string]any{"name": "green"}}})
	nc = nn.waitStatus(t, "the sysfsRoot refused", func(nc *v1alpha1.NodeConfig) bool {
		c := applied(nc)
		return c != nil && c.Status == metav1.ConditionFalse && c.ObservedGeneration == nc.Generation
	})
	if c := applied(nc); c.Reason != v1alpha1.ReasonApplyFailed || !strings.Contains(c.Message, `sysfsRoot: "/nonexistent/sys" cannot be used`) {
		t.Errorf("Applied condition %s: %s", c.Reason, c.Message)
	}
	if pools(nc) != "red=2" {
		t.Errorf("published pools after a refused config: %q, want the last good one's", pools(nc))
	}
}

// TestE2E_DraDriverNameChange: a driverName change while a claim is
// prepared is refused on the NodeConfig (the kubelet unprepares a claim
// through the driver that prepared it) and the old name stays, also across
// a restart of dra; once the pod is gone the change applies without a
// restart: the old slices go, the plugin registers and publishes under the
// new name, and a pod's claim of the new driver is prepared. dra's kubelet
// sockets are held by `dra sockets`, as in the chart: the restart under
// the old name serves the sockets the kubelet registered, and the change
// has the holder release the old name's sockets (their files removed, the
// kubelet deregisters the old driver) and hold the new name's.
func TestE2E_DraDriverNameChange(t *testing.T) {
	nn := startNetdraKeepingSockets(t, "data0")
	oldSockets := []string{filepath.Join(nn.node.RegistryDir(), driver+"-reg.sock"), filepath.Join(nn.dir, "plugins", driver, "dra.sock")}
	c := nn.cp.Client()
	spec := func(driverName string) map[string]any {
		return map[string]any{"driverName": driverName,
			"deviceManagerConfigs": map[string]any{"host": map[string]any{"enabled": true, "ifNames": []any{"data0"}}},
			"pools":                []any{map[string]any{"name": "net"}}}
	}
	nn.applyNodeConfig(t, spec(driver))
	ns := worldtest.Namespace(t, c)
	tmpl := claimTemplate(t, c, ns, deviceClass(t, c, "net"), map[string]any{"podIfName": "net1"})
	pod := newPod(t, c, ns, "app", nn.node.Name(), tmpl)
	waitFor(t, "the pod to run", 2*time.Minute, func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, nil
	})

	const newName = "net.example.com"
	// The class and template of the new driver, made early so that the
	// scheduler knows them when the pod comes.
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "renamed-" + strings.ToLower(strings.ReplaceAll(t.Name(), "_", "-"))},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf("device.driver == %q", newName)}}}}}
	if _, err := c.ResourceV1().DeviceClasses().Create(context.Background(), class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.ResourceV1().DeviceClasses().Delete(context.Background(), class.Name, metav1.DeleteOptions{})
	})
	tmpl2 := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "net2"}, Spec: resourceapi.ResourceClaimTemplateSpec{
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{
			{Name: "net", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class.Name}}}}}}}
	if _, err := c.ResourceV1().ResourceClaimTemplates(ns).Create(context.Background(), tmpl2, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	nn.applyNodeConfig(t, spec(newName))
	nc := nn.waitStatus(t, "the change refused", func(nc *v1alpha1.NodeConfig) bool {
		c := applied(nc)
		return c != nil && c.Status == metav1.ConditionFalse && c.ObservedGeneration == nc.Generation
	})
	cond := applied(nc)
	if cond.Reason != v1alpha1.ReasonDriverNameInUse || !strings.Contains(cond.Message, "1 claims are prepared under "+driver) {
		t.Errorf("Applied condition %s: %s", cond.Reason, cond.Message)
	}
	if nc.Status.DriverName != driver {
		t.Errorf("status driverName %q while refused, want %s", nc.Status.DriverName, driver)
	}
	if n, err := driverSlices(context.Background(), c, nn.node.Name(), newName); err != nil || n != 0 {
		t.Errorf("slices of %s while refused: %d %v", newName, n, err)
	}
	// Nor does a restart of dra switch under the prepared claim: it serves
	// them under the name they were prepared under.
	nn.dra.Restart()
	// The kubelet registered the plugin on the held sockets before: the
	// restarted dra serves them, and no registration comes again.
	servedAgain := `"msg":"Serving the kubelet on the held sockets it registered","driver":"` + driver + `"`
	waitFor(t, "dra serving "+driver+" again on the held sockets", 2*time.Minute, func(context.Context) (bool, error) {
		return strings.Count(nn.dra.Log(), servedAgain) == 1, nil
	})
	nn.waitStatus(t, "the change refused after the restart", func(nc *v1alpha1.NodeConfig) bool {
		c := applied(nc)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.ReasonDriverNameInUse && nc.Status.DriverName == driver
	})

	if err := c.CoreV1().Pods(ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pod to be gone", 2*time.Minute, func(ctx context.Context) (bool, error) {
		_, err := c.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	nn.waitStatus(t, "the change applied", func(nc *v1alpha1.NodeConfig) bool {
		c := applied(nc)
		return c != nil && c.Status == metav1.ConditionTrue && nc.Status.DriverName == newName
	})
	waitFor(t, "slices under the new name only", 2*time.Minute, func(ctx context.Context) (bool, error) {
		o, err1 := driverSlices(ctx, c, nn.node.Name(), driver)
		n, err2 := driverSlices(ctx, c, nn.node.Name(), newName)
		return err1 == nil && err2 == nil && o == 0 && n == 1, nil
	})

	// The holder released the old name's sockets and holds the new name's.
	newSockets := []string{filepath.Join(nn.node.RegistryDir(), newName+"-reg.sock"), filepath.Join(nn.dir, "plugins", newName, "dra.sock")}
	for _, p := range oldSockets {
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the old driver's socket %s after the change: %v, want it removed", p, err)
		}
	}
	for _, p := range newSockets {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Type() != os.ModeSocket {
			t.Errorf("the new driver's socket %s after the change: %v, want a socket", p, err)
		}
	}
	if took := `"msg":"Took the kubelet sockets from the holder","sockets":["` + newSockets[1] + `","` + newSockets[0] + `"]`; !strings.Contains(nn.dra.Log(), took) {
		t.Errorf("dra's log has no %s", took)
	}

	// The real kubelet has the plugin under its new name: a claim of the
	// new driver is prepared.
	pod2 := newPod(t, c, ns, "app2", nn.node.Name(), tmpl2.Name)
	waitFor(t, "a pod with a claim of the new driver to run", 3*time.Minute, func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, pod2.Name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, nil
	})
	resp, err := nn.stateClient.ListAllocations(context.Background(), &statev1.ListAllocationsRequest{})
	if err != nil || len(resp.GetAllocations()) != 1 {
		t.Errorf("allocations under the new driver: %v %v", resp.GetAllocations(), err)
	}
}

// driverSlices counts the node's ResourceSlices of driver.
func driverSlices(ctx context.Context, c kubernetes.Interface, node, driver string) (int, error) {
	list, err := c.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, s := range list.Items {
		if s.Spec.Driver == driver && s.Spec.NodeName != nil && *s.Spec.NodeName == node {
			n++
		}
	}
	return n, nil
}
