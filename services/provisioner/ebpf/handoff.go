package ebpf

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
)

// XDP attach flags (linux/if_link.h).
const (
	xdpFlagsSKBMode = 1 << 1
	xdpFlagsDrvMode = 1 << 2
	xdpFlagsHWMode  = 1 << 3
)

// Handoff takes the eBPF programs a host attached to an interface off it
// before the interface goes to a pod, and puts them back when the claim is
// freed. The programs are pinned under Root/<device>/ meanwhile, so that
// they stay loaded whoever held them (a CNI agent that went away, a
// provisioner restart). Calls for one device must not overlap.
type Handoff struct {
	log  *slog.Logger
	root string
	own  *owner
}

// NewHandoff returns a Handoff that pins under
// <bpffs>/netdra-handoff/net-<host netns inode>,
// mounting a bpffs on bpffs first unless one is there. A nil log discards.
func NewHandoff(log *slog.Logger, bpffs string) (*Handoff, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	root, err := pinRoot(bpffs, "netdra-handoff")
	if err != nil {
		return nil, err
	}
	own, err := newOwner(bpffs)
	if err != nil {
		return nil, err
	}
	return &Handoff{log: log, root: root, own: own}, nil
}

// Root is the directory the devices' programs are pinned under.
func (h *Handoff) Root() string { return h.root }

// Take finds the eBPF programs on the interface ifName in the network
// namespace ns (netns.None(): the calling thread's) — tcx programs, tc
// bpf filters on the clsact or ingress qdisc, XDP — pins each under the
// device's directory and detaches it, and returns what it took, in the
// order Give puts them back. A tcx program held by another process's
// bpf_link is detached from it (BPF_LINK_DETACH); Give attaches it again
// without a link. Programs an earlier Take of the device pinned and no
// Give returned (its record lost with a Setup reply) are returned too, so a
// retried Setup loses nothing. netdra's own programs (owner: left by a
// provisioner killed before it took them off) are no host's: Take detaches
// them and neither pins nor returns them, and drops their pins an earlier
// Take made. On error, what this Take had detached is put back (netdra's
// own programs stay off).
func (h *Handoff) Take(ctx context.Context, device string, ns netns.NsHandle, ifName string) ([]*devicev1.EbpfProgram, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	dir := filepath.Join(h.root, device)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating pin directory: %w", err)
	}
	// Programs an earlier Take pinned, whose record was lost.
	earlier := h.fromPins(device, dir)
	var taken, removed []*devicev1.EbpfProgram
	err := inNetns(ns, func() error {
		t, err := newTaker(dir, ifName, h.own)
		if err != nil {
			return err
		}
		defer t.h.Close()
		err = errors.Join(t.tcx(), t.tc(), t.xdp())
		taken, removed = t.taken, t.removed
		return err
	})
	for _, p := range removed {
		h.log.Warn("removed an eBPF program of netdra's left on a host interface (a provisioner stopped before it took it off): it is not handed off", "device", device, "interface", ifName,
			"attachPoint", p.GetAttachPoint().String(), "program", p.GetName(), "id", p.GetProgramId())
	}
	if err != nil {
		if fails := h.Give(ctx, device, ns, ifName, taken); len(fails) > 0 {
			err = errors.Join(append([]error{err}, fails...)...)
		}
		return nil, fmt.Errorf("taking the eBPF programs off %s: %w", ifName, err)
	}
	for _, e := range earlier {
		if !slices.ContainsFunc(taken, func(p *devicev1.EbpfProgram) bool { return p.GetPin() == e.GetPin() }) {
			taken = append(taken, e)
		}
	}
	if len(taken) == 0 {
		_ = os.Remove(dir)
	}
	for _, p := range taken {
		h.log.Info("detached a host eBPF program for the hand-off", "device", device, "interface", ifName,
			"attachPoint", p.GetAttachPoint().String(), "program", p.GetName(), "id", p.GetProgramId())
	}
	return taken, nil
}

