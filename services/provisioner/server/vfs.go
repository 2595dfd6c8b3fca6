package server

import (
	"fmt"
	"sync"

	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/shared/fielderr"
)

// PreparedVFs is what the server tells the sr-iov manager it builds of
// the VFs prepared for claims (sriov.Prepared): the manager re-creates a
// PF's VFs, which destroys every one of them, only when it is told none of
// them is, and while it holds the PF no Setup of its VFs runs.
type PreparedVFs interface {
	// HoldPF returns how many of vfs (device names of the VFs of the PF
	// whose netdev is pf) are prepared, or -1 when that is not known.
	// When it is 0, no Setup of a VF of pf runs until release is called
	// (the ones under way have ended); release is never nil and is
	// called once.
	HoldPF(pf string, vfs []string) (prepared int, release func())
	// Changed returns a channel closed at the next change that may have
	// freed VFs: a Free, a Configure's list.
	Changed() <-chan struct{}
}

// maxPreparedVFs bounds ConfigureRequest.prepared_vfs and
// prepared_devices.
const maxPreparedVFs = 65536

// preparedVFs is what the provisioner knows of the SR-IOV VFs prepared for
// claims. A VF is prepared when a Setup of this process prepared it and no
// Free has undone it (setUp), or when the last Configure that listed the
// prepared VFs named it, or a Restore accepted it since (listed), until a
// Free of it. setUp covers what this process did; listed covers what was
// prepared before it started, which only the caller's record knows:
// before a Configure has listed them (known false) the count of a PF is
// not known. A VF prepared before the process started is in every list
// until it is freed (the record keeps an allocation until its Free), so
// each list replaces the last; one freed between the caller's reading and
// the list's arrival stays counted until the next list, which only delays
// a PF's new count.
//
// The per-PF gate orders Setups of a PF's VFs (read side, from before the
// device is taken from the inventory until it is counted) against a
// re-creation of its VFs (write side, HoldPF's hold).
type preparedVFs struct {
	mu      sync.Mutex
	setUp   map[string]bool
	listed  map[string]bool
	known   bool
	changed chan struct{}
	gates   map[string]*sync.RWMutex
}

var _ PreparedVFs = (*preparedVFs)(nil)

func newPreparedVFs() *preparedVFs {
	return &preparedVFs{setUp: map[string]bool{}, listed: map[string]bool{}, changed: make(chan struct{}),
		gates: map[string]*sync.RWMutex{}}
}

// gate returns the gate of pf.
func (p *preparedVFs) gate(pf string) *sync.RWMutex {
	p.mu.Lock()
	defer p.mu.Unlock()
	g := p.gates[pf]
	if g == nil {
		g = &sync.RWMutex{}
		p.gates[pf] = g
	}
	return g
}

// enter is a Setup of a VF of pf starting: it waits while pf is held, and
// keeps a hold from starting until exit is called (after the VF is
// counted, setUp).
func (p *preparedVFs) enter(pf string) (exit func()) {
	g := p.gate(pf)
	g.RLock()
	return g.RUnlock
}

// HoldPF implements PreparedVFs. A count that is not 0 is answered without
// waiting for Setups under way: it can only grow with them.
func (p *preparedVFs) HoldPF(pf string, vfs []string) (int, func()) {
	if n := p.count(vfs); n != 0 {
		return n, func() {}
	}
	g := p.gate(pf)
	g.Lock()
	if n := p.count(vfs); n != 0 {
		g.Unlock()
		return n, func() {}
	}
	var once sync.Once
	return 0, func() { once.Do(g.Unlock) }
}

// count is how many of vfs are prepared, -1 when not known.
func (p *preparedVFs) count(vfs []string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, v := range vfs {
		if p.setUp[v] || p.listed[v] {
			n++
		}
	}
	if n == 0 && !p.known {
		return -1
	}
	return n
}

// Changed implements PreparedVFs.
func (p *preparedVFs) Changed() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.changed
}

// changedLocked wakes the waiters of Changed.
func (p *preparedVFs) changedLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// prepared counts a VF a Setup prepared.
func (p *preparedVFs) prepared(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.setUp[name] = true
}

// restored counts a VF a Restore accepted: the caller records it as
// prepared, and its next list will name it.
func (p *preparedVFs) restored(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.listed[name] = true
}

// freed stops counting a VF a Free undid.
func (p *preparedVFs) freed(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.setUp[name] || p.listed[name] {
		delete(p.setUp, name)
		delete(p.listed, name)
		p.changedLocked()
	}
}

// list replaces the listed VFs with a Configure's list (absent: nothing
// changes).
func (p *preparedVFs) list(l *provisionerv1.PreparedVfs) {
	if l == nil {
		return
	}
	listed := make(map[string]bool, len(l.GetDevices()))
	for _, d := range l.GetDevices() {
		listed[d] = true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.listed, p.known = listed, true
	p.changedLocked()
}

// validatePreparedList checks a Configure's list of prepared VFs or devices:
// device names (as validateDevice has them), at most maxPreparedVFs.
func validatePreparedList(field string, devices []string) error {
	if n := len(devices); n > maxPreparedVFs {
		return fielderr.New(field+".devices", "%d devices; at most %d", n, maxPreparedVFs)
	}
	for i, d := range devices {
		if !dnsLabel.MatchString(d) {
			return fielderr.New(fmt.Sprintf("%s.devices[%d]", field, i), "%q is not a device name (a DNS label: lower-case letters, digits and '-', at most 63)", d)
		}
	}
	return nil
}
