package plugin

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/google/go-cmp/cmp"
)

// undescribedPod is a sandbox the runtime describes without namespaces
// (containerd's, recovered after it was killed in the sandbox's start),
// with its process's pid.
func undescribedPod(uid string, pid uint32) *api.PodSandbox {
	return &api.PodSandbox{Id: "sb-" + uid, Uid: uid, Name: "pod-" + uid, Namespace: "default", Linux: &api.LinuxPodSandbox{}, Pid: pid}
}

// fakeNetns makes procRoot and netnsDirs a test's own: process 4242's
// network namespace is the file the returned path names, also linked from
// the netns directory as that path (the runtime's bind mount of it).
func fakeNetns(t *testing.T) (netns string) {
	t.Helper()
	root := t.TempDir()
	proc, dir := filepath.Join(root, "proc"), filepath.Join(root, "netns")
	for _, d := range []string{filepath.Join(proc, "4242", "ns"), filepath.Join(proc, "7", "ns"), dir, filepath.Join(dir, "netdra")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	netns = filepath.Join(dir, "cni-1234")
	other := filepath.Join(root, "host-netns")
	for _, f := range []string{netns, other} {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// /proc/<pid>/ns/net resolves to the namespace (a symlink here, a
	// magic link in /proc); pid 7's is one no runtime mounted.
	for pid, target := range map[string]string{"4242": netns, "7": other} {
		if err := os.Symlink(target, filepath.Join(proc, pid, "ns", "net")); err != nil {
			t.Fatal(err)
		}
	}
	oldProc, oldDirs := procRoot, netnsDirs
	procRoot, netnsDirs = proc, []string{dir}
	t.Cleanup(func() { procRoot, netnsDirs = oldProc, oldDirs })
	return netns
}

func TestNetnsOf(t *testing.T) {
	netns := fakeNetns(t)
	for _, tc := range []struct {
		name string
		pod  *api.PodSandbox
		want string
	}{
		{"described", pod("p", "/var/run/netns/cni-described"), "/var/run/netns/cni-described"},
		{"host network", pod("p", ""), ""},
		{"undescribed, found from its process", undescribedPod("p", 4242), netns},
		{"undescribed, its process in a namespace no runtime mounted", undescribedPod("p", 7), ""},
		{"undescribed, its process not there", undescribedPod("p", 99), ""},
		{"undescribed, no pid", undescribedPod("p", 0), ""},
		{"host network with a pid", func() *api.PodSandbox { p := pod("p", ""); p.Pid = 4242; return p }(), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := netnsOf(tc.pod); got != tc.want {
				t.Errorf("netnsOf = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestUndescribedSandbox: a sandbox the runtime describes without
// namespaces gets its devices attached into the namespace found from its
// process, at RunPodSandbox and at Synchronize (the runtime sends no
// RunPodSandbox for one it recovered); when that is not found, the
// containers of a pod with devices are refused with the reason, and those
// of a pod without pass.
func TestUndescribedSandbox(t *testing.T) {
	netns := fakeNetns(t)
	t.Run("RunPodSandbox", func(t *testing.T) {
		w := newWorld(alloc("a", "pod1", prepared))
		if err := start(newPlugin(t, w), undescribedPod("pod1", 4242)); err != nil {
			t.Fatal(err)
		}
		want := []string{"provisioner.Attach a " + netns + " net-a", "state.MarkAttached a " + netns}
		if diff := cmp.Diff(want, w.takeCalls()); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
	})
	t.Run("Synchronize", func(t *testing.T) {
		w := newWorld(alloc("a", "pod1", prepared))
		p := newPlugin(t, w)
		if _, err := p.Synchronize(context.Background(), []*api.PodSandbox{undescribedPod("pod1", 4242)}, nil); err != nil {
			t.Fatal(err)
		}
		p.Reconcile(context.Background()) // waits for the background one
		want := []string{"provisioner.Attach a " + netns + " net-a", "state.MarkAttached a " + netns}
		if diff := cmp.Diff(want, w.takeCalls()); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
		if _, _, err := p.CreateContainer(context.Background(), undescribedPod("pod1", 4242), &api.Container{Name: "app"}); err != nil {
			t.Errorf("CreateContainer after the attach: %v", err)
		}
	})
	t.Run("not found", func(t *testing.T) {
		w := newWorld(alloc("a", "pod1", prepared))
		p := newPlugin(t, w)
		err := start(p, undescribedPod("pod1", 7))
		if !errors.Is(err, errUndescribed) {
			t.Fatalf("CreateContainer: %v, want the refusal for an undescribed sandbox", err)
		}
		if calls := w.takeCalls(); len(calls) != 0 {
			t.Errorf("calls: %q, want none", calls)
		}
		if err := start(p, undescribedPod("pod2", 7)); err != nil {
			t.Errorf("CreateContainer of a pod without devices: %v", err)
		}
	})
}
