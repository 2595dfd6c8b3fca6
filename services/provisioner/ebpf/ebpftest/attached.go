package ebpftest

import (
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Netdra reports whether a program's name is one of netdra's
// (netdra_ingress, netdra_egress): what the end-to-end tests look for on
// the node's interfaces.
func Netdra(name string) bool { return strings.HasPrefix(name, "netdra_") }

// Attached lists the programs attached to the interfaces of the network
// namespace ns (a name under /var/run/netns; "" is the caller's), with
// tcx or as tc filters, whose name match accepts, each as "<interface>
// <attach point> <name> (id <id>)". It is for the end-to-end tests, which
// check that netdra leaves nothing on a device.
func Attached(ns string, match func(name string) bool) ([]string, error) {
	var out []string
	list := func() error {
		ifcs, err := net.Interfaces()
		if err != nil {
			return err
		}
		var errs []error
		for _, ifc := range ifcs {
			got, err := attachedTo(ifc, match)
			out = append(out, got...)
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}
	var err error
	if ns == "" {
		err = list()
	} else {
		err = In(ns, list)
	}
	return out, err
}

func attachedTo(ifc net.Interface, match func(string) bool) ([]string, error) {
	var out []string
	add := func(point string, id ebpf.ProgramID) {
		prog, err := ebpf.NewProgramFromID(id)
		if err != nil {
			return // gone meanwhile
		}
		defer prog.Close()
		if info, err := prog.Info(); err == nil && match(info.Name) {
			out = append(out, fmt.Sprintf("%s %s %s (id %d)", ifc.Name, point, info.Name, id))
		}
	}
	for _, q := range []struct {
		at   ebpf.AttachType
		name string
	}{{ebpf.AttachTCXIngress, "tcx ingress"}, {ebpf.AttachTCXEgress, "tcx egress"}} {
		res, err := link.QueryPrograms(link.QueryOptions{Target: ifc.Index, Attach: q.at})
		if errors.Is(err, unix.ENODEV) {
			return out, nil // gone meanwhile
		}
		if err != nil {
			return out, fmt.Errorf("%s: querying %s: %w", ifc.Name, q.name, err)
		}
		for _, p := range res.Programs {
			add(q.name, p.ID)
		}
	}
	l, err := netlink.LinkByIndex(ifc.Index)
	if err != nil {
		return out, nil // gone meanwhile
	}
	for _, q := range []struct {
		parent uint32
		name   string
	}{{netlink.HANDLE_MIN_INGRESS, "tc ingress"}, {netlink.HANDLE_MIN_EGRESS, "tc egress"}} {
		filters, err := netlink.FilterList(l, q.parent)
		if err != nil {
			continue // no clsact or ingress qdisc
		}
		for _, f := range filters {
			if bf, ok := f.(*netlink.BpfFilter); ok && bf.Id != 0 {
				add(q.name, ebpf.ProgramID(bf.Id))
			}
		}
	}
	return out, nil
}
