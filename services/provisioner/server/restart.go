package server

import (
	"context"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// UseNetnsPins makes the handles on pod namespaces outlive the process:
// each is pinned under dir (pinStore; made if missing). It reopens the
// pins an earlier run left, and takes back at once the device of each pin
// whose pod's netns path is gone or names another namespace: the runtime
// tore the pod down while the provisioner was away, and nothing else
// would release that namespace before the claim's Free. A device still in
// its pod with a DHCP lease has its lease kept again (resumeLease). A device it
// cannot take back stays pinned, for the claim's Free. Call it once,
// before serving; an error means dir cannot be used.
func (s *Server) UseNetnsPins(ctx context.Context, dir string) error {
	if err := checkPinDir(dir); err != nil {
		return err
	}
	s.handles.pins = &pinStore{dir: dir}
	pins, errs := s.handles.pins.load()
	for _, err := range errs {
		s.log.Error("Netns pin not reopened: its namespace stays until the pin is unmounted by hand", "error", err)
	}
	for _, pn := range pins {
		s.handles.adopt(pn)
		s.log.Info("Netns pin reopened", "device", pn.name, "netns", pn.netnsPath)
	}
	for _, pn := range pins {
		if same, _ := s.handles.holds(pn.name, pn.netnsPath); same {
			s.resumeLease(ctx, pn)
			continue
		}
		if err := s.takeBackPinned(ctx, pn); err != nil {
			s.log.Warn("Device not taken back from its pinned netns; the claim's Free will", "device", pn.name, "error", err)
		}
	}
	return nil
}

// resumeLease keeps again the DHCP lease of a pinned device whose pod is
// still there (nothing for one without dhcp): without its keeper the
// lease would end unrenewed.
func (s *Server) resumeLease(ctx context.Context, pn pinned) {
	if !pn.cfg.GetDhcp() || createdInPod(pn.pd) || pn.pd.GetDevice().GetSubInterface() != nil {
		return
	}
	path, _, ok := s.handles.path(pn.name)
	if !ok {
		return
	}
	if err := s.mover.ResumeLease(ctx, pn.pd.GetOriginalLink(), path, pn.cfg); err != nil {
		s.log.Error("DHCP lease not kept again: it ends unrenewed, and the interface loses its address", "device", pn.name, "error", err)
	}
}

// takeBackPinned detaches a pinned device whose pod is gone.
func (s *Server) takeBackPinned(ctx context.Context, pn pinned) error {
	unlock, err := s.locks.Lock(ctx, pn.name)
	if err != nil {
		return err
	}
	defer unlock()
	lost, err := s.takeBack(ctx, pn.pd, "at start: its pod's netns "+pn.netnsPath+" is gone")
	if lost {
		s.log.Error("Device lost: not in the pinned netns of its torn-down pod", "device", pn.name)
	}
	return err
}

// checkPinDir makes dir when missing and refuses one that is not a
// directory or that others may write.
func checkPinDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("netns pin directory: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return fmt.Errorf("netns pin directory: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Mode&0o022 != 0 {
		return fmt.Errorf("netns pin directory %s: not a directory only its owner writes (mode %o)", dir, st.Mode&0o7777)
	}
	return nil
}
