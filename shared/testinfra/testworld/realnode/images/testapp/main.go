// Command testapp is the real node's test container: it prints what the
// container itself sees of its network — each interface with its flags,
// MTU, MAC and addresses, the IPv4 and IPv6 routes — like `ip addr` and
// `ip route`, then again every DUMP_INTERVAL (default 30s). With PING set
// to a comma-separated list of addresses it also sends ICMP echo requests
// to each and prints "ping ADDR ok" or "ping ADDR failed: ...". It exits on
// SIGTERM. Tests read its output from the kubelet's container log.
// "testapp devices", run in the container (exec), prints what the
// container got through CDI: each device node under /dev/vfio (kind and
// major:minor), each PCIDEVICE_* variable, and the device metadata files
// under /var/run/kubernetes.io/dra-device-attributes.
// "testapp net IFNAME [SYSCTL...]", run in the container (exec), prints
// what the container sees around one interface, like `ip` would (printNet
// says how).
//
// Each dump starts with a line "testapp dump N netns=net:[INODE]" and ends
// with "testapp end N", so a reader can take the last complete one.
package main

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "ping" {
		os.Exit(pingAll(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "devices" {
		printDevices()
		return
	}
	if len(os.Args) > 2 && os.Args[1] == "net" {
		os.Exit(printNet(os.Args[2], os.Args[3:]))
	}
	interval := 30 * time.Second
	if d, err := time.ParseDuration(os.Getenv("DUMP_INTERVAL")); err == nil && d > 0 {
		interval = d
	}
	var targets []string
	if p := os.Getenv("PING"); p != "" {
		targets = strings.Split(p, ",")
	}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	t := time.NewTicker(interval)
	for n := 1; ; n++ {
		dump(n, targets)
		select {
		case <-ch:
			fmt.Println("testapp: signal, exiting")
			return
		case <-t.C:
		}
	}
}

func dump(n int, targets []string) {
	ns, _ := os.Readlink("/proc/self/ns/net")
	fmt.Printf("testapp dump %d netns=%s\n", n, ns)
	ifs, err := net.Interfaces()
	if err != nil {
		fmt.Println("interfaces:", err)
	}
	for _, i := range ifs {
		fmt.Printf("%d: %s: <%s> mtu %d hw %s\n", i.Index, i.Name, i.Flags, i.MTU, i.HardwareAddr)
		addrs, _ := i.Addrs()
		for _, a := range addrs {
			fmt.Printf("    inet %s\n", a)
		}
	}
	routes4()
	routes6()
	for _, a := range targets {
		if err := ping(strings.TrimSpace(a)); err != nil {
			fmt.Printf("ping %s failed: %v\n", a, err)
		} else {
			fmt.Printf("ping %s ok\n", a)
		}
	}
	fmt.Printf("testapp end %d\n", n)
}

// pingAll pings each address once; 1 when one did not answer.
func pingAll(addrs []string) int {
	rc := 0
	for _, a := range addrs {
		if err := ping(a); err != nil {
			fmt.Printf("ping %s failed: %v\n", a, err)
			rc = 1
		} else {
			fmt.Printf("ping %s ok\n", a)
		}
	}
	return rc
}

// routes4 prints /proc/net/route as "route DST/LEN via GW dev IF".
func routes4() {
	f, err := os.Open("/proc/net/route")
	if err != nil {
		return
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	s.Scan() // header
	for s.Scan() {
		f := strings.Fields(s.Text())
		if len(f) < 8 {
			continue
		}
		dst, gw, mask := hexIP4(f[1]), hexIP4(f[2]), hexIP4(f[7])
		ones, _ := net.IPMask(mask.To4()).Size()
		line := fmt.Sprintf("route %s/%d", dst, ones)
		if !gw.Equal(net.IPv4zero) {
			line += " via " + gw.String()
		}
		fmt.Println(line + " dev " + f[0])
	}
}

// hexIP4 reads /proc/net/route's little-endian hex address.
func hexIP4(h string) net.IP {
	v, err := strconv.ParseUint(h, 16, 32)
	if err != nil {
		return net.IPv4zero
	}
	return net.IPv4(byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
}

// routes6 prints /proc/net/ipv6_route the same way (local and multicast
// routes of the kernel's own tables left out).
func routes6() {
	f, err := os.Open("/proc/net/ipv6_route")
	if err != nil {
		return
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		f := strings.Fields(s.Text())
		if len(f) < 10 || f[9] == "lo" {
			continue
		}
		dst, err1 := hex.DecodeString(f[0])
		gw, err2 := hex.DecodeString(f[4])
		plen, err3 := strconv.ParseUint(f[1], 16, 8)
		if err1 != nil || err2 != nil || err3 != nil || net.IP(dst).IsMulticast() {
			continue
		}
		line := fmt.Sprintf("route %s/%d", net.IP(dst), plen)
		if !net.IP(gw).IsUnspecified() {
			line += " via " + net.IP(gw).String()
		}
		fmt.Println(line + " dev " + f[9])
	}
}

// ping sends one ICMP echo request and waits a second for the reply.
func ping(addr string) error {
	ip := net.ParseIP(addr)
	if ip == nil {
		return fmt.Errorf("not an address")
	}
	network, proto, typ, reply := "ip4:icmp", 1, icmp.Type(ipv4.ICMPTypeEcho), icmp.Type(ipv4.ICMPTypeEchoReply)
	if ip.To4() == nil {
		network, proto, typ, reply = "ip6:ipv6-icmp", 58, ipv6.ICMPTypeEchoRequest, ipv6.ICMPTypeEchoReply
	}
	c, err := icmp.ListenPacket(network, "")
	if err != nil {
		return err
	}
	defer c.Close()
	msg := icmp.Message{Type: typ, Body: &icmp.Echo{ID: os.Getpid() & 0xffff, Seq: 1, Data: []byte("netdra")}}
	b, err := msg.Marshal(nil)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(b, &net.IPAddr{IP: ip}); err != nil {
		return err
	}
	buf := make([]byte, 1500)
	deadline := time.Now().Add(time.Second)
	for {
		_ = c.SetReadDeadline(deadline)
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			return err
		}
		m, err := icmp.ParseMessage(proto, buf[:n])
		if err == nil && m.Type == reply && from.String() == ip.String() {
			return nil
		}
	}
}

// printDevices prints the container's vfio device nodes, PCIDEVICE_*
// variables and device metadata files, one a line.
func printDevices() {
	entries, _ := os.ReadDir("/dev/vfio")
	for _, e := range entries {
		var st syscall.Stat_t
		p := "/dev/vfio/" + e.Name()
		if err := syscall.Stat(p, &st); err != nil {
			fmt.Printf("node %s: %v\n", p, err)
			continue
		}
		kind := "other"
		if st.Mode&syscall.S_IFMT == syscall.S_IFCHR {
			kind = "char"
		}
		fmt.Printf("node %s %s %d:%d\n", p, kind, unix.Major(st.Rdev), unix.Minor(st.Rdev))
	}
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PCIDEVICE_") {
			fmt.Printf("env %s\n", kv)
		}
	}
	_ = filepath.WalkDir("/var/run/kubernetes.io/dra-device-attributes", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			data, _ := os.ReadFile(p)
			fmt.Printf("metadata %s %s\n", p, strings.Join(strings.Fields(string(data)), " "))
		}
		return nil
	})
}
