package server

import (
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
)

// netnsHandles keeps an open file on the pod network namespace of each
// device the server moved into one, from Attach until the device is out
// again. The runtime may tear a pod down without telling netdra (nri not
// connected, a failed StopPodSandbox, a containerd restart that forgot its
// sandboxes): it unmounts the netns path and its processes exit, and the
// kernel would then destroy the namespace, and with it a veth in it, or
// hand a physical link back to the host under its pod name. An open file
// keeps the namespace alive, so a later Detach, or at the latest the Free
// of an unprepared claim, takes the device back through /proc/self/fd.
//
// The handles live in memory: a provisioner restart loses them, and
// Detach then falls back to what the kernel left (link.ErrLinkLost when
// nothing).
type netnsHandles struct {
	mu sync.Mutex
	m  map[string]*netnsHandle // by device name
}

type netnsHandle struct {
	f   *os.File
	cfg *devicev1.DeviceConfig // the Attach's, for a Detach that Free makes
}

// keep opens path, the netns name was attached into, and holds it,
// replacing (and closing) an older handle for name.
func (h *netnsHandles) keep(name, path string, cfg *devicev1.DeviceConfig) error {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("keeping a handle on netns %s: %w", path, err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[string]*netnsHandle{}
	}
	if old := h.m[name]; old != nil {
		old.f.Close()
	}
	h.m[name] = &netnsHandle{f: f, cfg: cfg}
	return nil
}

// path returns a path to name's pod netns that works while the handle is
// open, whatever became of the runtime's path, and the Attach's config.
func (h *netnsHandles) path(name string) (string, *devicev1.DeviceConfig, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	hd := h.m[name]
	if hd == nil {
		return "", nil, false
	}
	return fmt.Sprintf("/proc/self/fd/%d", hd.f.Fd()), hd.cfg, true
}

// holds reports whether name's handle is on the network namespace at path
// (the same namespace file: device and inode), and whether there is a
// handle at all.
func (h *netnsHandles) holds(name, path string) (same, held bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	hd := h.m[name]
	if hd == nil {
		return false, false
	}
	var a, b unix.Stat_t
	if unix.Fstat(int(hd.f.Fd()), &a) != nil || unix.Stat(path, &b) != nil {
		return false, true
	}
	return a.Dev == b.Dev && a.Ino == b.Ino, true
}

// drop closes name's handle: its device is out of the pod.
func (h *netnsHandles) drop(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if hd := h.m[name]; hd != nil {
		hd.f.Close()
		delete(h.m, name)
	}
}

// count is how many pod namespaces are held, one per device.
func (h *netnsHandles) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.m)
}

// closeAll drops every handle (the server stops).
func (h *netnsHandles) closeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for name, hd := range h.m {
		hd.f.Close()
		delete(h.m, name)
	}
}