// taker does Take's work on a thread in the interface's namespace.
type taker struct {
	dir     string
	own     *owner
	h       *netlink.Handle
	link    netlink.Link
	taken   []*devicev1.EbpfProgram
	removed []*devicev1.EbpfProgram // netdra's own, detached and not taken
}

func newTaker(dir, ifName string, own *owner) (*taker, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink socket: %w", err)
	}
	l, err := h.LinkByName(ifName)
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("interface %s: %w", ifName, err)
	}
	return &taker{dir: dir, own: own, h: h, link: l}, nil
}

// keep pins the program rec names under the device's directory (the pin's
// name records where it was, see pinName) and detaches it with detach; rec
// gets the program's name (unless it has one) and the pin. A program of
// netdra's own is detached only, and counted in removed.
func (t *taker) keep(rec *devicev1.EbpfProgram, detach func(*ebpf.Program) error) error {
	id := rec.GetProgramId()
	prog, err := ebpf.NewProgramFromID(ebpf.ProgramID(id))
	if err != nil {
		return fmt.Errorf("opening program %d: %w", id, err)
	}
	defer prog.Close()
	if info, err := prog.Info(); err == nil {
		if rec.Name == "" {
			rec.Name = info.Name
		}
		// A program that cannot be told netdra's is handed off as the
		// host's: it is put back at Free.
		if ours, _ := t.own.ours(info); ours {
			if err := detach(prog); err != nil {
				return fmt.Errorf("detaching netdra's program %d (%s) left on the interface: %w", id, rec.Name, err)
			}
			t.removed = append(t.removed, rec)
			return nil
		}
	}
	rec.Pin = filepath.Join(t.dir, pinName(rec))
	if err := prog.Pin(rec.Pin); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("pinning program %d: %w", id, err)
	}
	if err := detach(prog); err != nil {
		_ = os.Remove(rec.Pin)
		return fmt.Errorf("detaching program %d (%s): %w", id, rec.Name, err)
	}
	t.taken = append(t.taken, rec)
	return nil
}

// pinName is the name of a taken program's pin: its order among the
// device's pins, where it was and how, so that a Take whose record was
// lost (a Setup reply that never arrived) can be rebuilt from the pins by
// the next Take.
func pinName(p *devicev1.EbpfProgram) string {
	da := 0
	if p.GetTcDirectAction() {
		da = 1
	}
	return fmt.Sprintf("%d_%d_%d_%d_%d_%d_%d", p.GetAttachPoint(), p.GetProgramId(), p.GetTcPriority(), p.GetTcHandle(), da, p.GetTcProtocol(), p.GetXdpFlags())
}

// fromPins rebuilds the records of the programs pinned in dir by an
// earlier Take, in the order Take took them (by attach point). Pins of
// netdra's own programs (an earlier build's Take took them for the
// host's) are removed and left out.
func (h *Handoff) fromPins(device, dir string) []*devicev1.EbpfProgram {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []*devicev1.EbpfProgram
	for _, e := range ents {
		var point, id, prio, handle, da, proto, xdp uint32
		if n, _ := fmt.Sscanf(e.Name(), "%d_%d_%d_%d_%d_%d_%d", &point, &id, &prio, &handle, &da, &proto, &xdp); n != 7 {
			continue
		}
		rec := &devicev1.EbpfProgram{AttachPoint: devicev1.EbpfAttachPoint(point), ProgramId: id, Pin: filepath.Join(dir, e.Name()),
			TcPriority: prio, TcHandle: handle, TcDirectAction: da == 1, TcProtocol: proto, XdpFlags: xdp}
		if h.pinnedOurs(rec.Pin) {
			h.log.Warn("dropped the pin of an eBPF program of netdra's that an earlier hand-off took for the host's", "device", device, "pin", rec.Pin)
			_ = os.Remove(rec.Pin)
			continue
		}
		if prog, err := ebpf.LoadPinnedProgram(rec.Pin, nil); err == nil {
			if info, err := prog.Info(); err == nil {
				rec.Name = info.Name
			}
			prog.Close()
		}
		out = append(out, rec)
	}
	slices.SortStableFunc(out, func(a, b *devicev1.EbpfProgram) int { return cmp.Compare(a.GetAttachPoint(), b.GetAttachPoint()) })
	return out
}

