package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/shared/testinfra/nodetest"
	"github.com/netdra/netdra/shared/testinfra/testworld/worldtest"
)

// TestE2E_MacvlanPods: the subif manager offers two macvlan sub-interfaces
// of one parent (a veth of the node's host netns, up); two pods from one
// ResourceClaimTemplate (an MTU and an address pool) each get one, created
// directly in their netns, and ping each other from inside their
// containers. The host netns keeps its links, the parent with its
// ifindex, MAC and MTU, while the pods run and after (the moves themselves
// are counted, 0, by the provisioner's tests on the host kernel and in the
// kernel rig); when the pods are gone, so are their allocations.
func TestE2E_MacvlanPods(t *testing.T) {
	nn := startNetdra(t, "mvp0")
	nodetest.IP(t, "-n", nn.hostNS, "link", "set", "p-mvp0", "up")
	nodetest.IP(t, "-n", nn.hostNS, "link", "set", "mvp0", "up")
	parentBefore, hostBefore := ipLinkDetail(t, nn.hostNS, "mvp0"), hostLinks(t, nn.hostNS)
	c := nn.cp.Client()
	nn.applyNodeConfig(t, map[string]any{
		"deviceManagerConfigs": map[string]any{"subif": map[string]any{"enabled": true, "parents": []any{
			map[string]any{"name": "mv", "parentIfName": "mvp0", "kind": "macvlan", "mode": "bridge", "count": 2}}}},
		"pools":   []any{map[string]any{"name": "sub", "filter": map[string]any{"deviceManagers": []any{"subif"}, "parentIfNames": []any{"mvp0"}}}},
		"ipPools": []any{map[string]any{"name": "v4", "subnet": "10.70.0.0/24", "rangeStart": "10.70.0.10", "rangeEnd": "10.70.0.20"}},
	})
	ns := worldtest.Namespace(t, c)
	tmpl := claimTemplate(t, c, ns, deviceClass(t, c, "sub"), map[string]any{"podIfName": "net1", "mtu": 1400, "ipPools": []string{"v4"}})
	pods := []*corev1.Pod{newPod(t, c, ns, "mva", nn.node.Name(), tmpl), newPod(t, c, ns, "mvb", nn.node.Name(), tmpl)}
	addrs := make([]netip.Addr, len(pods))
	for i, pod := range pods {
		waitFor(t, "pod "+pod.Name+" to run", 2*time.Minute, func(ctx context.Context) (bool, error) {
			p, err := c.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			return err == nil && p.Status.Phase == corev1.PodRunning, nil
		})
		requireLines(t, pod.Name+"'s container", containerView(t, nn.node, pod), ": net1: <up", "mtu 1400", "inet 10.70.0.")
		sb, ok := nn.node.Sandbox(pod.UID)
		if !ok {
			t.Fatalf("no sandbox for %s", pod.Name)
		}
		d := ipLinkDetail(t, sb, "net1")
		if d.Kind() != "macvlan" || d.MTU != 1400 || d.LinkNetnsID == nil {
			t.Errorf("net1 of %s: %+v, want a macvlan, MTU 1400, its parent in another netns", pod.Name, d)
		}
		in, _ := link(t, sb, "net1")
		for _, a := range in.AddrInfos {
			if p := netip.MustParseAddr(a.Local); netip.MustParsePrefix("10.70.0.0/24").Contains(p) {
				addrs[i] = p
			}
		}
		if !addrs[i].IsValid() {
			t.Fatalf("net1 of %s has no address of pool v4: %+v", pod.Name, in)
		}
	}
	for i, pod := range pods {
		dst := addrs[1-i]
		var out string
		waitFor(t, fmt.Sprintf("%s to answer a ping from inside %s's container", dst, pod.Name), 30*time.Second, func(ctx context.Context) (bool, error) {
			var code int32
			var err error
			out, code, err = nn.node.Exec(ctx, pod.UID, "app", "/testapp", "ping", dst.String())
			return err == nil && code == 0, nil
		})
		t.Logf("in %s's container: %s", pod.Name, strings.TrimSpace(out))
	}
	if after := ipLinkDetail(t, nn.hostNS, "mvp0"); after.IfIndex != parentBefore.IfIndex || after.Address != parentBefore.Address || after.MTU != parentBefore.MTU {
		t.Errorf("the parent while the pods run: %+v, want it as it was, %+v", after, parentBefore)
	}
	if now := hostLinks(t, nn.hostNS); now != hostBefore {
		t.Errorf("host links while the pods run: %s, want them as they were (nothing moved): %s", now, hostBefore)
	}
	for _, pod := range pods {
		if err := c.CoreV1().Pods(ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, pod := range pods {
		waitFor(t, "pod "+pod.Name+" to be gone", 2*time.Minute, func(ctx context.Context) (bool, error) {
			_, err := c.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
	}
	waitFor(t, "the allocations to be gone", time.Minute, func(ctx context.Context) (bool, error) {
		resp, err := nn.stateClient.ListAllocations(ctx, &statev1.ListAllocationsRequest{})
		return err == nil && len(resp.GetAllocations()) == 0, nil
	})
	if after := hostLinks(t, nn.hostNS); after != hostBefore {
		t.Errorf("host links after the pods: %s, want them as they were: %s", after, hostBefore)
	}
	if after := ipLinkDetail(t, nn.hostNS, "mvp0"); after.IfIndex != parentBefore.IfIndex || after.Address != parentBefore.Address || after.MTU != parentBefore.MTU {
		t.Errorf("the parent after the pods: %+v, want it as it was, %+v", after, parentBefore)
	}
}

// linkDetail is what `ip -d -j link show` says of a link.
type linkDetail struct {
	IfIndex     int    `json:"ifindex"`
	Address     string `json:"address"`
	MTU         int    `json:"mtu"`
	LinkNetnsID *int   `json:"link_netnsid"`
	LinkInfo    struct {
		InfoKind string `json:"info_kind"`
	} `json:"linkinfo"`
}

func (d linkDetail) Kind() string { return d.LinkInfo.InfoKind }

func ipLinkDetail(t *testing.T, ns, name string) linkDetail {
	t.Helper()
	out, err := exec.Command("ip", "-n", ns, "-d", "-j", "link", "show", "dev", name).Output()
	if err != nil {
		t.Fatalf("ip -n %s -d -j link show dev %s: %v", ns, name, err)
	}
	var ds []linkDetail
	if err := json.Unmarshal(out, &ds); err != nil || len(ds) != 1 {
		t.Fatalf("ip -d -j link: %v %s", err, out)
	}
	return ds[0]
}

// hostLinks lists the links of netns ns: "ifindex:name ...".
func hostLinks(t *testing.T, ns string) string {
	t.Helper()
	out, err := exec.Command("ip", "-n", ns, "-j", "link", "show").Output()
	if err != nil {
		t.Fatalf("ip -n %s link: %v", ns, err)
	}
	var ls []struct {
		IfIndex int    `json:"ifindex"`
		Name    string `json:"ifname"`
	}
	if err := json.Unmarshal(out, &ls); err != nil {
		t.Fatal(err)
	}
	var parts []string
	for _, l := range ls {
		parts = append(parts, fmt.Sprintf("%d:%s", l.IfIndex, l.Name))
	}
	return strings.Join(parts, " ")
}
