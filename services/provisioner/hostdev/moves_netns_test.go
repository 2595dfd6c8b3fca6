package hostdev

import (
	"testing"
	"time"

	"github.com/vishvananda/netns"

	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/services/provisioner/netnstest"
)

// TestRun_EventsMoves: with no resync, the inventory follows links that
// leave the host namespace and come back renamed, and changes made to them
// afterwards, from the link events alone (the cache the rescans read).
func TestRun_EventsMoves(t *testing.T) {
	host := newTestNs(t)
	podPath := netnstest.New(t)
	pod := &testNs{path: podPath, h: netnstest.Handle(t, podPath)}
	host.addVeth(t, "data0", "dpeer0")
	host.addVeth(t, "data1", "dpeer1")
	m, err := New(testLogger(t), t.TempDir(), &provisionerv1.HostConfig{IfNames: []string{"data*"}},
		WithNetns(host.path), WithResync(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	r := startRun(t, m)
	r.waitNames(t, "data0", "data1")

	moveTo := func(from, to *testNs, name string) {
		t.Helper()
		ns, err := netns.GetFromPath(to.path)
		if err != nil {
			t.Fatal(err)
		}
		defer ns.Close()
		if err := from.h.LinkSetNsFd(from.link(t, name), int(ns)); err != nil {
			t.Fatalf("moving %s: %v", name, err)
		}
	}
	moveTo(host, pod, "data0")
	r.waitNames(t, "data1")

	if err := pod.h.LinkSetName(pod.link(t, "data0"), "data9"); err != nil {
		t.Fatal(err)
	}
	moveTo(pod, host, "data9")
	r.waitNames(t, "data1", "data9")

	if err := host.h.LinkSetMTU(host.link(t, "data9"), 1280); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(waitLimit)
	for {
		devs, _ := r.get()
		if len(devs) == 2 && devs[1].GetMtu() == 1280 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the MTU change of data9 was not published: %v", devs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	host.delLink(t, "data1")
	r.waitNames(t, "data9")
}
