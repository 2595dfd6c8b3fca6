package link

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// announce tells the pod's neighbours about l's addresses once they are up,
// as the SR-IOV CNI does: a gratuitous ARP for each IPv4 address and an
// unsolicited neighbour advertisement (override set) for each IPv6 one, so
// that peers and switches learn the device's (new) MAC at once instead of
// waiting for their caches to expire. The frames are built whole and sent
// on an AF_PACKET socket bound to l inside the pod namespace, so an IPv6
// address still tentative (DAD) can be announced too. A link without ARP
// (a dummy link) gets nothing.
func announce(pod *conn, l netlink.Link, addrs []*netlink.Addr) error {
	if len(addrs) == 0 {
		return nil
	}
	a := l.Attrs()
	if a.RawFlags&unix.IFF_NOARP != 0 || len(a.HardwareAddr) != 6 {
		return nil
	}
	fd, err := packetSocketAt(pod.ns)
	if err != nil {
		return fmt.Errorf("announcing the addresses of %s: %w", a.Name, err)
	}
	// Closing a packet socket waits for the kernel's synchronize_net (an
	// RCU grace period), after the frames are sent: not on the attach's
	// path.
	defer func() { go unix.Close(fd) }()
	for _, addr := range addrs {
		ip, ok := netip.AddrFromSlice(addr.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		frame, proto, dst := garp(a.HardwareAddr, ip), uint16(unix.ETH_P_ARP), broadcastMAC
		if ip.Is6() {
			frame, proto, dst = unsolicitedNA(a.HardwareAddr, ip), unix.ETH_P_IPV6, allNodesMAC
		}
		sa := &unix.SockaddrLinklayer{Ifindex: a.Index, Protocol: htons(proto), Halen: 6}
		copy(sa.Addr[:], dst)
		if err := unix.Sendto(fd, frame, 0, sa); err != nil {
			return fmt.Errorf("announcing %s on %s: %w", ip, a.Name, err)
		}
	}
	return nil
}

var (
	broadcastMAC = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	// The Ethernet multicast address of ff02::1, all nodes.
	allNodesMAC = net.HardwareAddr{0x33, 0x33, 0, 0, 0, 1}
	allNodes    = netip.MustParseAddr("ff02::1")
)

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// packetSocketAt opens a send-only AF_PACKET socket in ns. The calling
// goroutine's thread enters ns only while the socket is created; if it
// cannot get back, the thread stays locked and the runtime retires it.
func packetSocketAt(ns netns.NsHandle) (int, error) {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return -1, err
	}
	defer orig.Close()
	if err := netns.Set(ns); err != nil {
		runtime.UnlockOSThread()
		return -1, fmt.Errorf("entering the pod netns: %w", err)
	}
	fd, serr := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err := netns.Set(orig); err != nil {
		if serr == nil {
			unix.Close(fd)
		}
		return -1, fmt.Errorf("leaving the pod netns: %w", err) // thread stays locked
	}
	runtime.UnlockOSThread()
	if serr != nil {
		return -1, fmt.Errorf("packet socket: %w", serr)
	}
	return fd, nil
}

// garp is a gratuitous ARP request (RFC 5227 announcement: sender and
// target address both ip) from mac, broadcast.
func garp(mac net.HardwareAddr, ip netip.Addr) []byte {
	f := make([]byte, 0, 42)
	f = append(f, broadcastMAC...)
	f = append(f, mac...)
	f = binary.BigEndian.AppendUint16(f, unix.ETH_P_ARP)
	f = binary.BigEndian.AppendUint16(f, 1)      // hardware: Ethernet
	f = binary.BigEndian.AppendUint16(f, 0x0800) // protocol: IPv4
	f = append(f, 6, 4)
	f = binary.BigEndian.AppendUint16(f, 1) // request
	f = append(f, mac...)
	f = append(f, ip.AsSlice()...)
	f = append(f, make([]byte, 6)...)
	return append(f, ip.AsSlice()...)
}

// unsolicitedNA is an ICMPv6 neighbour advertisement of ip at mac, with the
// override flag and the target link-layer address option, from ip to all
// nodes (RFC 4861 7.2.6), hop limit 255.
func unsolicitedNA(mac net.HardwareAddr, ip netip.Addr) []byte {
	icmp := make([]byte, 0, 32)
	icmp = append(icmp, 136, 0, 0, 0)                      // type NA, code, checksum
	icmp = binary.BigEndian.AppendUint32(icmp, 0x20000000) // flags: override
	icmp = append(icmp, ip.AsSlice()...)
	icmp = append(icmp, 2, 1) // option: target link-layer address, 8 bytes
	icmp = append(icmp, mac...)
	binary.BigEndian.PutUint16(icmp[2:], icmpv6Checksum(ip, allNodes, icmp))

	f := make([]byte, 0, 14+40+len(icmp))
	f = append(f, allNodesMAC...)
	f = append(f, mac...)
	f = binary.BigEndian.AppendUint16(f, unix.ETH_P_IPV6)
	f = append(f, 0x60, 0, 0, 0) // version 6, no traffic class or flow label
	f = binary.BigEndian.AppendUint16(f, uint16(len(icmp)))
	f = append(f, unix.IPPROTO_ICMPV6, 255)
	f = append(f, ip.AsSlice()...)
	f = append(f, allNodes.AsSlice()...)
	return append(f, icmp...)
}

// icmpv6Checksum is the checksum of an ICMPv6 message with the IPv6
// pseudo-header (RFC 8200 8.1).
func icmpv6Checksum(src, dst netip.Addr, msg []byte) uint16 {
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(b[i])<<8 | uint32(b[i+1])
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	add(src.AsSlice())
	add(dst.AsSlice())
	add(binary.BigEndian.AppendUint32(nil, uint32(len(msg))))
	add([]byte{0, 0, 0, unix.IPPROTO_ICMPV6})
	add(msg)
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}
