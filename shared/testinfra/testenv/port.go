package testenv

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// lowestPort is the lowest port PortOn chooses: below it lie the well-known
// and registered services a machine may run.
const lowestPort = 10000

// PortOn returns a TCP port that nothing listens on now at any of hosts
// (IP addresses; none means 127.0.0.1), for a process the caller starts to
// listen on. It chooses at random below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range), where no process's outgoing connection
// can take the port before the listener binds it: a port from that range,
// as a listen on port 0 gives, can be taken that way, or handed to another
// process that asks for port 0 in between. Two callers choosing at the same
// moment collide only as often as two random picks in that span do. When
// the ephemeral range starts too low to leave a span below it, PortOn falls
// back to a port the kernel assigns.
func PortOn(hosts ...string) (int, error) {
	if len(hosts) == 0 {
		hosts = []string{"127.0.0.1"}
	}
	top := ephemeralLow()
	if top-lowestPort < 1000 {
		l, err := net.Listen("tcp", net.JoinHostPort(hosts[0], "0"))
		if err != nil {
			return 0, err
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port, nil
	}
	for range 200 {
		p := lowestPort + rand.IntN(top-lowestPort)
		if free(p, hosts) {
			return p, nil
		}
	}
	return 0, fmt.Errorf("no free port in [%d, %d) on %v after 200 tries", lowestPort, top, hosts)
}

// free reports whether port p can be bound now at every host.
func free(p int, hosts []string) bool {
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for _, h := range hosts {
		l, err := net.Listen("tcp", net.JoinHostPort(h, strconv.Itoa(p)))
		if err != nil {
			return false
		}
		held = append(held, l)
	}
	return true
}

// ephemeralLow is the first port of the kernel's ephemeral range, or
// Linux's default when it cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				return n
			}
		}
	}
	return 32768
}
