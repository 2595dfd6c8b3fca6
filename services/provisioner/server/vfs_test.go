package server

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/services/provisioner/manager"
	"github.com/netdra/netdra/services/provisioner/sriov"
)

// TestPreparedVFs: what counts as prepared (a Setup's VF until its Free,
// the last list's and a Restore's until a Free or the next list), the
// count not known before a list, Changed at a Free and a list, and the
// gate between Setups and a hold.
func TestPreparedVFs(t *testing.T) {
	p := newPreparedVFs()
	vfs := []string{"vf-0", "vf-1", "vf-2"}
	count := func(what string, want int) {
		t.Helper()
		n, release := p.HoldPF("pf", vfs)
		release()
		if n != want {
			t.Errorf("%s: %d prepared, want %d", what, n, want)
		}
	}
	count("before any list", -1)
	p.prepared("vf-1")
	count("a Setup's VF before any list", 1)
	ch := p.Changed()
	p.list(&provisionerv1.PreparedVfs{Devices: []string{"vf-2", "other-pf-vf"}})
	wantClosed(t, "a list", ch)
	count("a Setup's and a listed one", 2)
	p.list(nil)
	count("no list keeps the last", 2)
	ch = p.Changed()
	p.freed("vf-2")
	wantClosed(t, "a Free of a listed VF", ch)
	count("after the listed one's Free", 1)
	ch = p.Changed()
	p.freed("vf-0")
	select {
	case <-ch:
		t.Error("Changed closed at a Free of a VF not counted")
	default:
	}
	p.restored("vf-0")
	count("a restored one", 2)
	p.list(&provisionerv1.PreparedVfs{})
	count("a new list drops the listed and restored ones, not a Setup's", 1)
	p.freed("vf-1")
	count("all freed", 0)

	// A hold waits for a Setup under way, and Setups wait for it.
	exit := p.enter("pf")
	held := make(chan func())
	go func() {
		_, release := p.HoldPF("pf", vfs)
		held <- release
	}()
	select {
	case <-held:
		t.Fatal("held while a Setup of the PF's VF ran")
	case <-time.After(50 * time.Millisecond):
	}
	exit()
	release := <-held
	entered := make(chan func())
	go func() { entered <- p.enter("pf") }()
	otherPF := p.enter("other-pf") // another PF's Setups go on
	otherPF()
	select {
	case <-entered:
		t.Fatal("a Setup ran while its PF was held")
	case <-time.After(50 * time.Millisecond):
	}
	release()
	release() // once
	(<-entered)()
}

func wantClosed(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	default:
		t.Errorf("Changed not closed at %s", what)
	}
}

// TestValidatePreparedVFs: the list's names and length.
func TestValidatePreparedVFs(t *testing.T) {
	for _, tc := range []struct {
		list      *provisionerv1.PreparedVfs
		wantField string
	}{
		{list: nil},
		{list: &provisionerv1.PreparedVfs{Devices: []string{"0000-03-10-0"}}},
		{list: &provisionerv1.PreparedVfs{Devices: []string{"0000-03-10-0", "0000:03:10.1"}}, wantField: "preparedVfs.devices[1]"},
		{list: &provisionerv1.PreparedVfs{Devices: make([]string, maxPreparedVFs+1)}, wantField: "preparedVfs.devices"},
	} {
		err := validatePreparedList("preparedVfs", tc.list.GetDevices())
		if tc.wantField == "" && err != nil || tc.wantField != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.wantField+":")) {
			t.Errorf("%d devices: error %v, want one for %q", len(tc.list.GetDevices()), err, tc.wantField)
		}
	}
}

