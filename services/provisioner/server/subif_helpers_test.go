package server

// Helpers of the sub-interface tests on the host (subif_netns_test.go) and
// in the kernel rig (subif_kernel_test.go).

import (
	"net"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/services/provisioner/link"
	"github.com/netdra/netdra/services/provisioner/netnstest"
)

func subifConfig(parents ...*provisionerv1.SubifParent) *provisionerv1.ConfigureRequest {
	return &provisionerv1.ConfigureRequest{Managers: &provisionerv1.ManagerConfigs{
		Subif: &provisionerv1.SubifConfig{Enabled: true, Parents: parents}}}
}

// checkSubLink checks the sub-interface name that h's namespace holds:
// its kind, its parent (the link with ifindex parent, in another
// namespace), marked, up, with mtu and, when mac is set, that MAC.
func checkSubLink(t *testing.T, h *netlink.Handle, name, kind string, parent, mtu int, mac string) netlink.Link {
	t.Helper()
	l, err := h.LinkByName(name)
	if err != nil {
		t.Fatalf("%s not in the pod: %v", name, err)
	}
	a := l.Attrs()
	if l.Type() != kind || a.ParentIndex != parent || a.NetNsID < 0 || a.Alias != link.SubAlias || a.Flags&net.FlagUp == 0 || a.MTU != mtu {
		t.Errorf("%s in the pod: type %s parent %d (netnsid %d) alias %q flags %v mtu %d; want %s on %d in another netns, marked, up, mtu %d",
			name, l.Type(), a.ParentIndex, a.NetNsID, a.Alias, a.Flags, a.MTU, kind, parent, mtu)
	}
	if mac != "" && a.HardwareAddr.String() != mac {
		t.Errorf("%s in the pod: MAC %s, want %s", name, a.HardwareAddr, mac)
	}
	return l
}

// udpRoundTrip sends a datagram from pod a to dst in pod b and waits for
// it: traffic between two sub-interfaces of one parent.
func udpRoundTrip(t *testing.T, a, b, dst string) {
	t.Helper()
	listen := func(path, addr string) net.PacketConn {
		var c net.PacketConn
		var err error
		netnstest.Do(t, path, func() { c, err = net.ListenPacket("udp4", addr) })
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	rx, tx := listen(b, dst+":7777"), listen(a, ":0")
	buf := make([]byte, 64)
	for try := 0; ; try++ {
		if _, err := tx.WriteTo([]byte("netdra"), &net.UDPAddr{IP: net.ParseIP(dst), Port: 7777}); err != nil {
			t.Fatal(err)
		}
		_ = rx.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		n, _, err := rx.ReadFrom(buf)
		if err == nil && string(buf[:n]) == "netdra" {
			return
		}
		if try == 10 {
			t.Fatalf("no datagram from %s to %s in %s: %v", a, dst, b, err)
		}
	}
}
