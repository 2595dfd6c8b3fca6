//go:build !kernelrig

package server

// The netns pins (pins.go, restart.go) with real namespaces and a real
// veth: a provisioner killed while a device is in a pod, then the runtime
// tearing that pod down while it is away, loses nothing: the restarted
// provisioner reopens the pin and takes the device back.

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
)

// withPins makes the world's provisioner pin the namespaces it holds.
func (w *ebpfWorld) withPins(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "pins")
	t.Cleanup(func() { // what a failed test left mounted
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			_ = unix.Unmount(filepath.Join(dir, e.Name()), unix.MNT_DETACH)
		}
	})
	if err := w.srv.UseNetnsPins(ctxFor(t), dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// kill9 leaves what a provisioner killed with SIGKILL leaves: its open
// files closed, its memory gone, its pins in place.
func (w *ebpfWorld) kill9() {
	w.srv.handles.closeAll()
	w.srv.handles = netnsHandles{}
}

// wantNoPins checks the pin directory is empty.
func wantNoPins(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("left in the pin directory: %s", e.Name())
	}
}

// TestPins_RestartThenRuntimeTearsDown is the long chaos run's loss: the
// provisioner is killed with the device in a pod, the runtime tears the
// pod's netns down meanwhile (no Detach), and the provisioner starts
// again: it takes the device back from the pinned namespace at once.
func TestPins_RestartThenRuntimeTearsDown(t *testing.T) {
	w := newEBPFWorld(t)
	dir := w.withPins(t)
	w.attached(t)
	w.kill9()
	w.tearDownPod(t)

	if err := w.srv.UseNetnsPins(ctxFor(t), dir); err != nil {
		t.Fatal(err)
	}
	w.wantHostEth1(t)
	wantNoPins(t, dir)
}

// TestPins_RestartKeepsLivePod: a restart while the pod lives keeps its
// namespace held, so a teardown after the restart does not lose the
// device either: the claim's Free takes it back.
func TestPins_RestartKeepsLivePod(t *testing.T) {
	w := newEBPFWorld(t)
	dir := w.withPins(t)
	pd, cfg := w.attached(t)
	w.kill9()
	if err := w.srv.UseNetnsPins(ctxFor(t), dir); err != nil {
		t.Fatal(err)
	}
	if same, held := w.srv.handles.holds(pd.GetDevice().GetName(), w.podPath()); !same || !held {
		t.Fatalf("after the restart, handle on the live pod: same %v, held %v", same, held)
	}
	w.tearDownPod(t)

	if _, err := w.srv.Free(ctxFor(t), &provisionerv1.FreeRequest{PreparedDevice: pd, Config: cfg}); err != nil {
		t.Fatalf("Free: %v", err)
	}
	w.wantHostEth1(t)
	wantNoPins(t, dir)
}

// TestPins_ReleasedAtDetach: a Detach releases the pin, and the pod's
// namespace is not kept: once its path is removed, nothing holds it.
func TestPins_ReleasedAtDetach(t *testing.T) {
	w := newEBPFWorld(t)
	dir := w.withPins(t)
	pd, cfg := w.attached(t)
	if _, err := os.Stat(filepath.Join(dir, pd.GetDevice().GetName())); err != nil {
		t.Fatalf("no pin after Attach: %v", err)
	}
	if _, err := w.srv.Detach(ctxFor(t), &provisionerv1.DetachRequest{PreparedDevice: pd, NetnsPath: w.podPath(), Config: cfg}); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	w.wantHostEth1(t)
	wantNoPins(t, dir)
}

// TestPins_HalfMadeRemoved: what a crash between a pin's steps leaves (a
// record without a pin, an empty pin file without a mount) is removed at
// start, and nothing is held.
func TestPins_HalfMadeRemoved(t *testing.T) {
	w := newEBPFWorld(t)
	dir := filepath.Join(t.TempDir(), "pins")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"eth7.json", "eth8", "eth8.json"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.srv.UseNetnsPins(ctxFor(t), dir); err != nil {
		t.Fatal(err)
	}
	wantNoPins(t, dir)
	if n := w.srv.handles.count(); n != 0 {
		t.Errorf("%d handles from half-made pins, want 0", n)
	}
}

// TestPins_WorldWritableDirRefused: a pin directory others may write is
// refused (anyone could plant a pin record there).
func TestPins_WorldWritableDirRefused(t *testing.T) {
	w := newEBPFWorld(t)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := w.srv.UseNetnsPins(ctxFor(t), dir); err == nil {
		t.Error("a world-writable pin directory was accepted")
	}
}
