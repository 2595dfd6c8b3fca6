package sriov

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/shared/fielderr"
)

func ifaces(pairs ...any) []*provisionerv1.SriovInterface {
	var out []*provisionerv1.SriovInterface
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, &provisionerv1.SriovInterface{IfName: pairs[i].(string), VfCount: uint32(pairs[i+1].(int))})
	}
	return out
}

func TestProvisionVFs(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ifaces []*provisionerv1.SriovInterface
		// wantNumVFs is every listed PF's sriov_numvfs afterwards.
		wantNumVFs map[string]string
		// wantWarn and wantErrIn are substrings of the warnings / error.
		wantWarn  []string
		wantErr   error
		wantErrIn []string
	}{
		{name: "PF already has the count", ifaces: ifaces("ens1f0", 2),
			wantNumVFs: map[string]string{"ens1f0": "2"}},
		{name: "PF with no VFs gets the count", ifaces: ifaces("ens3f0", 4),
			wantNumVFs: map[string]string{"ens3f0": "4"}},
		{name: "PF with no VFs gets up to the total", ifaces: ifaces("ens3f0", 8),
			wantNumVFs: map[string]string{"ens3f0": "8"}},
		{name: "more than sriov_totalvfs", ifaces: ifaces("ens3f0", 9),
			wantNumVFs: map[string]string{"ens3f0": "0"},
			wantErr:    ErrTooManyVFs, wantErrIn: []string{"ens3f0", "9", "sriov_totalvfs 8"}},
		{name: "a different non-zero count is left alone with a warning", ifaces: ifaces("ens2f0np0", 5),
			wantNumVFs: map[string]string{"ens2f0np0": "3"},
			wantWarn:   []string{"ens2f0np0 has 3 VFs, not the 5 configured"}},
		{name: "vfCount 0 leaves both kinds of PF alone, without a warning", ifaces: ifaces("ens3f0", 0, "ens2f0np0", 0),
			wantNumVFs: map[string]string{"ens3f0": "0", "ens2f0np0": "3"}},
		{name: "missing PF", ifaces: ifaces("ens9f9", 2),
			wantErr: ErrPFNotFound, wantErrIn: []string{"ens9f9"}},
		{name: "PF without SR-IOV", ifaces: ifaces("eno1", 2),
			wantErr: ErrNotSriov, wantErrIn: []string{"eno1"}},
		{name: "a bad PF does not stop the others", ifaces: ifaces("ens9f9", 2, "ens3f0", 4, "ens2f0np0", 2),
			wantNumVFs: map[string]string{"ens3f0": "4", "ens2f0np0": "3"},
			wantWarn:   []string{"ens2f0np0 has 3 VFs, not the 2 configured"},
			wantErr:    ErrPFNotFound, wantErrIn: []string{"ens9f9"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := fixtureTree(t)
			warns, err := ProvisionVFs(testLogger(t), root, tc.ifaces)
			checkErr(t, err, tc.wantErr, tc.wantErrIn)
			checkContains(t, "warnings", warns, tc.wantWarn)
			got := map[string]string{}
			for pf := range tc.wantNumVFs {
				got[pf] = readFile(t, filepath.Join(root, "class/net", pf, "device/sriov_numvfs"))
			}
			if diff := cmp.Diff(tc.wantNumVFs, got, cmpEmptyMap); diff != "" {
				t.Errorf("sriov_numvfs (-want +got):\n%s", diff)
			}
			if tc.wantErr != nil {
				return
			}
			// Idempotent: the second run finds what the first wrote.
			warns2, err := ProvisionVFs(testLogger(t), root, tc.ifaces)
			if err != nil {
				t.Fatalf("second ProvisionVFs: %v", err)
			}
			if diff := cmp.Diff(warns, warns2); diff != "" {
				t.Errorf("second ProvisionVFs warnings (-first +second):\n%s", diff)
			}
		})
	}
}

var cmpEmptyMap = cmp.Transformer("nilMap", func(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return m
})

