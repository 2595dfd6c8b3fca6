package ebpf

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netns"
)

// Pin names under a device's directory.
const (
	pinIngress  = "ingress"
	pinEgress   = "egress"
	pinStats    = "stats"
	pinPolicies = "policies"
)

// Programs attaches netdra's programs to devices and keeps them pinned
// under Root, one directory per device name. Its methods are safe for
// concurrent use on different devices; calls for one device must not
// overlap (the provisioner serializes them).
//
// The object file is parsed once, and a device's programs, once loaded
// (verified by the kernel), are kept loaded until Remove, so that a device
// attached again (the next pod) costs only the two tcx attachments.
type Programs struct {
	log  *slog.Logger
	root string
	spec *ebpf.CollectionSpec // parsed once; copied for each load
	own  *owner

	mu     sync.Mutex
	loaded map[string]*netdraObjects // by device, until Remove
}

// DefaultBPFFS is where the provisioner mounts its bpffs by default.
const DefaultBPFFS = "/sys/fs/bpf"

// New returns Programs that pin under <bpffs>/netdra/net-<host netns inode>, mounting a bpffs on
// bpffs first unless one is there. A nil log discards.
func New(log *slog.Logger, bpffs string) (*Programs, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	root, err := pinRoot(bpffs, "netdra")
	if err != nil {
		return nil, err
	}
	spec, err := loadNetdra()
	if err != nil {
		return nil, fmt.Errorf("parsing the eBPF object: %w", err)
	}
	for _, m := range spec.Maps {
		m.Pinning = ebpf.PinByName
	}
	own, err := newOwner(bpffs)
	if err != nil {
		return nil, err
	}
	return &Programs{log: log, root: root, spec: spec, own: own, loaded: map[string]*netdraObjects{}}, nil
}

// Close releases the programs and maps this process holds loaded. What is
// pinned stays: the devices keep their programs and counters. Programs
// must not be used afterwards.
func (p *Programs) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for device, objs := range p.loaded {
		objs.Close()
		delete(p.loaded, device)
	}
}

// Root is the directory the device directories are pinned under.
func (p *Programs) Root() string { return p.root }

func (p *Programs) dir(device string) string { return filepath.Join(p.root, device) }

// Attach puts netdra's programs on the interface ifName in the network
// namespace at netnsPath (the pod's) with policy pol, and pins them under
// the device's directory. It is idempotent: when the device's programs are
// attached already, only the policy is updated, and the counters go on.
// On error nothing of the attach is left (the counters of an earlier
// attach stay until Remove).
func (p *Programs) Attach(ctx context.Context, device, netnsPath, ifName string, pol Policy) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	dir := p.dir(device)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating pin directory: %w", err)
	}
	if ok, err := p.attached(dir); err != nil || ok {
		if err == nil {
			err = p.setPolicy(dir, pol)
		}
		return err
	}
	// A half-done earlier attach: start again.
	if err := p.detach(dir); err != nil {
		return err
	}
	ns, err := netns.GetFromPath(netnsPath)
	if err != nil {
		return fmt.Errorf("opening netns %s: %w", netnsPath, err)
	}
	defer ns.Close()

	objs, err := p.programs(device, dir, pol)
	if err != nil {
		return err
	}
	err = inNetns(ns, func() error {
		idx, err := ifIndex(ifName)
		if err != nil {
			return fmt.Errorf("interface %s in %s: %w", ifName, netnsPath, err)
		}
		// Each tcx attachment waits for an RCU grace period: the two
		// wait together.
		return bothAtOnce(
			func() error {
				return attachTCX(dir, pinIngress, idx, objs.NetdraIngress, ebpf.AttachTCXIngress)
			},
			func() error {
				return inNetns(ns, func() error {
					return attachTCX(dir, pinEgress, idx, objs.NetdraEgress, ebpf.AttachTCXEgress)
				})
			})
	})
	if err != nil {
		p.unload(device)
		if derr := p.detach(dir); derr != nil {
			err = errors.Join(err, derr)
		}
		return fmt.Errorf("attaching eBPF programs to %s: %w", ifName, err)
	}
	p.log.Debug("attached eBPF programs", "device", device, "interface", ifName, "netns", netnsPath,
		"spoofChk", pol.SpoofChk, "vlan", pol.VLAN)
	return nil
}

// programs returns the device's programs with the policy set: the ones
// loaded at an earlier attach, or loaded now with their maps pinned in dir
// (reused when they are pinned already) and kept until Remove.
func (p *Programs) programs(device, dir string, pol Policy) (*netdraObjects, error) {
	p.mu.Lock()
	objs := p.loaded[device]
	p.mu.Unlock()
	if objs == nil {
		objs = &netdraObjects{}
		if err := p.spec.Copy().LoadAndAssign(objs, &ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: dir}}); err != nil {
			return nil, fmt.Errorf("loading eBPF programs: %w", err)
		}
		p.mu.Lock()
		p.loaded[device] = objs
		p.mu.Unlock()
	}
	v := pol.value()
	if err := objs.Policies.Put(uint32(0), &v); err != nil {
		p.unload(device)
		return nil, fmt.Errorf("setting the policy: %w", err)
	}
	return objs, nil
}

// unload closes the device's loaded programs and maps, if any (their pins
// are not touched).
func (p *Programs) unload(device string) {
	p.mu.Lock()
	objs := p.loaded[device]
	delete(p.loaded, device)
	p.mu.Unlock()
	if objs != nil {
		objs.Close()
	}
}

