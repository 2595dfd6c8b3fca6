package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/encoding/protojson"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/services/provisioner/link"
)

// pinStore makes the handles on pod namespaces outlive the provisioner:
// each held namespace is bind-mounted on a file under dir (<device>), as
// `ip netns add` does, beside a record of what a later Detach needs
// (<device>.json: the runtime's netns path, the prepared device, the
// Attach's config). A mount keeps the namespace alive without any process,
// so a provisioner killed and restarted reopens its handles (load).
//
// The record is written before the mount and removed after the unmount,
// so a pin always has its record; a record or an empty file without a
// mount (a crash between the steps) is removed at load.
//
// What a pin costs: it keeps a whole pod netns, with the pod's other
// links in it, until its device is taken back. There is at most one pin
// per device (a newer Attach replaces it), and every pin is released when
// its device leaves the pod: Detach, Free, an Attach elsewhere, or at
// start when the pod's netns path is gone (reconcilePins). In a pod, dir
// must be on a hostPath with mountPropagation Bidirectional: a pin made
// in the container's own mount namespace would go with the container.
type pinStore struct {
	dir string
}

// LeaseDir is where, under a pin directory, the provisioner keeps the DHCP
// leases of the devices in pods (link.WithLeaseDir): beside the pins,
// which a restarted provisioner reopens before it picks the leases up.
func LeaseDir(pinDir string) string { return filepath.Join(pinDir, "leases") }

// pinRecord is a pin's <device>.json.
type pinRecord struct {
	NetnsPath      string          `json:"netnsPath"`
	PreparedDevice json.RawMessage `json:"preparedDevice"`
	Config         json.RawMessage `json:"config,omitempty"`
}

// pinned is one pin reopened at load.
type pinned struct {
	name      string
	f         *os.File
	netnsPath string
	pd        *devicev1.PreparedDevice
	cfg       *devicev1.DeviceConfig
}

func (p *pinStore) pinPath(name string) string    { return filepath.Join(p.dir, name) }
func (p *pinStore) recordPath(name string) string { return filepath.Join(p.dir, name+".json") }

// pin mounts the namespace f is open on at <dir>/<name>, replacing an
// older pin of name. On error nothing of the new pin is left.
func (p *pinStore) pin(name string, f *os.File, netnsPath string, pd *devicev1.PreparedDevice, cfg *devicev1.DeviceConfig) error {
	if err := p.unpin(name); err != nil {
		return err
	}
	rec := pinRecord{NetnsPath: netnsPath}
	var err error
	if rec.PreparedDevice, err = protojson.Marshal(pd); err != nil {
		return fmt.Errorf("pinning the netns of %s: %w", name, err)
	}
	if cfg != nil {
		if rec.Config, err = protojson.Marshal(cfg); err != nil {
			return fmt.Errorf("pinning the netns of %s: %w", name, err)
		}
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("pinning the netns of %s: %w", name, err)
	}
	if err := link.WriteFileAtomic(p.recordPath(name), data); err != nil {
		return fmt.Errorf("pinning the netns of %s: %w", name, err)
	}
	err = os.WriteFile(p.pinPath(name), nil, 0o600)
	if err == nil {
		err = unix.Mount(fmt.Sprintf("/proc/self/fd/%d", f.Fd()), p.pinPath(name), "", unix.MS_BIND, "")
	}
	if err != nil {
		_ = os.Remove(p.pinPath(name))
		_ = os.Remove(p.recordPath(name))
		return fmt.Errorf("pinning the netns of %s at %s: %w", name, p.pinPath(name), err)
	}
	return nil
}

// unpin unmounts name's pin and removes its files; nothing when there is
// none. Idempotent.
func (p *pinStore) unpin(name string) error {
	err := unix.Unmount(p.pinPath(name), unix.MNT_DETACH)
	if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unpinning the netns of %s: %w", name, err)
	}
	for _, path := range []string{p.pinPath(name), p.recordPath(name)} {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("unpinning the netns of %s: %w", name, err)
		}
	}
	return nil
}

// load reopens every pin under dir (made if missing), and removes what a
// crash left half made. A pin it cannot read is left in place and
// reported in errs.
func (p *pinStore) load() (pins []pinned, errs []error) {
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return nil, []error{fmt.Errorf("netns pin directory: %w", err)}
	}
	entries, err := os.ReadDir(p.dir)
	if err != nil {
		return nil, []error{fmt.Errorf("netns pin directory: %w", err)}
	}
	for _, e := range entries {
		if e.IsDir() {
			continue // not a pin: the DHCP leases' directory (LeaseDir)
		}
		name, isRecord := strings.CutSuffix(e.Name(), ".json")
		if isRecord {
			if _, err := os.Lstat(p.pinPath(name)); errors.Is(err, fs.ErrNotExist) {
				_ = os.Remove(p.recordPath(name)) // a pin that never was
			}
			continue
		}
		pn, err := p.reopen(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if pn != nil {
			pins = append(pins, *pn)
		}
	}
	return pins, errs
}

// reopen opens name's pin; nil and no error for a file that is no
// namespace (its mount never was, or went), which is removed.
func (p *pinStore) reopen(name string) (*pinned, error) {
	f, err := os.OpenFile(p.pinPath(name), os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("reopening the netns pin of %s: %w", name, err)
	}
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil || st.Type != unix.NSFS_MAGIC {
		f.Close()
		return nil, p.unpin(name)
	}
	data, err := os.ReadFile(p.recordPath(name))
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("reopening the netns pin of %s: %w", name, err)
	}
	pn, err := parseRecord(name, data)
	if err != nil {
		f.Close()
		return nil, err
	}
	pn.f = f
	return pn, nil
}

func parseRecord(name string, data []byte) (*pinned, error) {
	var rec pinRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return nil, fmt.Errorf("netns pin record of %s: %w", name, err)
	}
	pn := &pinned{name: name, netnsPath: rec.NetnsPath, pd: &devicev1.PreparedDevice{}}
	if err := protojson.Unmarshal(rec.PreparedDevice, pn.pd); err != nil {
		return nil, fmt.Errorf("netns pin record of %s: preparedDevice: %w", name, err)
	}
	if len(rec.Config) > 0 {
		pn.cfg = &devicev1.DeviceConfig{}
		if err := protojson.Unmarshal(rec.Config, pn.cfg); err != nil {
			return nil, fmt.Errorf("netns pin record of %s: config: %w", name, err)
		}
	}
	if err := validatePrepared("preparedDevice", pn.pd); err != nil {
		return nil, fmt.Errorf("netns pin record of %s: %w", name, err)
	}
	return pn, nil
}