var tcxPoints = []struct {
	at    ebpf.AttachType
	point devicev1.EbpfAttachPoint
}{
	{ebpf.AttachTCXIngress, devicev1.EbpfAttachPoint_EBPF_ATTACH_POINT_TCX_INGRESS},
	{ebpf.AttachTCXEgress, devicev1.EbpfAttachPoint_EBPF_ATTACH_POINT_TCX_EGRESS},
}

func (t *taker) tcx() error {
	idx := t.link.Attrs().Index
	for _, p := range tcxPoints {
		res, err := link.QueryPrograms(link.QueryOptions{Target: idx, Attach: p.at})
		if errors.Is(err, ebpf.ErrNotSupported) || errors.Is(err, unix.EINVAL) {
			// No tcx on this kernel (before 6.6 the attach type is
			// unknown): nothing can be attached there.
			return nil
		}
		if err != nil {
			return fmt.Errorf("querying %s: %w", p.point, err)
		}
		for _, ap := range res.Programs {
			rec := &devicev1.EbpfProgram{AttachPoint: p.point, ProgramId: uint32(ap.ID)}
			err := t.keep(rec, func(prog *ebpf.Program) error {
				if id, ok := ap.LinkID(); ok {
					l, err := link.NewFromID(id)
					if err != nil {
						return err
					}
					defer l.Close()
					return l.Detach()
				}
				return link.RawDetachProgram(link.RawDetachProgramOptions{Target: idx, Program: prog, Attach: p.at})
			})
			if err != nil {
				return err
			}
		}
	}
	return nil
}

var tcParents = []struct {
	parent uint32
	point  devicev1.EbpfAttachPoint
}{
	{netlink.HANDLE_MIN_INGRESS, devicev1.EbpfAttachPoint_EBPF_ATTACH_POINT_TC_INGRESS},
	{netlink.HANDLE_MIN_EGRESS, devicev1.EbpfAttachPoint_EBPF_ATTACH_POINT_TC_EGRESS},
}

func (t *taker) tc() error {
	for _, p := range tcParents {
		filters, err := t.h.FilterList(t.link, p.parent)
		if err != nil {
			// No clsact or ingress qdisc: no filters.
			if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
				continue
			}
			return fmt.Errorf("listing %s filters: %w", p.point, err)
		}
		for _, f := range filters {
			bf, ok := f.(*netlink.BpfFilter)
			if !ok || bf.Id == 0 {
				continue
			}
			a := bf.Attrs()
			rec := &devicev1.EbpfProgram{AttachPoint: p.point, ProgramId: uint32(bf.Id), Name: bf.Name,
				TcPriority: uint32(a.Priority), TcHandle: a.Handle, TcDirectAction: bf.DirectAction, TcProtocol: uint32(a.Protocol)}
			if err := t.keep(rec, func(*ebpf.Program) error { return t.h.FilterDel(bf) }); err != nil {
				return err
			}
		}
	}
	return nil
}

func (t *taker) xdp() error {
	x := t.link.Attrs().Xdp
	if x == nil || !x.Attached || x.ProgId == 0 {
		return nil
	}
	var flags uint32
	switch x.AttachMode {
	case 1:
		flags = xdpFlagsDrvMode
	case 2:
		flags = xdpFlagsSKBMode
	case 3:
		flags = xdpFlagsHWMode
	}
	rec := &devicev1.EbpfProgram{AttachPoint: devicev1.EbpfAttachPoint_EBPF_ATTACH_POINT_XDP, ProgramId: x.ProgId, XdpFlags: flags}
	err := t.keep(rec, func(*ebpf.Program) error {
		err := netlink.LinkSetXdpFdWithFlags(t.link, -1, int(flags))
		if errors.Is(err, unix.EBUSY) {
			// Held by a bpf_link: detach that.
			return detachXDPLink(t.link.Attrs().Index)
		}
		return err
	})
	return err
}

