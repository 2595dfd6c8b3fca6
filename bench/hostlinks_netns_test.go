package bench

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// hostLinks follows, from its link events, which links are in a netns by
// name, so that the pipeline's detach is timed until the devices are back
// in the host (StopPodSandbox returns before) without polling the kernel.
type hostLinks struct {
	mu      sync.Mutex
	present map[string]bool
	names   map[int32]string // by ifindex: a link renamed in the host (before its move) leaves its old name
	changed chan struct{}    // closed and replaced at every event
	done    chan struct{}
}

func watchLinks(b *testing.B, ns string) *hostLinks {
	b.Helper()
	h, err := netns.GetFromName(ns)
	must(b, err)
	defer h.Close()
	hl := &hostLinks{present: map[string]bool{}, names: map[int32]string{}, changed: make(chan struct{}), done: make(chan struct{})}
	ch := make(chan netlink.LinkUpdate, 4096)
	must(b, netlink.LinkSubscribeWithOptions(ch, hl.done, netlink.LinkSubscribeOptions{Namespace: &h, ReceiveBufferSize: 1 << 22,
		ErrorCallback: func(err error) {
			select {
			case <-hl.done:
			default:
				b.Errorf("link events of %s: %v", ns, err)
			}
		}}))
	// Subscribed first, listed then: no link is missed.
	nl, err := handleAt(ns)
	must(b, err)
	links, err := nl.LinkList()
	nl.Close()
	must(b, err)
	for _, l := range links {
		hl.present[l.Attrs().Name] = true
		hl.names[int32(l.Attrs().Index)] = l.Attrs().Name
	}
	go func() {
		for u := range ch {
			hl.mu.Lock()
			if old, ok := hl.names[u.Index]; ok {
				hl.present[old] = false
			}
			delete(hl.names, u.Index)
			if u.Header.Type == unix.RTM_NEWLINK {
				hl.present[u.Attrs().Name] = true
				hl.names[u.Index] = u.Attrs().Name
			} else {
				hl.present[u.Attrs().Name] = false
			}
			close(hl.changed)
			hl.changed = make(chan struct{})
			hl.mu.Unlock()
		}
	}()
	b.Cleanup(func() { close(hl.done) })
	return hl
}

// wait waits until each of names is in the netns (in) or not (!in), at
// most a minute.
func (hl *hostLinks) wait(names []string, in bool) error {
	timeout := time.After(time.Minute)
	for {
		hl.mu.Lock()
		missing := ""
		for _, n := range names {
			if hl.present[n] != in {
				missing = n
				break
			}
		}
		changed := hl.changed
		hl.mu.Unlock()
		if missing == "" {
			return nil
		}
		select {
		case <-changed:
		case <-timeout:
			return fmt.Errorf("link %s: in the host netns %v after a minute, want %v", missing, !in, in)
		}
	}
}