func TestValidateConfig(t *testing.T) {
	long := strings.Repeat("e", 16)
	for _, tc := range []struct {
		name      string
		cfg       *provisionerv1.SriovConfig
		wantField string
	}{
		{name: "nil"},
		{name: "no ifaces", cfg: &provisionerv1.SriovConfig{Enabled: true}},
		{name: "good", cfg: &provisionerv1.SriovConfig{Ifaces: ifaces("ens1f0", 4, "ens2f0np0", 8)}},
		{name: "empty ifName", cfg: &provisionerv1.SriovConfig{Ifaces: ifaces("", 4)}, wantField: "ifaces[0].ifName"},
		{name: "long ifName", cfg: &provisionerv1.SriovConfig{Ifaces: ifaces("ens1f0", 1, long, 4)}, wantField: "ifaces[1].ifName"},
		{name: "slash in ifName", cfg: &provisionerv1.SriovConfig{Ifaces: ifaces("a/b", 4)}, wantField: "ifaces[0].ifName"},
		{name: "space in ifName", cfg: &provisionerv1.SriovConfig{Ifaces: ifaces("a b", 4)}, wantField: "ifaces[0].ifName"},
		{name: "dot ifName", cfg: &provisionerv1.SriovConfig{Ifaces: ifaces("..", 4)}, wantField: "ifaces[0].ifName"},
		{name: "duplicate ifName", cfg: &provisionerv1.SriovConfig{Ifaces: ifaces("ens1f0", 1, "ens1f0", 2)}, wantField: "ifaces[1].ifName"},
		{name: "zero vfCount uses the VFs there are", cfg: &provisionerv1.SriovConfig{Ifaces: ifaces("ens1f0", 0)}},
		{name: "most VFs", cfg: &provisionerv1.SriovConfig{Ifaces: ifaces("ens1f0", 4096)}},
		{name: "too many VFs", cfg: &provisionerv1.SriovConfig{Ifaces: ifaces("ens1f0", 1, "ens1f1", 4097)}, wantField: "ifaces[1].vfCount"},
		{name: "path too long", cfg: &provisionerv1.SriovConfig{SysBusPciDevPath: "/" + strings.Repeat("a", 4095)}, wantField: "sysBusPciDevPath"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkField(t, ValidateConfig(tc.cfg), tc.wantField)
			if _, err := New(nil, t.TempDir(), tc.cfg); tc.wantField == "" && err != nil {
				t.Errorf("New: %v", err)
			}
		})
	}
}

// checkField checks that err is a *fielderr.Error for field, or nil when
// field is "".
func checkField(tb testing.TB, err error, field string) {
	tb.Helper()
	var fe *fielderr.Error
	switch {
	case field == "" && err != nil:
		tb.Errorf("error %v, want none", err)
	case field == "":
	case !errors.As(err, &fe):
		tb.Errorf("error %v, want a field error for %s", err, field)
	case fe.Field != field:
		tb.Errorf("error for field %q (%v), want %q", fe.Field, err, field)
	default:
		tb.Logf("%s", err)
	}
}

// checkErr checks that err is want (nil: no error) and mentions every
// substring of in.
func checkErr(tb testing.TB, err, want error, in []string) {
	tb.Helper()
	if !errors.Is(err, want) || (want == nil) != (err == nil) {
		tb.Fatalf("error %v, want %v", err, want)
	}
	if err == nil {
		return
	}
	tb.Logf("error: %v", err)
	for _, s := range in {
		if !strings.Contains(err.Error(), s) {
			tb.Errorf("error %q does not mention %q", err, s)
		}
	}
}

// checkContains checks that got has one entry per want, each containing
// its want.
func checkContains(tb testing.TB, what string, got, want []string) {
	tb.Helper()
	if len(got) != len(want) {
		tb.Errorf("%s = %q, want %d containing %q", what, got, len(want), want)
		return
	}
	for i := range want {
		if !strings.Contains(got[i], want[i]) {
			tb.Errorf("%s[%d] = %q, want it to contain %q", what, i, got[i], want[i])
		}
	}
}

// fakePrepared is a Prepared whose prepared VFs the test sets. It records
// which PFs are held, and checks that nothing holds a PF twice or releases
// a hold twice.
type fakePrepared struct {
	tb       testing.TB
	mu       sync.Mutex
	unknown  bool
	prepared map[string]bool
	held     map[string]bool
	holds    int
	changed  chan struct{}
}

func newFakePrepared(tb testing.TB, names ...string) *fakePrepared {
	f := &fakePrepared{tb: tb, prepared: map[string]bool{}, held: map[string]bool{}, changed: make(chan struct{})}
	for _, n := range names {
		f.prepared[n] = true
	}
	return f
}

func (f *fakePrepared) HoldPF(pf string, vfs []string) (int, func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.unknown {
		return -1, func() {}
	}
	n := 0
	for _, v := range vfs {
		if f.prepared[v] {
			n++
		}
	}
	if n > 0 {
		return n, func() {}
	}
	if f.held[pf] {
		f.tb.Errorf("PF %s held twice", pf)
	}
	f.held[pf] = true
	f.holds++
	var once sync.Once
	return 0, func() {
		once.Do(func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			delete(f.held, pf)
		})
	}
}

