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
	changed chan struct{} // closed and replaced at every event
	done    chan struct{}
}

func watchLinks(b *testing.B, ns string) *hostLinks {
	b.Helper()
	h, err := netns.GetFromName(ns)
	must(b, err)
	defer h.Close()
	hl := &hostLinks{present: map[string]bool{}, changed: make(chan struct{}), done: make(chan struct{})}
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
	}
	go func() {
		for u := range ch {
			hl.mu.Lock()
			hl.present[u.Attrs().Name] = u.Header.Type == unix.RTM_NEWLINK
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