// detachXDPLink detaches the XDP bpf_link on ifindex.
func detachXDPLink(ifindex int) error {
	it := new(link.Iterator)
	defer it.Close()
	for it.Next() {
		l := it.Take()
		info, err := l.Info()
		if err == nil && info.Type == link.XDPType {
			if x := info.XDP(); x != nil && int(x.Ifindex) == ifindex {
				err = l.Detach()
				l.Close()
				return err
			}
		}
		l.Close()
	}
	if err := it.Err(); err != nil {
		return err
	}
	return fmt.Errorf("no XDP link on ifindex %d", ifindex)
}

// Give attaches progs (what Take returned) to the interface ifName in the
// network namespace ns again, in order: tcx programs without a link (they
// stay until detached), tc filters with their priority, handle, protocol
// and mode (on a clsact qdisc, added when missing), XDP in its mode. Each
// program given back is unpinned. A program of netdra's own (owner: one
// an earlier build's Take took for the host's) is not given back, only
// unpinned. It returns one error for each program it could not give back
// (its pin gone after a reboot, the interface gone, the kernel refusing),
// and unpins those too: there is nothing more it can do.
func (h *Handoff) Give(ctx context.Context, device string, ns netns.NsHandle, ifName string, progs []*devicev1.EbpfProgram) []error {
	dir := filepath.Join(h.root, device)
	if len(progs) == 0 {
		_ = os.Remove(dir)
		return nil
	}
	var fails []error
	err := inNetns(ns, func() error {
		nh, err := netlink.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			return fmt.Errorf("netlink socket: %w", err)
		}
		defer nh.Close()
		l, err := nh.LinkByName(ifName)
		if err != nil {
			return fmt.Errorf("interface %s: %w", ifName, err)
		}
		for _, p := range progs {
			if pin := p.GetPin(); pin != "" && filepath.Dir(pin) != dir {
				fails = append(fails, fmt.Errorf("%s program %q (id %d): its pin %s is not in %s, where the hand-off keeps them", p.GetAttachPoint(), p.GetName(), p.GetProgramId(), pin, dir))
				continue
			}
			if h.pinnedOurs(p.GetPin()) {
				h.log.Warn("not given back: an eBPF program of netdra's that a hand-off took for the host's", "device", device, "interface", ifName,
					"attachPoint", p.GetAttachPoint().String(), "program", p.GetName(), "id", p.GetProgramId())
				continue
			}
			if err := give(nh, l, p); err != nil {
				fails = append(fails, fmt.Errorf("%s program %q (id %d): %w", p.GetAttachPoint(), p.GetName(), p.GetProgramId(), err))
			}
		}
		return nil
	})
	if err != nil {
		for _, p := range progs {
			fails = append(fails, fmt.Errorf("%s program %q (id %d): %w", p.GetAttachPoint(), p.GetName(), p.GetProgramId(), err))
		}
	}
	for _, p := range progs {
		if p.GetPin() != "" && filepath.Dir(p.GetPin()) == dir {
			_ = os.Remove(p.GetPin())
		}
	}
	_ = os.Remove(dir)
	for _, f := range fails {
		h.log.Warn("could not give a host eBPF program back", "device", device, "interface", ifName, "error", f)
	}
	return fails
}

// pinnedOurs reports whether the program pinned at pin is one of
// netdra's own (false when there is none, or it cannot be told).
func (h *Handoff) pinnedOurs(pin string) bool {
	if pin == "" {
		return false
	}
	prog, err := ebpf.LoadPinnedProgram(pin, nil)
	if err != nil {
		return false
	}
	defer prog.Close()
	info, err := prog.Info()
	if err != nil {
		return false
	}
	ours, _ := h.own.ours(info)
	return ours
}