func (f *fakePrepared) Changed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changed
}

// free stops name being prepared; announced wakes Changed's waiters.
func (f *fakePrepared) free(name string, announced bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.prepared, name)
	if announced {
		close(f.changed)
		f.changed = make(chan struct{})
	}
}

func (f *fakePrepared) isHeld(pf string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.held[pf]
}

func (f *fakePrepared) isPrepared(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.prepared[name]
}

// fakeKernel takes writes to sriov_numvfs in a fixture tree as the
// kernel does, with the 82576's rules: a new non-zero count only from 0
// (EBUSY), at most sriov_totalvfs (ERANGE). For the Intel PF it also
// destroys the PF's VFs at 0 (their PCI functions, virtfn links and
// netdevs) and makes n new ones, each with a MAC of its generation, so
// that a rediscovery tells the new from the old. It fails the test when
// VFs are destroyed while their PF is not held, or while one of them is
// prepared. fail, when set, is the error of the writes of that count.
type fakeKernel struct {
	tb       testing.TB
	root     string
	prepared *fakePrepared // nil: no check of holds
	mu       sync.Mutex
	writes   []string // "ens1f0=0"
	gen      int
	fail     map[uint64]error
}

func (k *fakeKernel) write(path string, n uint64) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	dev, err := filepath.EvalSymlinks(filepath.Dir(path))
	if err != nil {
		return err
	}
	pf := ""
	for _, d := range []pciDev{intelPF, mlxPF, emptyPF} {
		if dev == filepath.Join(k.root, "devices", d.parent, d.addr) {
			pf = d.netdev
		}
	}
	k.writes = append(k.writes, fmt.Sprintf("%s=%d", pf, n))
	if err := k.fail[n]; err != nil {
		return err
	}
	have := readUintT(k.tb, path)
	total := readUintT(k.tb, filepath.Join(dev, "sriov_totalvfs"))
	switch {
	case n > total:
		return &fs.PathError{Op: "write", Path: path, Err: syscall.ERANGE}
	case n != 0 && have != 0 && n != have:
		return &fs.PathError{Op: "write", Path: path, Err: syscall.EBUSY}
	case n == have:
		return nil
	}
	if have != 0 {
		vfs, err := vfNames(dev)
		if err != nil {
			k.tb.Fatal(err)
		}
		if k.prepared != nil {
			if !k.prepared.isHeld(pf) {
				k.tb.Errorf("the VFs of %s destroyed while it was not held", pf)
			}
			for _, v := range vfs {
				if k.prepared.isPrepared(v) {
					k.tb.Errorf("VF %s of %s destroyed while it was prepared", v, pf)
				}
			}
		}
		if pf == intelPF.netdev {
			k.destroyIntelVFs(dev)
		}
	}
	if n != 0 && pf == intelPF.netdev {
		k.gen++
		for i := range int(n) {
			vf := intelVF0
			vf.addr = fmt.Sprintf("0000:03:02.%d", i)
			vf.netdev = fmt.Sprintf("ens1f0v%d", i)
			vf.mac = fmt.Sprintf("02:00:%02x:03:02:%02x", k.gen, i)
			hotplug(k.tb, k.root, vf, i)
		}
	}
	return os.WriteFile(path, []byte(strconv.FormatUint(n, 10)+"\n"), 0o644)
}

// destroyIntelVFs removes every VF of the Intel PF at dev from the tree.
func (k *fakeKernel) destroyIntelVFs(dev string) {
	links, _ := filepath.Glob(filepath.Join(dev, "virtfn*"))
	for _, l := range links {
		target, err := filepath.EvalSymlinks(l)
		if err != nil {
			k.tb.Fatal(err)
		}
		addr := filepath.Base(target)
		netdev, _ := firstEntry(filepath.Join(target, "net"))
		for _, p := range []string{filepath.Join(k.root, "bus/pci/devices", addr), l, target} {
			if err := os.RemoveAll(p); err != nil {
				k.tb.Fatal(err)
			}
		}
		if netdev != "" {
			if err := os.Remove(filepath.Join(k.root, "class/net", netdev)); err != nil {
				k.tb.Fatal(err)
			}
		}
	}
}

func (k *fakeKernel) written() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.writes)
}

