package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/shared/testinfra/testworld/worldtest"
)

// TestE2E_IPPools: the two ends of a veth pair, offered by the host manager,
// go to two pods from one ResourceClaimTemplate that names an IPv4 and an
// IPv6 pool. The pods get different addresses of each pool, in their claim
// status too, and each pings the other over both families from inside its
// netns. The addresses survive kill -9 of dra and of the state service; a
// pool removed while in use keeps its addresses, and the NodeConfig says
// so until the pods are gone and they are free.
func TestE2E_IPPools(t *testing.T) {
	nn := startNetdra(t, "ipa0")
	c := nn.cp.Client()
	spec := map[string]any{
		"deviceManagerConfigs": map[string]any{"host": map[string]any{"enabled": true, "ifNames": []any{"ipa0", "p-ipa0"}}},
		"pools":                []any{map[string]any{"name": "wire"}},
		"ipPools": []any{
			map[string]any{"name": "v4", "subnet": "10.60.0.0/24", "rangeStart": "10.60.0.10", "rangeEnd": "10.60.0.20", "gateway": "10.60.0.1"},
			map[string]any{"name": "v6", "subnet": "fd00:60::/64", "rangeStart": "fd00:60::10", "rangeEnd": "fd00:60::20"},
		},
	}
	nn.applyNodeConfig(t, spec)
	ns := worldtest.Namespace(t, c)
	tmpl := claimTemplate(t, c, ns, deviceClass(t, c, "wire"), map[string]any{"podIfName": "net1", "ipPools": []string{"v4", "v6"}})
	pods := []*corev1.Pod{newPod(t, c, ns, "a", nn.node.Name(), tmpl), newPod(t, c, ns, "b", nn.node.Name(), tmpl)}
	type side struct {
		netns  string
		v4, v6 netip.Addr
	}
	var sides []side
	for _, pod := range pods {
		waitFor(t, "pod "+pod.Name+" to run", 2*time.Minute, func(ctx context.Context) (bool, error) {
			p, err := c.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			return err == nil && p.Status.Phase == corev1.PodRunning, nil
		})
		sb, ok := nn.node.Sandbox(pod.UID)
		if !ok {
			t.Fatalf("no sandbox for %s", pod.Name)
		}
		in, ok := link(t, sb, "net1")
		if !ok {
			t.Fatalf("net1 is not in %s's netns", pod.Name)
		}
		s := side{netns: sb}
		for _, a := range in.AddrInfos {
			addr := netip.MustParseAddr(a.Local)
			switch {
			case netip.MustParsePrefix("10.60.0.0/24").Contains(addr) && a.PrefixLen == 24:
				s.v4 = addr
			case netip.MustParsePrefix("fd00:60::/64").Contains(addr) && a.PrefixLen == 64:
				s.v6 = addr
			}
		}
		if !s.v4.IsValid() || !s.v6.IsValid() {
			t.Fatalf("net1 of %s: %+v, want an address of each pool", pod.Name, in)
		}
		// The claim status carries the addresses too.
		p, _ := c.CoreV1().Pods(ns).Get(context.Background(), pod.Name, metav1.GetOptions{})
		claim, err := c.ResourceV1().ResourceClaims(ns).Get(context.Background(), *p.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if d := claim.Status.Devices; len(d) != 1 || d[0].NetworkData == nil ||
			fmt.Sprint(d[0].NetworkData.IPs) != fmt.Sprint([]string{s.v4.String() + "/24", s.v6.String() + "/64"}) {
			t.Errorf("claim status of %s: %+v, want the pool addresses %s and %s", pod.Name, d, s.v4, s.v6)
		}
		sides = append(sides, s)
	}
	if sides[0].v4 == sides[1].v4 || sides[0].v6 == sides[1].v6 {
		t.Fatalf("both pods got the same address: %+v", sides)
	}
	for i, from := range sides {
		to := sides[1-i]
		for _, dst := range []netip.Addr{to.v4, to.v6} {
			// From inside the container (an exec, as kubectl exec), and
			// from its netns. IPv6 addresses are tentative until DAD is
			// done (about a second).
			var out string
			waitFor(t, fmt.Sprintf("%s to answer a ping from inside %s's container", dst, pods[i].Name), 30*time.Second, func(ctx context.Context) (bool, error) {
				var code int32
				var err error
				out, code, err = nn.node.Exec(ctx, pods[i].UID, "app", "/testapp", "ping", dst.String())
				return err == nil && code == 0, nil
			})
			t.Logf("in %s's container: %s", pods[i].Name, strings.TrimSpace(out))
			waitFor(t, fmt.Sprintf("%s to answer a ping from %s", dst, from.netns), 30*time.Second, func(context.Context) (bool, error) {
				return ping(from.netns, dst) == nil, nil
			})
		}
	}
	// dra and state killed (-9) and restarted: the addresses stay held.
	nn.dra.Restart()
	nn.state.Restart()
	waitFor(t, "the state service to answer after its restart", time.Minute, func(ctx context.Context) (bool, error) {
		resp, err := nn.stateClient.ListIPPools(ctx, &statev1.ListIPPoolsRequest{})
		if err != nil {
			return false, nil
		}
		if len(resp.GetPools()) != 2 || resp.GetPools()[0].GetUsed() != 2 || resp.GetPools()[1].GetUsed() != 2 {
			return false, fmt.Errorf("pools while both pods run, after the restarts: %v", resp.GetPools())
		}
		return true, nil
	})

	// dra counts them in the NodeConfig's status (the operator reads that
	// to add a block to a cluster address pool running low).
	waitFor(t, "the NodeConfig status counting the addresses in use", time.Minute, func(ctx context.Context) (bool, error) {
		u, err := nn.dyn.Resource(nodeConfigs).Get(ctx, nn.node.Name(), metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		pools, _, _ := unstructured.NestedSlice(u.Object, "status", "ipPools")
		want := `[map[free:9 name:v4 rangeEnd:10.60.0.20 rangeStart:10.60.0.10 size:11 used:2] map[free:15 name:v6 rangeEnd:fd00:60::20 rangeStart:fd00:60::10 size:17 used:2]]`
		return fmt.Sprint(pools) == want, nil
	})

	// The v6 pool removed while its addresses are in use: it keeps them,
	// and the NodeConfig says so until they are released.
	spec["ipPools"] = spec["ipPools"].([]any)[:1]
	nn.applyNodeConfig(t, spec)
	waitFor(t, "the NodeConfig to say pool v6 still holds addresses", time.Minute, func(ctx context.Context) (bool, error) {
		cond, err := nodeConfigCondition(ctx, nn, "IPPoolsDraining")
		return err == nil && cond["status"] == "True" && strings.Contains(fmt.Sprint(cond["message"]), `ip pool "v6" was removed but 2 of its addresses are in use`), nil
	})
	for _, pod := range pods {
		if err := c.CoreV1().Pods(ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the addresses to be released", 2*time.Minute, func(ctx context.Context) (bool, error) {
		resp, err := nn.stateClient.ListIPPools(ctx, &statev1.ListIPPoolsRequest{})
		if err != nil {
			return false, nil
		}
		for _, p := range resp.GetPools() {
			if p.GetUsed() != 0 {
				return false, nil
			}
		}
		return len(resp.GetPools()) == 1, nil
	})
	waitFor(t, "the NodeConfig to say no pool holds addresses outside its configuration", 2*time.Minute, func(ctx context.Context) (bool, error) {
		cond, err := nodeConfigCondition(ctx, nn, "IPPoolsDraining")
		return err == nil && cond["status"] == "False", nil
	})
}

// nodeConfigCondition returns the node's NodeConfig condition of type typ.
func nodeConfigCondition(ctx context.Context, nn *netdraNode, typ string) (map[string]any, error) {
	u, err := nn.dyn.Resource(nodeConfigs).Get(ctx, nn.node.Name(), metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == typ {
			return m, nil
		}
	}
	return nil, fmt.Errorf("no condition %s", typ)
}

// ping sends one ICMP echo to dst from inside the named netns and waits a
// second for the reply.
func ping(netnsName string, dst netip.Addr) error {
	network, proto := "ip4:icmp", 1
	var typ icmp.Type = ipv4.ICMPTypeEcho
	if dst.Is6() {
		network, proto, typ = "ip6:ipv6-icmp", 58, ipv6.ICMPTypeEchoRequest
	}
	conn, err := listenIn(netnsName, network)
	if err != nil {
		return err
	}
	defer conn.Close()
	id := os.Getpid() & 0xffff
	msg, _ := (&icmp.Message{Type: typ, Body: &icmp.Echo{ID: id, Seq: 1, Data: []byte("netdra")}}).Marshal(nil)
	if _, err := conn.WriteTo(msg, &net.IPAddr{IP: dst.AsSlice()}); err != nil {
		return err
	}
	_ = conn.SetReadDeadline(time.Now().Add(time.Second))
	buf := make([]byte, 1500)
	for {
		n, from, err := conn.ReadFrom(buf)
		if err != nil {
			return err
		}
		m, err := icmp.ParseMessage(proto, buf[:n])
		if err != nil || from.String() != dst.String() {
			continue
		}
		if e, ok := m.Body.(*icmp.Echo); ok && (m.Type == ipv4.ICMPTypeEchoReply || m.Type == ipv6.ICMPTypeEchoReply) && e.ID == id {
			return nil
		}
	}
}

// listenIn opens an ICMP socket inside the named netns: the thread enters
// it only while the socket is made.
func listenIn(netnsName, network string) (*icmp.PacketConn, error) {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer orig.Close()
	target, err := netns.GetFromName(netnsName)
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	conn, lerr := icmp.ListenPacket(network, "")
	if err := netns.Set(orig); err != nil {
		return nil, err // the thread stays locked and dies with the goroutine
	}
	runtime.UnlockOSThread()
	return conn, lerr
}