func attachTCX(dir, name string, ifindex int, prog *ebpf.Program, at ebpf.AttachType) error {
	l, err := link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: prog, Attach: at})
	if err != nil {
		return fmt.Errorf("tcx %s: %w", name, err)
	}
	defer l.Close()
	if err := l.Pin(filepath.Join(dir, name)); err != nil {
		return errors.Join(fmt.Errorf("pinning the %s link: %w", name, err), l.Detach())
	}
	return nil
}

// attached reports whether both links are pinned in dir and still attached.
func (p *Programs) attached(dir string) (bool, error) {
	for _, name := range []string{pinIngress, pinEgress} {
		l, err := link.LoadPinnedLink(filepath.Join(dir, name), nil)
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("opening pinned link %s: %w", name, err)
		}
		info, err := l.Info()
		l.Close()
		if err != nil {
			return false, fmt.Errorf("pinned link %s: %w", name, err)
		}
		if tcx := info.TCX(); tcx == nil || tcx.Ifindex == 0 {
			return false, nil // detached: its device went away
		}
	}
	return true, nil
}

func (p *Programs) setPolicy(dir string, pol Policy) error {
	m, err := ebpf.LoadPinnedMap(filepath.Join(dir, pinPolicies), nil)
	if err != nil {
		return fmt.Errorf("opening the policy map: %w", err)
	}
	defer m.Close()
	v := pol.value()
	if err := m.Put(uint32(0), &v); err != nil {
		return fmt.Errorf("setting the policy: %w", err)
	}
	return nil
}

// detach detaches and unpins the links pinned in dir, if any, both at
// once (each detach waits for an RCU grace period).
func (p *Programs) detach(dir string) error {
	return bothAtOnce(func() error { return detachPinned(dir, pinIngress) }, func() error { return detachPinned(dir, pinEgress) })
}

// detachPinned detaches and unpins the link pinned in dir as name, if any.
func detachPinned(dir, name string) error {
	l, err := link.LoadPinnedLink(filepath.Join(dir, name), nil)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("opening pinned link %s: %w", name, err)
	}
	defer l.Close()
	var errs []error
	// BPF_LINK_DETACH takes the program off even if another process still
	// holds the link; a link whose device is gone is detached already.
	if err := l.Detach(); err != nil && !errors.Is(err, ebpf.ErrNotSupported) {
		errs = append(errs, fmt.Errorf("detaching link %s: %w", name, err))
	}
	if err := l.Unpin(); err != nil {
		errs = append(errs, fmt.Errorf("unpinning link %s: %w", name, err))
	}
	return errors.Join(errs...)
}

// bothAtOnce runs f and g at once and joins their errors.
func bothAtOnce(f, g func() error) error {
	errc := make(chan error, 1)
	go func() { errc <- g() }()
	err := f()
	return errors.Join(err, <-errc)
}

// Detach takes the device's programs off its interface, wherever the
// interface is (the pinned links know it), and unpins the links. The
// counters stay until Remove. Idempotent: a device with nothing attached
// is success.
func (p *Programs) Detach(device string) error {
	if err := p.detach(p.dir(device)); err != nil {
		return fmt.Errorf("detaching the eBPF programs of %s: %w", device, err)
	}
	return nil
}

// Remove detaches the device's programs and removes everything netdra
// pinned for it. Idempotent.
func (p *Programs) Remove(device string) error {
	dir := p.dir(device)
	if err := p.Detach(device); err != nil {
		return err
	}
	p.unload(device)
	for _, name := range []string{pinStats, pinPolicies} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("unpinning %s of %s: %w", name, device, err)
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing the pin directory of %s: %w", device, err)
	}
	return nil
}

// Counters is what the programs on one device counted.
type Counters struct {
	RxPackets, RxBytes uint64
	TxPackets, TxBytes uint64
	// Dropped by the spoof check (egress) and by the software VLAN
	// (ingress: another tag or none).
	SpoofDropPackets, SpoofDropBytes uint64
	VlanDropPackets, VlanDropBytes   uint64
}

// Counters reads the device's counters, summed over the CPUs. A device
// without pinned counters is ErrNotAttached.
func (p *Programs) Counters(device string) (Counters, error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(p.dir(device), pinStats), nil)
	if errors.Is(err, fs.ErrNotExist) {
		return Counters{}, fmt.Errorf("%s: %w", device, ErrNotAttached)
	}
	if err != nil {
		return Counters{}, fmt.Errorf("opening the counters of %s: %w", device, err)
	}
	defer m.Close()
	var sums [4]netdraStatValue
	for i := range sums {
		var per []netdraStatValue
		if err := m.Lookup(uint32(i), &per); err != nil {
			return Counters{}, fmt.Errorf("reading the counters of %s: %w", device, err)
		}
		for _, v := range per {
			sums[i].Packets += v.Packets
			sums[i].Bytes += v.Bytes
		}
	}
	return Counters{
		RxPackets: sums[0].Packets, RxBytes: sums[0].Bytes,
		TxPackets: sums[1].Packets, TxBytes: sums[1].Bytes,
		SpoofDropPackets: sums[2].Packets, SpoofDropBytes: sums[2].Bytes,
		VlanDropPackets: sums[3].Packets, VlanDropBytes: sums[3].Bytes,
	}, nil
}

// Devices lists the devices with something pinned, for the counters RPC
// and for finding what a restart left.
func (p *Programs) Devices() ([]string, error) {
	ents, err := os.ReadDir(p.root)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", p.root, err)
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out, nil
}