// vfTree is a sysfs tree with one SR-IOV PF, ens1f0 (sriov_totalvfs 7), and
// its numVFs VFs 0000:03:10.N, unbound (no netdev, so that Setup asks no
// netlink).
func vfTree(t *testing.T, numVFs int) string {
	t.Helper()
	root := t.TempDir()
	pfDir := "devices/pci0000:00/0000:03:00.0"
	files := map[string]string{
		pfDir + "/class": "0x020000", pfDir + "/vendor": "0x8086", pfDir + "/device": "0x10c9",
		pfDir + "/sriov_totalvfs": "7", pfDir + "/sriov_numvfs": fmt.Sprint(numVFs),
		pfDir + "/net/ens1f0/address": "3c:fd:fe:00:00:01", pfDir + "/net/ens1f0/mtu": "1500",
	}
	links := map[string]string{
		"bus/pci/devices/0000:03:00.0": pfDir,
		"class/net/ens1f0":             pfDir + "/net/ens1f0",
		pfDir + "/net/ens1f0/device":   pfDir,
	}
	for i := range numVFs {
		addr := fmt.Sprintf("0000:03:10.%d", i)
		dir := "devices/pci0000:00/" + addr
		files[dir+"/class"], files[dir+"/vendor"], files[dir+"/device"] = "0x020000", "0x8086", "0x10ca"
		links[dir+"/physfn"] = pfDir
		links[fmt.Sprintf("%s/virtfn%d", pfDir, i)] = dir
		links["bus/pci/devices/"+addr] = dir
	}
	for p, content := range files {
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for p, target := range links {
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		rel, err := filepath.Rel(filepath.Dir(p), filepath.Join(root, target))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(rel, p); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// vfWorld is a server whose sr-iov manager reads a vfTree; its sriov_numvfs
// is a plain file: a write changes the count read back, and no VF.
type vfWorld struct {
	t    *testing.T
	ctx  context.Context
	root string
	srv  *Server
}

func newVFWorld(t *testing.T, root string) *vfWorld {
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv := New(log, Factories{
		Sriov: func(_ string, c *provisionerv1.SriovConfig, prepared PreparedVFs, report func([]string)) (manager.Manager, error) {
			return sriov.New(log, root, c, sriov.WithResync(time.Hour), sriov.WithPrepared(prepared), sriov.WithReport(report))
		},
	}, fakeMover{&callLog{}})
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return &vfWorld{t: t, ctx: ctx, root: root, srv: srv}
}

// configure configures the sr-iov manager with vfCount for ens1f0 and the
// list of prepared VFs (nil: none sent).
func (w *vfWorld) configure(vfCount uint32, prepared []string) error {
	req := &provisionerv1.ConfigureRequest{Managers: &provisionerv1.ManagerConfigs{Sriov: &provisionerv1.SriovConfig{
		Enabled: true, Ifaces: []*provisionerv1.SriovInterface{{IfName: "ens1f0", VfCount: vfCount}}}}}
	if prepared != nil {
		req.PreparedVfs = &provisionerv1.PreparedVfs{Devices: prepared}
	}
	_, err := w.srv.Configure(w.ctx, req)
	return err
}

func (w *vfWorld) numVFs() string {
	b, err := os.ReadFile(filepath.Join(w.root, "class/net/ens1f0/device/sriov_numvfs"))
	if err != nil {
		w.t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// await waits until the sr-iov manager's warnings are want.
func (w *vfWorld) await(what string, want ...string) {
	w.t.Helper()
	var got []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		got = w.srv.inv.warnings(devicev1.DeviceManager_DEVICE_MANAGER_SRIOV)
		if cmp.Equal(want, got, cmpopts.EquateEmpty()) {
			return
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("%s: warnings %q, want %q", what, got, want)
		}
	}
}

func (w *vfWorld) setup(name string) *devicev1.PreparedDevice {
	w.t.Helper()
	resp, err := w.srv.Setup(w.ctx, &provisionerv1.SetupRequest{DeviceName: name, Manager: devicev1.DeviceManager_DEVICE_MANAGER_SRIOV})
	if err != nil {
		w.t.Fatal(err)
	}
	return resp.GetPreparedDevice()
}

func (w *vfWorld) free(pd *devicev1.PreparedDevice) {
	w.t.Helper()
	if _, err := w.srv.Free(w.ctx, &provisionerv1.FreeRequest{PreparedDevice: pd}); err != nil {
		w.t.Fatal(err)
	}
}

const (
	waitsForVF  = "PF ens1f0: vfCount 4 waits until its allocated VF is freed (it keeps its 2 VFs until then)"
	waitsForDra = "PF ens1f0: vfCount 3 waits until dra lists the VFs prepared for claims (it keeps its 2 VFs until then)"
)

// TestServer_VFCount: a new vfCount for a PF whose VFs Setups prepared
// waits, said in the sr-iov manager's warnings (which WatchDevices sends),
// while Setups of its VFs go on, and is applied at the last one's Free;
// one above the PF's sriov_totalvfs is refused naming the field, with
// nothing changed.
func TestServer_VFCount(t *testing.T) {
	w := newVFWorld(t, vfTree(t, 2))
	if err := w.configure(2, []string{}); err != nil {
		t.Fatal(err)
	}
	w.await("the count it has")
	pd0, pd1 := w.setup("0000-03-10-0"), w.setup("0000-03-10-1")

	if err := w.configure(4, []string{}); err != nil {
		t.Fatal(err)
	}
	w.await("two VFs prepared", strings.Replace(waitsForVF, "its allocated VF is", "its 2 allocated VFs are", 1))
	batch, _ := w.srv.inv.changedSince(map[devicev1.DeviceManager]uint64{})
	if got := batch[0].GetWarnings(); batch[0].GetManager() != devicev1.DeviceManager_DEVICE_MANAGER_SRIOV || len(got) != 1 {
		t.Errorf("WatchDevices' first message: %v with warnings %q, want the sr-iov manager's", batch[0].GetManager(), got)
	}
	w.free(pd1)
	w.await("one of them freed", waitsForVF)
	if got := w.numVFs(); got != "2" {
		t.Fatalf("sriov_numvfs = %s while a VF of the PF is prepared, want 2", got)
	}
	pd1 = w.setup("0000-03-10-1") // Setups go on while the count waits
	w.free(pd0)
	w.free(pd1)
	w.await("every VF freed")
	if got := w.numVFs(); got != "4" {
		t.Errorf("sriov_numvfs = %s once the VFs were freed, want 4", got)
	}

	_, err := w.srv.Configure(w.ctx, &provisionerv1.ConfigureRequest{Managers: &provisionerv1.ManagerConfigs{Sriov: &provisionerv1.SriovConfig{
		Enabled: true, Ifaces: []*provisionerv1.SriovInterface{{IfName: "ens1f0", VfCount: 8}}}}})
	if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), "managers.sriov.ifaces[0].vfCount: ") {
		t.Errorf("8 VFs: %v, want InvalidArgument for managers.sriov.ifaces[0].vfCount", err)
	}
	t.Logf("8 VFs: %v", err)
	if got := w.numVFs(); got != "4" {
		t.Errorf("sriov_numvfs = %s after a refused count, want 4", got)
	}
	if _, ok := w.srv.managers.forSetup(devicev1.DeviceManager_DEVICE_MANAGER_SRIOV); !ok {
		t.Error("the sr-iov manager stopped at a refused count")
	}
}

// TestServer_VFCount_AfterRestart: a provisioner that (re)started knows the
// VFs prepared before only from a Configure's list: without one a new count
// waits; with one naming a VF of the PF it waits for that VF; with one that
// names none it is applied.
func TestServer_VFCount_AfterRestart(t *testing.T) {
	w := newVFWorld(t, vfTree(t, 2))
	if err := w.configure(3, nil); err != nil {
		t.Fatal(err)
	}
	w.await("no list", waitsForDra)
	if err := w.configure(3, []string{"0000-03-10-0", "0000-07-10-0"}); err != nil {
		t.Fatal(err)
	}
	w.await("a list with a VF of the PF", strings.Replace(waitsForDra, "dra lists the VFs prepared for claims", "its allocated VF is freed", 1))
	if got := w.numVFs(); got != "2" {
		t.Fatalf("sriov_numvfs = %s while a listed VF of the PF is prepared, want 2", got)
	}
	if err := w.configure(3, []string{"0000-07-10-0"}); err != nil {
		t.Fatal(err)
	}
	w.await("a list with no VF of the PF")
	if got := w.numVFs(); got != "3" {
		t.Errorf("sriov_numvfs = %s, want 3", got)
	}
}

// TestServer_ManagerFailureWarned: a manager whose Run stops says why in
// its warnings, until a Configure starts it again.
func TestServer_ManagerFailureWarned(t *testing.T) {
	root := vfTree(t, 2)
	w := newVFWorld(t, root)
	req := &provisionerv1.ConfigureRequest{PreparedVfs: &provisionerv1.PreparedVfs{}, Managers: &provisionerv1.ManagerConfigs{Sriov: &provisionerv1.SriovConfig{
		Enabled: true, Ifaces: []*provisionerv1.SriovInterface{{IfName: "ens9f9", VfCount: 2}}}}}
	if _, err := w.srv.Configure(w.ctx, req); err != nil {
		t.Fatal(err)
	}
	var got []string
	for deadline := time.Now().Add(10 * time.Second); len(got) == 0; time.Sleep(5 * time.Millisecond) {
		got = w.srv.inv.warnings(devicev1.DeviceManager_DEVICE_MANAGER_SRIOV)
		if time.Now().After(deadline) {
			t.Fatal("no warning for a manager that stopped")
		}
	}
	if len(got) != 1 || !strings.HasPrefix(got[0], "stopped: provisioning VFs: PF ens9f9: ") {
		t.Errorf("warnings %q, want why the manager stopped", got)
	}
	if err := w.configure(2, nil); err != nil {
		t.Fatal(err)
	}
	w.await("running again")
	if _, err := w.srv.Configure(w.ctx, &provisionerv1.ConfigureRequest{}); err != nil {
		t.Fatal(err)
	}
	w.await("disabled")
}
