package server

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
// With pins (WithNetnsPins), each handle is also a mount of the namespace
// under the pin directory (pinStore), which a restarted provisioner
// reopens. Without them the handles live in memory only: a provisioner
// restart loses them, and Detach then falls back to what the kernel left
// (link.ErrLinkLost when nothing).
type netnsHandles struct {
	mu   sync.Mutex
	m    map[string]*netnsHandle // by device name
	pins *pinStore               // nil: in memory only
}

type netnsHandle struct {
	f    *os.File
	path string                 // the netns path the Attach named ("" when unknown)
	cfg  *devicev1.DeviceConfig // the Attach's, for a Detach that Free makes
}

// keep opens path, the netns pd was attached into, and holds it,
// replacing (and closing) an older handle for it. With pins it pins the
// namespace too; an error there (pinErr) leaves the handle in memory.
func (h *netnsHandles) keep(pd *devicev1.PreparedDevice, path string, cfg *devicev1.DeviceConfig) (pinErr, err error) {
	name := pd.GetDevice().GetName()
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("keeping a handle on netns %s: %w", path, err)
	}
	// The pins are made one at a time (under h.mu): they run beside the
	// moves (Server.keepHandle), and many pins' fsyncs and bind mounts at
	// once slow those moves down.
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pins != nil {
		pinErr = h.pins.pin(name, f, path, pd, cfg)
	}
	h.put(name, &netnsHandle{f: f, path: path, cfg: cfg})
	return pinErr, nil
}

// put holds hd for name, closing an older handle; h.mu is held.
func (h *netnsHandles) put(name string, hd *netnsHandle) {
	if h.m == nil {
		h.m = map[string]*netnsHandle{}
	}
	if old := h.m[name]; old != nil {
		old.f.Close()
	}
	h.m[name] = hd
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
	same, _ = hd.on(path)
	return same, true
}

// on reports whether hd is on the namespace file at path (device and
// inode), and whether both could be read (ok false: path is gone).
func (hd *netnsHandle) on(path string) (same, ok bool) {
	var a, b unix.Stat_t
	if unix.Fstat(int(hd.f.Fd()), &a) != nil || unix.Stat(path, &b) != nil {
		return false, false
	}
	return a.Dev == b.Dev && a.Ino == b.Ino, true
}

// elsewhere reports whether name's handle is on another pod netns than
// the one at path, and that netns's path: the device was taken back from
// the pod at path since (its Detach never came) and attached to another
// pod. The same namespace file, or the same path the Attach named, is not
// elsewhere; nor is anything when there is no handle, path is empty or
// the handle's path is unknown. A path that is gone (the runtime tore
// that pod down) names another namespace than a handle whose Attach named
// another path: the runtime's netns paths are one per sandbox.
func (h *netnsHandles) elsewhere(name, path string) (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	hd := h.m[name]
	if hd == nil || path == "" || hd.path == "" || sameNetnsPath(hd.path, path) {
		return "", false
	}
	same, _ := hd.on(path)
	return hd.path, !same
}

// sameNetnsPath reports whether a and b name the same path, /var/run
// being /run.
func sameNetnsPath(a, b string) bool {
	clean := func(p string) string {
		p = filepath.Clean(p)
		if rest, ok := strings.CutPrefix(p, "/var/run/"); ok {
			return "/run/" + rest
		}
		return p
	}
	return clean(a) == clean(b)
}

// drop closes name's handle and releases its pin: its device is out of
// the pod. An error says the pin stays (it is retried at the next drop or
// start); the handle is closed anyway.
func (h *netnsHandles) drop(name string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if hd := h.m[name]; hd != nil {
		hd.f.Close()
		delete(h.m, name)
	}
	if h.pins == nil {
		return nil
	}
	return h.pins.unpin(name)
}

// count is how many pod namespaces are held, one per device.
func (h *netnsHandles) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.m)
}

// closeAll closes every handle (the server stops); the pins stay, for the
// next start.
func (h *netnsHandles) closeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for name, hd := range h.m {
		hd.f.Close()
		delete(h.m, name)
	}
}

// adopt holds a pin reopened at start.
func (h *netnsHandles) adopt(pn pinned) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.put(pn.name, &netnsHandle{f: pn.f, path: pn.netnsPath, cfg: pn.cfg})
}