func give(h *netlink.Handle, l netlink.Link, p *devicev1.EbpfProgram) error {
	if p.GetPin() == "" {
		return errors.New("it was not pinned")
	}
	prog, err := ebpf.LoadPinnedProgram(p.GetPin(), nil)
	if errors.Is(err, fs.ErrNotExist) && isOn(h, l, p) {
		return nil // given back by an earlier Free
	}
	if err != nil {
		return fmt.Errorf("opening its pin: %w", err)
	}
	defer prog.Close()
	idx := l.Attrs().Index
	switch p.GetAttachPoint() {
	case devicev1.EbpfAttachPoint_EBPF_ATTACH_POINT_TCX_INGRESS:
		return link.RawAttachProgram(link.RawAttachProgramOptions{Target: idx, Program: prog, Attach: ebpf.AttachTCXIngress, Anchor: link.Tail()})
	case devicev1.EbpfAttachPoint_EBPF_ATTACH_POINT_TCX_EGRESS:
		return link.RawAttachProgram(link.RawAttachProgramOptions{Target: idx, Program: prog, Attach: ebpf.AttachTCXEgress, Anchor: link.Tail()})
	case devicev1.EbpfAttachPoint_EBPF_ATTACH_POINT_TC_INGRESS, devicev1.EbpfAttachPoint_EBPF_ATTACH_POINT_TC_EGRESS:
		parent := uint32(netlink.HANDLE_MIN_INGRESS)
		if p.GetAttachPoint() == devicev1.EbpfAttachPoint_EBPF_ATTACH_POINT_TC_EGRESS {
			parent = netlink.HANDLE_MIN_EGRESS
		}
		q := &netlink.GenericQdisc{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: idx, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}, QdiscType: "clsact"}
		if err := h.QdiscAdd(q); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("adding a clsact qdisc: %w", err)
		}
		proto := uint16(p.GetTcProtocol())
		if proto == 0 {
			proto = unix.ETH_P_ALL
		}
		return h.FilterAdd(&netlink.BpfFilter{
			FilterAttrs:  netlink.FilterAttrs{LinkIndex: idx, Parent: parent, Priority: uint16(p.GetTcPriority()), Handle: p.GetTcHandle(), Protocol: proto},
			Fd:           prog.FD(),
			Name:         p.GetName(),
			DirectAction: p.GetTcDirectAction(),
		})
	case devicev1.EbpfAttachPoint_EBPF_ATTACH_POINT_XDP:
		return netlink.LinkSetXdpFdWithFlags(l, prog.FD(), int(p.GetXdpFlags()))
	}
	return fmt.Errorf("unknown attach point %v", p.GetAttachPoint())
}

// isOn reports whether p's program is attached to l at p's attach point.
func isOn(h *netlink.Handle, l netlink.Link, p *devicev1.EbpfProgram) bool {
	id := p.GetProgramId()
	switch p.GetAttachPoint() {
	case devicev1.EbpfAttachPoint_EBPF_ATTACH_POINT_TCX_INGRESS, devicev1.EbpfAttachPoint_EBPF_ATTACH_POINT_TCX_EGRESS:
		at := ebpf.AttachTCXIngress
		if p.GetAttachPoint() == devicev1.EbpfAttachPoint_EBPF_ATTACH_POINT_TCX_EGRESS {
			at = ebpf.AttachTCXEgress
		}
		res, err := link.QueryPrograms(link.QueryOptions{Target: l.Attrs().Index, Attach: at})
		if err != nil {
			return false
		}
		for _, ap := range res.Programs {
			if uint32(ap.ID) == id {
				return true
			}
		}
	case devicev1.EbpfAttachPoint_EBPF_ATTACH_POINT_TC_INGRESS, devicev1.EbpfAttachPoint_EBPF_ATTACH_POINT_TC_EGRESS:
		for _, t := range tcParents {
			if t.point != p.GetAttachPoint() {
				continue
			}
			filters, _ := h.FilterList(l, t.parent)
			for _, f := range filters {
				if bf, ok := f.(*netlink.BpfFilter); ok && uint32(bf.Id) == id {
					return true
				}
			}
		}
	case devicev1.EbpfAttachPoint_EBPF_ATTACH_POINT_XDP:
		x := l.Attrs().Xdp
		return x != nil && x.Attached && x.ProgId == id
	}
	return false
}
