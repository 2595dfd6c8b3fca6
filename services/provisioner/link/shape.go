package link

import (
	"fmt"

	"github.com/vishvananda/netlink"
)

// Egress shaping of a sub-interface held to a share of its parent's
// bandwidth: a token bucket filter (sch_tbf) as the link's root qdisc in
// the pod. A token bucket, not fq's maxrate or an eBPF earliest-departure-
// time pacer: fq's maxrate caps each flow, not the link, and EDT needs fq
// to honour the departure times; neither is in every kernel (this host's
// has no sch_fq), while tbf caps the link's aggregate whatever its flows.
const (
	// shapeBurstTime is the burst the bucket holds, as time at the rate
	// (at least shapeMinBurst bytes): short enough that a 2 s measurement
	// sees the rate, long enough for a 10G share's timer granularity.
	shapeBurstTime = 0.004 // s
	shapeMinBurst  = 32 << 10
	// shapeLatency is how long a packet may wait in the bucket's queue.
	shapeLatency = 0.05 // s
)

// tbf is the root qdisc that holds the link with ifindex index to rate
// bits per second.
func tbf(index int, rate uint64) *netlink.Tbf {
	bytesPerSec := rate / 8
	burst := max(uint64(float64(bytesPerSec)*shapeBurstTime), shapeMinBurst)
	limit := burst + uint64(float64(bytesPerSec)*shapeLatency)
	return &netlink.Tbf{
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: index, Handle: netlink.MakeHandle(1, 0), Parent: netlink.HANDLE_ROOT},
		Rate:       bytesPerSec,
		Limit:      uint32(min(limit, 1<<31)),
		Buffer:     netlink.Xmittime(bytesPerSec, uint32(min(burst, 1<<31))),
	}
}

// shapeEgress holds l to rate bits per second on egress (a tbf root
// qdisc, replacing the one an earlier CreateSub put there); 0 leaves l
// unshaped.
func (c *conn) shapeEgress(l netlink.Link, rate uint64) error {
	if rate == 0 {
		return nil
	}
	if err := c.h.QdiscReplace(tbf(l.Attrs().Index, rate)); err != nil {
		return fmt.Errorf("holding %s to %d bit/s on egress (tbf qdisc) in %s: %w", l.Attrs().Name, rate, c.name, err)
	}
	return nil
}
