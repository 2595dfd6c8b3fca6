package ebpf

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Stray is a program of netdra's that RemoveStrays took off an interface.
type Stray struct {
	Interface   string
	AttachPoint string // "tcx ingress", "tcx egress", "tc ingress", "tc egress"
	Name        string
	ID          ebpf.ProgramID
}

// RemoveStrays takes off every interface of the network namespace at
// netnsPath the programs of netdra's (see owner) that no link holds: tcx
// programs attached without a link, and tc filters. netdra attaches its own
// with links only, so such a program was put there by something else than
// Attach (an earlier build's hand-off gave netdra's programs back as the
// host's) and nothing would ever take it off. A program a link holds stays:
// a pinned link is a device's (Remove takes it off), an unpinned one is
// held by a live process. It returns what it took off, and an error for
// what it could not look at or take off.
func (p *Programs) RemoveStrays(ctx context.Context, netnsPath string) ([]Stray, error) {
	ns, err := netns.GetFromPath(netnsPath)
	if err != nil {
		return nil, fmt.Errorf("opening netns %s: %w", netnsPath, err)
	}
	defer ns.Close()
	var strays []Stray
	err = inNetns(ns, func() error {
		h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			return fmt.Errorf("netlink socket: %w", err)
		}
		defer h.Close()
		links, err := h.LinkList()
		if err != nil {
			return fmt.Errorf("listing the interfaces: %w", err)
		}
		var errs []error
		for _, l := range links {
			if err := ctx.Err(); err != nil {
				return err
			}
			s, err := p.strays(h, l)
			strays = append(strays, s...)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", l.Attrs().Name, err))
			}
		}
		return errors.Join(errs...)
	})
	for _, s := range strays {
		p.log.Warn("removed an eBPF program of netdra's that no device held", "interface", s.Interface,
			"attachPoint", s.AttachPoint, "program", s.Name, "id", s.ID)
	}
	if err != nil {
		return strays, fmt.Errorf("removing netdra's stray eBPF programs in %s: %w", netnsPath, err)
	}
	return strays, nil
}

// strays is RemoveStrays for one interface, on a thread in its namespace.
func (p *Programs) strays(h *netlink.Handle, l netlink.Link) ([]Stray, error) {
	name, idx := l.Attrs().Name, l.Attrs().Index
	var out []Stray
	var errs []error
	for _, at := range []struct {
		at   ebpf.AttachType
		name string
	}{{ebpf.AttachTCXIngress, "tcx ingress"}, {ebpf.AttachTCXEgress, "tcx egress"}} {
		res, err := link.QueryPrograms(link.QueryOptions{Target: idx, Attach: at.at})
		if errors.Is(err, ebpf.ErrNotSupported) || errors.Is(err, unix.EINVAL) {
			break // no tcx on this kernel
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("querying %s: %w", at.name, err))
			continue
		}
		for _, ap := range res.Programs {
			if _, held := ap.LinkID(); held {
				continue
			}
			s, err := p.removeIfOurs(ap.ID, func(prog *ebpf.Program) error {
				return link.RawDetachProgram(link.RawDetachProgramOptions{Target: idx, Program: prog, Attach: at.at})
			})
			if s != nil {
				s.Interface, s.AttachPoint = name, at.name
				out = append(out, *s)
			}
			errs = append(errs, err)
		}
	}
	for _, tp := range []struct {
		parent uint32
		name   string
	}{{netlink.HANDLE_MIN_INGRESS, "tc ingress"}, {netlink.HANDLE_MIN_EGRESS, "tc egress"}} {
		filters, err := h.FilterList(l, tp.parent)
		if err != nil {
			continue // no clsact or ingress qdisc: no filters
		}
		for _, f := range filters {
			bf, ok := f.(*netlink.BpfFilter)
			if !ok || bf.Id == 0 {
				continue
			}
			s, err := p.removeIfOurs(ebpf.ProgramID(bf.Id), func(*ebpf.Program) error { return h.FilterDel(bf) })
			if s != nil {
				s.Interface, s.AttachPoint = name, tp.name
				out = append(out, *s)
			}
			errs = append(errs, err)
		}
	}
	return out, errors.Join(errs...)
}

// removeIfOurs detaches the program id with detach when it is netdra's,
// and then returns it (its interface and attach point for the caller to
// fill).
func (p *Programs) removeIfOurs(id ebpf.ProgramID, detach func(*ebpf.Program) error) (*Stray, error) {
	prog, err := ebpf.NewProgramFromID(id)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil // gone meanwhile
	}
	if err != nil {
		return nil, fmt.Errorf("opening program %d: %w", id, err)
	}
	defer prog.Close()
	info, err := prog.Info()
	if err != nil {
		return nil, fmt.Errorf("program %d: %w", id, err)
	}
	ours, err := p.own.ours(info)
	if err != nil || !ours {
		return nil, err
	}
	if err := detach(prog); err != nil {
		return nil, fmt.Errorf("detaching program %d (%s): %w", id, info.Name, err)
	}
	return &Stray{Name: info.Name, ID: id}, nil
}

// Tidy removes the directories under Root that hold nothing, then Root
// and its parent (<bpffs>/netdra) when they hold nothing either. No call
// may run meanwhile: an Attach makes its directory before it pins in it.
func (p *Programs) Tidy() error { return tidy(p.root) }

// Tidy removes the empty device directories under Root, then Root and
// its parent (<bpffs>/netdra-handoff) when they hold nothing either. No
// call may run meanwhile: a Take makes its directory before it pins in it.
func (h *Handoff) Tidy() error { return tidy(h.root) }

// tidy removes the empty directories right under root, then root and its
// parent if they are empty.
func tidy(root string) error {
	ents, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("listing %s: %w", root, err)
	}
	for _, e := range ents {
		if e.IsDir() {
			removeIfEmpty(filepath.Join(root, e.Name()))
		}
	}
	removeIfEmpty(root)
	removeIfEmpty(filepath.Dir(root))
	return nil
}

// removeIfEmpty removes dir if it is an empty directory (rmdir refuses
// any other).
func removeIfEmpty(dir string) { _ = unix.Rmdir(dir) }
