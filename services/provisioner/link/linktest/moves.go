// Package linktest counts the namespace moves of network links as the
// kernel reports them, for tests that assert how many moves a device's
// lifecycle costs. A move is the kernel's RTM_DELLINK notification, in the
// namespace a link leaves, that carries IFLA_NEW_NETNSID (the namespace it
// went to): every move sends exactly one, a deletion sends one without it,
// and a creation none, so the count is exact whatever else happens.
package linktest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The sentinel's range: lo's txqueuelen is set to a value in
// [minToken, maxToken), which every kernel accepts.
const (
	minToken = 16
	maxToken = 1000
)

// Moves counts the links that leave each of a set of network namespaces.
type Moves struct {
	tb testing.TB
	ns map[string]*watched
}

// watched is one namespace's event reader.
type watched struct {
	path string
	sock *nl.NetlinkSocket
	lo   *netlink.Handle // changes lo's txqueuelen: the sentinel event

	mu   sync.Mutex
	cond *sync.Cond
	out  int
	seen map[uint32]bool // sentinel tokens read (lo's txqueuelen)
	err  error           // the reader's end: a lost event (ENOBUFS), a closed socket
}

// CountMoves starts counting, at once, the links that move out of each of
// the network namespaces at paths. It stops at the end of the test.
func CountMoves(tb testing.TB, paths ...string) *Moves {
	tb.Helper()
	m := &Moves{tb: tb, ns: map[string]*watched{}}
	for _, p := range paths {
		w, err := watch(p)
		if err != nil {
			tb.Fatalf("watching the link events of %s: %v", p, err)
		}
		tb.Cleanup(w.close)
		m.ns[p] = w
	}
	return m
}

func watch(path string) (*watched, error) {
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	sock, err := nl.SubscribeAt(ns, netns.None(), unix.NETLINK_ROUTE, unix.RTNLGRP_LINK)
	if err != nil {
		return nil, err
	}
	if err := sock.SetReceiveBufferSize(1<<20, true); err != nil {
		sock.Close()
		return nil, err
	}
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		sock.Close()
		return nil, err
	}
	w := &watched{path: path, sock: sock, lo: h, seen: map[uint32]bool{}}
	w.cond = sync.NewCond(&w.mu)
	go w.read()
	return w, nil
}

func (w *watched) close() {
	w.sock.Close() // wakes the reader
	w.lo.Close()
}

// read counts moves and records sentinels until the socket fails.
func (w *watched) read() {
	for {
		msgs, _, err := w.sock.Receive()
		if err != nil {
			w.mu.Lock()
			if w.err == nil {
				w.err = err
			}
			w.cond.Broadcast()
			w.mu.Unlock()
			return
		}
		w.mu.Lock()
		for _, msg := range msgs {
			w.take(msg)
		}
		w.cond.Broadcast()
		w.mu.Unlock()
	}
}

// take reads one link notification; w.mu is held.
func (w *watched) take(msg syscall.NetlinkMessage) {
	t := msg.Header.Type
	if (t != unix.RTM_NEWLINK && t != unix.RTM_DELLINK) || len(msg.Data) < unix.SizeofIfInfomsg {
		return
	}
	attrs, err := nl.ParseRouteAttr(msg.Data[unix.SizeofIfInfomsg:])
	if err != nil {
		if w.err == nil {
			w.err = fmt.Errorf("parsing a link notification: %w", err)
		}
		return
	}
	for _, a := range attrs {
		switch {
		case t == unix.RTM_DELLINK && a.Attr.Type == unix.IFLA_NEW_NETNSID:
			w.out++
		case t == unix.RTM_NEWLINK && a.Attr.Type == unix.IFLA_TXQLEN && len(a.Value) == 4:
			w.seen[nl.NativeEndian().Uint32(a.Value)] = true
		}
	}
}

// sync returns once the reader has read every notification the kernel sent
// before the call: it gives the namespace's loopback a new transmit queue
// length, a change the kernel notifies whether the link is up or not
// (NETDEV_CHANGE_TX_QUEUE_LEN; an alias or MTU change on a down link is not
// notified), and waits for that notification, which comes after all earlier
// ones. The token stays below lo's default of 1000: the range a kernel
// accepts above that differs between builds (Debian's 6.1.192 refuses with
// ERANGE the values around 2^20 that 6.1.158 took), values under 1000 are
// what every kernel and `ip link set txqueuelen` take.
func (w *watched) sync() error {
	lo, err := w.lo.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("lo in %s: %w", w.path, err)
	}
	token := uint32(lo.Attrs().TxQLen)
	for token == uint32(lo.Attrs().TxQLen) {
		token = minToken + rand.Uint32N(maxToken-minToken)
	}
	// A token seen before may be stale; every notification carrying it was
	// read before lo's txqueuelen moved off it, so forgetting it here is
	// exact.
	w.mu.Lock()
	delete(w.seen, token)
	w.mu.Unlock()
	if err := w.lo.LinkSetTxQLen(lo, int(token)); err != nil {
		return fmt.Errorf("setting the txqueuelen of lo in %s to %d: %w", w.path, token, err)
	}
	// A guard against a hang, not a timed assertion: the notification
	// arrives at once or never.
	stop := time.AfterFunc(time.Minute, func() {
		w.mu.Lock()
		if w.err == nil {
			w.err = errors.New("no notification for the txqueuelen of lo within a minute")
		}
		w.cond.Broadcast()
		w.mu.Unlock()
	})
	defer stop.Stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	for !w.seen[token] && w.err == nil {
		w.cond.Wait()
	}
	if w.seen[token] {
		delete(w.seen, token)
		return nil
	}
	return fmt.Errorf("link events of %s: %w", w.path, w.err)
}

// Out returns how many links moved out of the namespace at path since
// CountMoves, counting every notification the kernel sent before the
// call. It fails the test when an event may have been lost.
func (m *Moves) Out(path string) int {
	m.tb.Helper()
	w, ok := m.ns[path]
	if !ok {
		m.tb.Fatalf("moves out of %s are not counted", path)
	}
	if err := w.sync(); err != nil {
		m.tb.Fatal(err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.out
}

// Total returns the moves out of every namespace counted (see Out).
func (m *Moves) Total() int {
	m.tb.Helper()
	n := 0
	for p := range m.ns {
		n += m.Out(p)
	}
	return n
}