func readUintT(tb testing.TB, path string) uint64 {
	tb.Helper()
	n, err := readUint(path)
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// intelVFNames are the device names of the Intel PF's VFs in the tree.
func intelVFNames(tb testing.TB, root string) []string {
	tb.Helper()
	names, err := vfNames(pfDevice(root, intelPF.netdev))
	if err != nil {
		tb.Fatal(err)
	}
	return names
}

// TestProvision: a PF's count through the kernel's sriov_numvfs, knowing
// which VFs are prepared: written from 0; re-created (0, then the count)
// when none of the PF's VFs is prepared, with the PF held until the caller
// releases it; left alone, with a warning saying what it waits for, when
// one is or when that is not known; refused when the PF cannot take it.
// The fake kernel fails the test when VFs go while prepared or unheld.
func TestProvision(t *testing.T) {
	errBusy := &fs.PathError{Op: "write", Path: "sriov_numvfs", Err: syscall.EBUSY}
	for _, tc := range []struct {
		name     string
		ifaces   []*provisionerv1.SriovInterface
		prepared []string
		unknown  bool
		fail     map[uint64]error
		// wantWrites are the writes to sriov_numvfs, in order.
		wantWrites []string
		// wantVFs are the Intel PF's VFs afterwards.
		wantVFs []string
		// wantHeld are the PFs held until release.
		wantHeld  []string
		wantWarn  []string
		wantErr   error
		wantErrIn []string
	}{
		{name: "from 0", ifaces: ifaces("ens3f0", 4),
			wantWrites: []string{"ens3f0=4"}, wantVFs: []string{"0000-03-02-0", "0000-03-02-1"}},
		{name: "the count it has", ifaces: ifaces("ens1f0", 2), prepared: []string{"0000-03-02-0"},
			wantVFs: []string{"0000-03-02-0", "0000-03-02-1"}},
		{name: "another count, none of its VFs prepared: re-created", ifaces: ifaces("ens1f0", 3),
			prepared:   []string{"0000-5e-00-2"}, // the other PF's
			wantWrites: []string{"ens1f0=0", "ens1f0=3"}, wantVFs: []string{"0000-03-02-0", "0000-03-02-1", "0000-03-02-2"},
			wantHeld: []string{"ens1f0"}},
		{name: "a smaller count, re-created", ifaces: ifaces("ens1f0", 1),
			wantWrites: []string{"ens1f0=0", "ens1f0=1"}, wantVFs: []string{"0000-03-02-0"}, wantHeld: []string{"ens1f0"}},
		{name: "another count, one VF prepared: waits", ifaces: ifaces("ens1f0", 4), prepared: []string{"0000-03-02-1"},
			wantVFs:  []string{"0000-03-02-0", "0000-03-02-1"},
			wantWarn: []string{"PF ens1f0: vfCount 4 waits until its allocated VF is freed (it keeps its 2 VFs until then)"}},
		{name: "another count, both VFs prepared: waits", ifaces: ifaces("ens1f0", 4), prepared: []string{"0000-03-02-0", "0000-03-02-1"},
			wantVFs:  []string{"0000-03-02-0", "0000-03-02-1"},
			wantWarn: []string{"PF ens1f0: vfCount 4 waits until its 2 allocated VFs are freed (it keeps its 2 VFs until then)"}},
		{name: "another count, what is prepared not known: waits", ifaces: ifaces("ens1f0", 4), unknown: true,
			wantVFs:  []string{"0000-03-02-0", "0000-03-02-1"},
			wantWarn: []string{"PF ens1f0: vfCount 4 waits until dra lists the VFs prepared for claims (it keeps its 2 VFs until then)"}},
		{name: "more than sriov_totalvfs", ifaces: ifaces("ens1f0", 65),
			wantVFs: []string{"0000-03-02-0", "0000-03-02-1"},
			wantErr: ErrTooManyVFs, wantErrIn: []string{"ens1f0", "65", "sriov_totalvfs 64"}},
		{name: "the kernel refuses 0: the PF keeps its VFs", ifaces: ifaces("ens1f0", 4), fail: map[uint64]error{0: errBusy},
			wantWrites: []string{"ens1f0=0"}, wantVFs: []string{"0000-03-02-0", "0000-03-02-1"},
			wantErr: syscall.EBUSY, wantErrIn: []string{"ens1f0", "writing 0"}},
		{name: "the kernel refuses the count after 0", ifaces: ifaces("ens1f0", 4), fail: map[uint64]error{4: errBusy},
			wantWrites: []string{"ens1f0=0", "ens1f0=4"},
			wantErr:    syscall.EBUSY, wantErrIn: []string{"ens1f0", "writing 4", "no VFs now"}},
		{name: "each PF on its own", ifaces: ifaces("ens1f0", 3, "ens2f0np0", 2, "ens3f0", 1), prepared: []string{"0000-5e-00-3"},
			wantWrites: []string{"ens1f0=0", "ens1f0=3", "ens3f0=1"}, wantVFs: []string{"0000-03-02-0", "0000-03-02-1", "0000-03-02-2"},
			wantHeld: []string{"ens1f0"},
			wantWarn: []string{"PF ens2f0np0: vfCount 2 waits until its allocated VF is freed (it keeps its 3 VFs until then)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := fixtureTree(t)
			prep := newFakePrepared(t, tc.prepared...)
			prep.unknown = tc.unknown
			k := &fakeKernel{tb: t, root: root, prepared: prep, fail: tc.fail}
			p, err := newProvisioner(testLogger(t), root, prep, k.write).provision(tc.ifaces, false)
			checkErr(t, err, tc.wantErr, tc.wantErrIn)
			if diff := cmp.Diff(tc.wantWrites, k.written(), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("writes to sriov_numvfs (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantVFs, intelVFNames(t, root), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("the Intel PF's VFs (-want +got):\n%s", diff)
			}
			checkContains(t, "warnings", p.warnings(), tc.wantWarn)
			var held []string
			for _, pf := range []string{"ens1f0", "ens2f0np0", "ens3f0"} {
				if prep.isHeld(pf) {
					held = append(held, pf)
				}
			}
			if diff := cmp.Diff(tc.wantHeld, held, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("PFs held before release (-want +got):\n%s", diff)
			}
			p.release()
			p.release()
			for _, pf := range held {
				if prep.isHeld(pf) {
					t.Errorf("%s still held after release", pf)
				}
			}
			if len(tc.wantWarn) > 0 {
				var waiting []string
				for _, i := range p.ifaces() {
					waiting = append(waiting, i.GetIfName())
				}
				t.Logf("waiting: %v", waiting)
				if len(waiting) != len(tc.wantWarn) {
					t.Errorf("waiting PFs %v, want one per warning %q", waiting, tc.wantWarn)
				}
			}
		})
	}
}

// TestProvision_KeepFailed: a pass that retries waiting PFs keeps one
// that fails waiting, with the error as its warning.
func TestProvision_KeepFailed(t *testing.T) {
	root := fixtureTree(t)
	prep := newFakePrepared(t)
	k := &fakeKernel{tb: t, root: root, prepared: prep, fail: map[uint64]error{0: syscall.EBUSY}}
	p, err := newProvisioner(testLogger(t), root, prep, k.write).provision(ifaces("ens1f0", 3, "ens3f0", 2), true)
	defer p.release()
	if err != nil {
		t.Fatalf("error %v, want the failure as a warning", err)
	}
	checkContains(t, "warnings", p.warnings(), []string{"PF ens1f0: writing 0 to sriov_numvfs"})
	if got := p.ifaces(); len(got) != 1 || got[0].GetIfName() != "ens1f0" {
		t.Errorf("waiting %v, want ens1f0", got)
	}
	if got := readFile(t, filepath.Join(root, "class/net/ens3f0/device/sriov_numvfs")); got != "2" {
		t.Errorf("ens3f0's sriov_numvfs = %s, want 2: one PF's failure stops no other", got)
	}
}

// TestNew_TooManyVFs: a vfCount above its PF's sriov_totalvfs is refused
// by New, naming the field, before anything is written.
func TestNew_TooManyVFs(t *testing.T) {
	root := fixtureTree(t)
	_, err := New(testLogger(t), root, &provisionerv1.SriovConfig{Ifaces: ifaces("ens1f0", 64, "ens3f0", 9, "ens9f9", 4096)})
	checkField(t, err, "ifaces[1].vfCount")
	if err != nil && !strings.Contains(err.Error(), "its sriov_totalvfs is 8") {
		t.Errorf("error %q does not give the PF's sriov_totalvfs", err)
	}
	for pf, want := range map[string]string{"ens1f0": "2", "ens3f0": "0"} {
		if got := readFile(t, filepath.Join(root, "class/net", pf, "device/sriov_numvfs")); got != want {
			t.Errorf("%s: sriov_numvfs = %s, want %s (untouched)", pf, got, want)
		}
	}
	// A PF that is not there, or that has room, is not New's to refuse.
	if _, err := New(testLogger(t), root, &provisionerv1.SriovConfig{Ifaces: ifaces("ens1f0", 64, "ens3f0", 8, "ens9f9", 4096)}); err != nil {
		t.Errorf("New: %v", err)
	}
}
