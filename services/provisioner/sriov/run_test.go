package sriov

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/vishvananda/netlink"
	"google.golang.org/protobuf/testing/protocmp"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
)

// fakeSubs is a subscribeFunc whose subscriptions the test drives: each
// one is sent on subs; the test sends link events on its channel and may end
// it. err makes every subscription fail.
type fakeSubs struct {
	subs chan *fakeSub
	err  error
}

type fakeSub struct {
	ch   chan netlink.LinkUpdate
	once sync.Once
	done <-chan struct{}
}

// end closes the subscription's channel, as a socket error does.
func (s *fakeSub) end() { s.once.Do(func() { close(s.ch) }) }

// event delivers one link event; it returns once Run has taken it.
func (s *fakeSub) event() { s.ch <- netlink.LinkUpdate{} }

func newFakeSubs() *fakeSubs { return &fakeSubs{subs: make(chan *fakeSub, 16)} }

func (f *fakeSubs) subscribe(done <-chan struct{}) (<-chan netlink.LinkUpdate, error) {
	if f.err != nil {
		return nil, f.err
	}
	s := &fakeSub{ch: make(chan netlink.LinkUpdate), done: done}
	go func() {
		<-done
		s.end()
	}()
	f.subs <- s
	return s.ch, nil
}

// runner is a Manager's Run in the background, its publications on pubs.
type runner struct {
	cancel context.CancelFunc
	pubs   chan []*devicev1.Device
	errc   chan error
}

