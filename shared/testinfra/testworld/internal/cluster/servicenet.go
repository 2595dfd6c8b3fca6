package cluster

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"sync"
)

// serviceNet is the control plane's Service network: a /28 of
// 172.16.0.0/12 chosen by the apiserver's port, so that control planes
// running side by side on one host (each on its own port) never share a
// ClusterIP. The kubernetes Service gets the first address, as in every
// cluster.
type serviceNet struct {
	cidr      netip.Prefix
	clusterIP netip.Addr
}

// serviceNetFor is the Service network of the apiserver on port.
func serviceNetFor(port int) serviceNet {
	base := netip.MustParseAddr("172.16.0.0").As4()
	off := uint32(port) * 16 // 65535*16 < 2^20: inside the /12
	n := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
	n += off
	a := netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
	return serviceNet{cidr: netip.PrefixFrom(a, 28), clusterIP: a.Next()}
}

// proxy starts the Service proxy when on is set and returns its stop.
func (s serviceNet) proxy(on bool, apiserver string, log *slog.Logger) (func(), error) {
	if !on {
		return func() {}, nil
	}
	p, err := startServiceProxy(s.clusterIP, apiserver, log)
	if err != nil {
		return nil, err
	}
	return func() {
		if err := p.close(); err != nil {
			log.Warn("stopping the kubernetes Service proxy", "err", err)
		}
	}, nil
}

// servicePort is the kubernetes Service's port (kube-apiserver's default):
// KUBERNETES_SERVICE_PORT in every pod.
const servicePort = 443

// serviceProxy makes the kubernetes Service's ClusterIP answer on this
// host as kube-proxy would on a node: the ClusterIP is added to the
// loopback device and its port 443 forwarded to the apiserver. A pod in
// the host's network namespace reaches it as a local address, a pod on a
// real node's bridge through its default route (the bridge is the pods'
// gateway), so in-cluster clients (KUBERNETES_SERVICE_HOST and _PORT, the
// projected ServiceAccount token, kube-root-ca.crt) work in pods.
type serviceProxy struct {
	ip      netip.Addr
	ln      net.Listener
	target  string
	log     *slog.Logger
	added   bool // the address was added here (and is removed at close)
	wg      sync.WaitGroup
	closeMu sync.Mutex
	conns   map[net.Conn]struct{}
}

// startServiceProxy adds ip to lo (root only) and forwards ip:443 to
// target (the apiserver's 127.0.0.1 address).
func startServiceProxy(ip netip.Addr, target string, log *slog.Logger) (*serviceProxy, error) {
	p := &serviceProxy{ip: ip, target: target, log: log, conns: map[net.Conn]struct{}{}}
	out, err := exec.Command("ip", "addr", "add", ip.String()+"/32", "dev", "lo").CombinedOutput()
	switch {
	case err == nil:
		p.added = true
	case strings.Contains(string(out), "File exists"):
		// Left by a control plane that was killed on the same port.
	default:
		return nil, fmt.Errorf("adding the kubernetes Service's ClusterIP %s to lo (pods reach the apiserver there; needs root): %w: %s", ip, err, strings.TrimSpace(string(out)))
	}
	addr := net.JoinHostPort(ip.String(), fmt.Sprint(servicePort))
	if p.ln, err = net.Listen("tcp", addr); err != nil {
		p.removeAddr()
		return nil, fmt.Errorf("the kubernetes Service's proxy on %s: %w", addr, err)
	}
	p.wg.Go(p.accept)
	log.Info("kubernetes Service proxy ready", "clusterIP", addr, "apiserver", target)
	return p, nil
}

func (p *serviceProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Go(func() { p.forward(c) })
	}
}

// forward copies both ways between a client and the apiserver (TLS goes
// through untouched: the serving certificate names the ClusterIP).
func (p *serviceProxy) forward(c net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		p.log.Warn("kubernetes Service proxy: dialling the apiserver", "err", err)
		c.Close()
		return
	}
	if !p.track(c, up) {
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	c.Close()
	up.Close()
	<-done
	p.closeMu.Lock()
	delete(p.conns, c)
	delete(p.conns, up)
	p.closeMu.Unlock()
}

// track records a pair of connections for close; false (and both closed)
// once the proxy is closing.
func (p *serviceProxy) track(conns ...net.Conn) bool {
	p.closeMu.Lock()
	defer p.closeMu.Unlock()
	if p.conns == nil {
		for _, c := range conns {
			c.Close()
		}
		return false
	}
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
	return true
}

// close stops the proxy, cuts its connections and removes the address it
// added.
func (p *serviceProxy) close() error {
	p.ln.Close()
	p.closeMu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.closeMu.Unlock()
	p.wg.Wait()
	return p.removeAddr()
}

func (p *serviceProxy) removeAddr() error {
	if !p.added {
		return nil
	}
	out, err := exec.CommandContext(context.Background(), "ip", "addr", "del", p.ip.String()+"/32", "dev", "lo").CombinedOutput()
	if err != nil {
		return fmt.Errorf("removing the kubernetes Service's ClusterIP %s from lo: %w: %s", p.ip, err, strings.TrimSpace(string(out)))
	}
	return nil
}
