// Package ebpftest moves raw Ethernet frames, tagged or not, through links
// in network namespaces, for the tests of netdra's eBPF programs: an
// AF_PACKET socket sends from inside a namespace and another receives with
// the VLAN tag the kernel keeps out of the frame (PACKET_AUXDATA).
package ebpftest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"runtime"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// EtherType is the local experimental EtherType the test frames carry.
const EtherType = 0x88b5

// Frame is a test frame as sent or received.
type Frame struct {
	Src net.HardwareAddr
	// Tagged frames carry TPID (0x8100, 0x88a8) and TCI.
	Tagged bool
	TPID   uint16
	TCI    uint16
	// Seq tells frames apart; Len is the frame's length on the wire (tag
	// included when it is in the frame).
	Seq byte
	Len int
}

// Bytes is f as sent: broadcast destination, f.Src, the tag when Tagged,
// EtherType and Seq, padded to 60 bytes.
func (f Frame) Bytes() []byte {
	b := make([]byte, 0, 64)
	b = append(b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
	b = append(b, f.Src...)
	if f.Tagged {
		b = binary.BigEndian.AppendUint16(b, f.TPID)
		b = binary.BigEndian.AppendUint16(b, f.TCI)
	}
	b = binary.BigEndian.AppendUint16(b, EtherType)
	b = append(b, f.Seq)
	for len(b) < 60 {
		b = append(b, 0)
	}
	return b
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// In runs fn on a locked thread inside the network namespace named name
// (/var/run/netns/<name>).
func In(name string, fn func() error) error {
	ns, err := netns.GetFromName(name)
	if err != nil {
		return err
	}
	defer ns.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		if err := netns.Set(ns); err != nil {
			errc <- err
			return
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			errc <- errors.Join(ferr, err) // the thread stays locked and is discarded
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// Send sends frames out of ifName in the namespace ns. It returns how many
// sends the kernel refused with ENOBUFS: a tc egress program dropped them.
func Send(ns, ifName string, frames ...Frame) (dropped int, err error) {
	err = In(ns, func() error {
		ifc, err := net.InterfaceByName(ifName)
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		to := &unix.SockaddrLinklayer{Ifindex: ifc.Index, Halen: 6, Addr: [8]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}
		for _, f := range frames {
			err := unix.Sendto(fd, f.Bytes(), 0, to)
			switch {
			case errors.Is(err, unix.ENOBUFS), errors.Is(err, unix.EPERM):
				dropped++
			case err != nil:
				return fmt.Errorf("sending frame %d: %w", f.Seq, err)
			}
		}
		return nil
	})
	return dropped, err
}

// Receiver receives the test frames arriving on one interface.
type Receiver struct {
	fd int
}

// Listen opens a Receiver on ifName in the namespace ns that sees every
// frame as the link receives it, before tc ingress: with the tag the frame
// arrived with. Close it.
func Listen(ns, ifName string) (*Receiver, error) {
	return listen(ns, ifName, unix.ETH_P_ALL)
}

// ListenDelivered opens a Receiver on ifName in the namespace ns that sees
// the test frames the stack delivers, after tc ingress: what a program in
// the pod receives. Close it.
func ListenDelivered(ns, ifName string) (*Receiver, error) {
	return listen(ns, ifName, EtherType)
}

func listen(ns, ifName string, proto uint16) (*Receiver, error) {
	var r *Receiver
	err := In(ns, func() error {
		ifc, err := net.InterfaceByName(ifName)
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(proto)))
		if err != nil {
			return err
		}
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(proto), Ifindex: ifc.Index}); err != nil {
			unix.Close(fd)
			return err
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_AUXDATA, 1); err != nil {
			unix.Close(fd)
			return err
		}
		r = &Receiver{fd: fd}
		return nil
	})
	return r, err
}

// Close closes the socket.
func (r *Receiver) Close() error { return unix.Close(r.fd) }

// Until receives test frames until one with Seq last arrives, and returns
// them all (last included). It gives up, with an error, after wait: that
// bounds a failing test, it measures nothing.
func (r *Receiver) Until(last byte, wait time.Duration) ([]Frame, error) {
	deadline := time.Now().Add(wait)
	var got []Frame
	buf := make([]byte, 2048)
	oob := make([]byte, 256)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return got, fmt.Errorf("frame %d did not arrive (got %d frames)", last, len(got))
		}
		tv := unix.NsecToTimeval(left.Nanoseconds())
		if err := unix.SetsockoptTimeval(r.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return got, err
		}
		n, oobn, _, from, err := unix.Recvmsg(r.fd, buf, oob, 0)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return got, err
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		f, ok := parse(buf[:n], oob[:oobn])
		if !ok {
			continue
		}
		got = append(got, f)
		if f.Seq == last {
			return got, nil
		}
	}
}

// parse reads a test frame and the tag the kernel reports beside it.
func parse(b, oob []byte) (Frame, bool) {
	if len(b) < 15 {
		return Frame{}, false
	}
	f := Frame{Src: net.HardwareAddr(append([]byte(nil), b[6:12]...)), Len: len(b)}
	et := binary.BigEndian.Uint16(b[12:14])
	rest := b[14:]
	if et == 0x8100 || et == 0x88a8 {
		if len(b) < 19 {
			return Frame{}, false
		}
		f.Tagged, f.TPID, f.TCI = true, et, binary.BigEndian.Uint16(b[14:16])
		et, rest = binary.BigEndian.Uint16(b[16:18]), b[18:]
	}
	if et != EtherType {
		return Frame{}, false
	}
	f.Seq = rest[0]
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return f, true
	}
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_PACKET || m.Header.Type != unix.PACKET_AUXDATA || len(m.Data) < 20 {
			continue
		}
		status := binary.NativeEndian.Uint32(m.Data[0:4])
		tci := binary.NativeEndian.Uint16(m.Data[16:18])
		tpid := binary.NativeEndian.Uint16(m.Data[18:20])
		if status&unix.TP_STATUS_VLAN_VALID != 0 && !f.Tagged {
			f.Tagged, f.TCI, f.TPID = true, tci, 0x8100
			if status&unix.TP_STATUS_VLAN_TPID_VALID != 0 {
				f.TPID = tpid
			}
			f.Len += 4
		}
	}
	return f, true
}