func startRun(t *testing.T, m *Manager) *runner {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	r := &runner{cancel: cancel, pubs: make(chan []*devicev1.Device, 100), errc: make(chan error, 1)}
	go func() { r.errc <- m.Run(ctx, func(d []*devicev1.Device) { r.pubs <- d }) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// next returns the next publication.
func (r *runner) next(t *testing.T) []*devicev1.Device {
	t.Helper()
	select {
	case d := <-r.pubs:
		return d
	case err := <-r.errc:
		t.Fatalf("Run returned %v before publishing", err)
	}
	return nil
}

// stop cancels Run and waits for it; Run must return nil.
func (r *runner) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	if err := <-r.errc; err != nil {
		t.Errorf("Run: %v", err)
	}
	r.errc <- nil // for a second stop
}

func wantDevices(t *testing.T, what string, want, got []*devicev1.Device) {
	t.Helper()
	if diff := cmp.Diff(want, got, protocmp.Transform(), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("%s (-want +got):\n%s", what, diff)
	}
}

// intelVF2Device is intelVF2 as Discover reports it.
func intelVF2Device() *devicev1.Device {
	return &devicev1.Device{Name: "0000-03-02-2", Manager: sriov, KernelIfName: "ens1f0v2", PciAddress: "0000:03:02.2",
		PfName: "ens1f0", VfIndex: new(int32(2)), VendorId: "0x8086", DeviceId: "0x154c", Driver: "iavf",
		NumaNode: new(int32(0)), PcieRoot: "pci0000:00", MacAddress: "02:00:00:03:02:02", Mtu: 1500}
}

func intelCfg(n int) *provisionerv1.SriovConfig {
	return &provisionerv1.SriovConfig{Enabled: true, Ifaces: ifaces("ens1f0", n)}
}

func TestManager_Run_LinkEvents(t *testing.T) {
	root := fixtureTree(t)
	subs := newFakeSubs()
	m, err := New(testLogger(t), root, intelCfg(2), withSubscribe(subs.subscribe), WithResync(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	r := startRun(t, m)
	intel := fixtureVFs()[:2]
	wantDevices(t, "first publication (the configured PF's VFs only)", intel, r.next(t))
	sub := <-subs.subs

	// Events with no change publish nothing: the next publication is the
	// one after the hotplug.
	sub.event()
	sub.event()
	hotplug(t, root, intelVF2, 2)
	sub.event()
	withVF2 := append(fixtureVFs()[:2], intelVF2Device())
	wantDevices(t, "after a VF appeared", withVF2, r.next(t))

	unplug(t, root, intelVF0)
	sub.event()
	wantDevices(t, "after a VF vanished", []*devicev1.Device{fixtureVFs()[1], intelVF2Device()}, r.next(t))

	r.stop(t)
	select {
	case d := <-r.pubs:
		t.Errorf("unchanged inventory published: %v", d)
	default:
	}
	select {
	case <-sub.done:
	default:
		t.Error("subscription still open after Run returned")
	}
}

func TestManager_Run_Resubscribes(t *testing.T) {
	root := fixtureTree(t)
	subs := newFakeSubs()
	m, err := New(testLogger(t), root, nil, withSubscribe(subs.subscribe), WithResync(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	r := startRun(t, m)
	wantDevices(t, "first publication (every VF)", fixtureVFs(), r.next(t))
	first := <-subs.subs
	first.end()
	second := <-subs.subs
	hotplug(t, root, intelVF2, 2)
	second.event()
	want := append(fixtureVFs(), intelVF2Device())
	slices.SortFunc(want, func(a, b *devicev1.Device) int { return strings.Compare(a.GetName(), b.GetName()) })
	wantDevices(t, "after the new subscription's event", want, r.next(t))
}

func TestManager_Run_Resync(t *testing.T) {
	root := fixtureTree(t)
	subs := newFakeSubs()
	subs.err = errors.New("no netlink here")
	m, err := New(testLogger(t), root, intelCfg(2), withSubscribe(subs.subscribe), WithResync(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	r := startRun(t, m)
	wantDevices(t, "first publication", fixtureVFs()[:2], r.next(t))
	hotplug(t, root, intelVF2, 2)
	wantDevices(t, "after a resync", append(fixtureVFs()[:2], intelVF2Device()), r.next(t))
}

func TestManager_Run_ProvisionsFirst(t *testing.T) {
	root := fixtureTree(t)
	m, err := New(testLogger(t), root, &provisionerv1.SriovConfig{Ifaces: ifaces("ens3f0", 4)},
		withSubscribe(newFakeSubs().subscribe), WithResync(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	r := startRun(t, m)
	// The fake PF gets no VF devices from writing sriov_numvfs, so there is
	// nothing to publish; what matters is the count written before.
	wantDevices(t, "first publication", nil, r.next(t))
	if got := readFile(t, filepath.Join(root, "class/net/ens3f0/device/sriov_numvfs")); got != "4" {
		t.Errorf("sriov_numvfs = %s, want 4", got)
	}
}

func TestManager_Run_Errors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		root    func(t *testing.T) string
		cfg     *provisionerv1.SriovConfig
		wantErr error
	}{
		{name: "missing PF", root: func(t *testing.T) string { return fixtureTree(t) },
			cfg: &provisionerv1.SriovConfig{Ifaces: ifaces("ens1f0", 2, "ens9f9", 2)}, wantErr: ErrPFNotFound},
		{name: "no PCI bus", root: func(t *testing.T) string { return t.TempDir() }, wantErr: errAny},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := New(testLogger(t), tc.root(t), tc.cfg, withSubscribe(newFakeSubs().subscribe))
			if err != nil {
				t.Fatal(err)
			}
			published := false
			err = m.Run(t.Context(), func([]*devicev1.Device) { published = true })
			t.Logf("Run: %v", err)
			if err == nil || (tc.wantErr != errAny && !errors.Is(err, tc.wantErr)) {
				t.Errorf("Run error %v, want %v", err, tc.wantErr)
			}
			if published {
				t.Error("Run published before failing")
			}
		})
	}
}

// reports collects a Manager's reports.
type reports chan []string

func (r reports) report(w []string) { r <- w }

func (r reports) next(t *testing.T) []string {
	t.Helper()
	select {
	case w := <-r:
		return w
	case <-time.After(10 * time.Second):
		t.Fatal("no report")
		return nil
	}
}

// intelVFsAt are the device names the Intel PF's n VFs have.
func intelVFsAt(n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("0000-03-02-%d", i))
	}
	return out
}

func names(devs []*devicev1.Device) []string {
	var out []string
	for _, d := range devs {
		out = append(out, d.GetName())
	}
	return out
}

// TestManager_Run_CountWaitsForFree: a new count for a PF one of whose VFs
// is prepared leaves the PF as it is, reported; once the Prepared says VFs
// were freed, Run re-creates the PF's VFs, publishes the new ones while
// the PF is still held (no Setup finds the old ones) and reports that
// nothing waits any more.
func TestManager_Run_CountWaitsForFree(t *testing.T) {
	root := fixtureTree(t)
	prep := newFakePrepared(t, "0000-03-02-1")
	k := &fakeKernel{tb: t, root: root, prepared: prep}
	rep := make(reports, 10)
	m, err := New(testLogger(t), root, intelCfg(3), withSubscribe(newFakeSubs().subscribe), WithResync(time.Hour),
		WithPrepared(prep), WithReport(rep.report), withWriteNumVFs(k.write))
	if err != nil {
		t.Fatal(err)
	}
	type publication struct {
		devs []*devicev1.Device
		held bool // the PF's hold, as publish saw it
	}
	pubs := make(chan publication, 10)
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		errc <- m.Run(ctx, func(d []*devicev1.Device) { pubs <- publication{d, prep.isHeld("ens1f0")} })
	}()
	defer func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	next := func(what string) publication {
		t.Helper()
		select {
		case p := <-pubs:
			return p
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: nothing published", what)
			return publication{}
		}
	}

	wantDevices(t, "first publication: the VFs there are", fixtureVFs()[:2], next("first").devs)
	if diff := cmp.Diff([]string{"PF ens1f0: vfCount 3 waits until its allocated VF is freed (it keeps its 2 VFs until then)"}, rep.next(t)); diff != "" {
		t.Errorf("first report (-want +got):\n%s", diff)
	}
	if w := k.written(); len(w) != 0 {
		t.Errorf("writes %v while a VF of the PF is prepared", w)
	}

	prep.free("0000-03-02-1", true)
	p := next("after the free")
	if diff := cmp.Diff(intelVFsAt(3), names(p.devs)); diff != "" {
		t.Errorf("published after the free (-want +got):\n%s", diff)
	}
	if p.devs[0].GetMacAddress() == fixtureVFs()[0].GetMacAddress() {
		t.Errorf("VF 0 published with its old MAC %s: not rediscovered", p.devs[0].GetMacAddress())
	}
	if !p.held {
		t.Error("the new VFs published after the PF's hold ended: a Setup could have found the old ones")
	}
	if got := rep.next(t); len(got) != 0 {
		t.Errorf("report after the re-creation = %q, want none", got)
	}
	if diff := cmp.Diff([]string{"ens1f0=0", "ens1f0=3"}, k.written()); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}
	if prep.isHeld("ens1f0") {
		t.Error("the PF is still held after the report")
	}
}

// TestManager_Run_CountRetriedAtResync: a waiting PF is tried again at each
// resync, so it gets its count even without a word from the Prepared, and
// the report says the wait ended.
func TestManager_Run_CountRetriedAtResync(t *testing.T) {
	root := fixtureTree(t)
	prep := newFakePrepared(t, "0000-03-02-0")
	k := &fakeKernel{tb: t, root: root, prepared: prep}
	rep := make(reports, 100)
	m, err := New(testLogger(t), root, intelCfg(1), withSubscribe(newFakeSubs().subscribe), WithResync(time.Millisecond),
		WithPrepared(prep), WithReport(rep.report), withWriteNumVFs(k.write))
	if err != nil {
		t.Fatal(err)
	}
	r := startRun(t, m)
	wantDevices(t, "first publication", fixtureVFs()[:2], r.next(t))
	checkContains(t, "first report", rep.next(t), []string{"PF ens1f0: vfCount 1 waits until its allocated VF is freed"})
	prep.free("0000-03-02-0", false)
	if got := rep.next(t); len(got) != 0 {
		t.Errorf("report after the resync = %q, want none", got)
	}
	if diff := cmp.Diff([]string{"ens1f0=0", "ens1f0=1"}, k.written()); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}
	waitUntil(t, "the new VF published", func() bool {
		for {
			select {
			case d := <-r.pubs:
				if slices.Equal(names(d), intelVFsAt(1)) {
					return true
				}
			default:
				return false
			}
		}
	})
}

// TestManager_Run_ReportsOnce: a manager with nothing waiting reports no
// warning once, after its first publication, and not again.
func TestManager_Run_ReportsOnce(t *testing.T) {
	root := fixtureTree(t)
	subs := newFakeSubs()
	rep := make(reports, 10)
	m, err := New(testLogger(t), root, intelCfg(2), withSubscribe(subs.subscribe), WithResync(time.Hour),
		WithPrepared(newFakePrepared(t)), WithReport(rep.report))
	if err != nil {
		t.Fatal(err)
	}
	r := startRun(t, m)
	r.next(t)
	if got := rep.next(t); len(got) != 0 {
		t.Errorf("report %q, want none", got)
	}
	sub := <-subs.subs
	hotplug(t, root, intelVF2, 2)
	sub.event()
	r.next(t)
	select {
	case w := <-rep:
		t.Errorf("reported again (%q) with nothing changed", w)
	default:
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
	}
}
