package agent

import (
	"context"
	"errors"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

// errStopping answers a kubelet call that comes while the plugin is being
// stopped for a driver name change; the kubelet retries it.
var errStopping = errors.New("the DRA plugin is stopping for a driver name change; retry")

// replyGrace is how long after the kubelet's last call returned the plugin
// may be stopped: the kubelet plugin helper stops its gRPC server hard, and
// a reply cut off would leave the kubelet retrying an unprepare under a
// driver name that is gone.
const replyGrace = time.Second

// gate counts the kubelet's prepare and unprepare calls into one served
// plugin, so that it is stopped only when none is under way, and notes a
// call that came while it was closed.
type gate struct {
	mu       sync.Mutex
	inflight int
	lastDone time.Time
	closed   bool
	knocked  bool
}

func (g *gate) enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		g.knocked = true
		return false
	}
	g.inflight++
	return true
}

func (g *gate) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.inflight--
	g.lastDone = time.Now()
}

// close closes the gate once no call is under way and the last one
// returned replyGrace ago, or returns ctx's error.
func (g *gate) close(ctx context.Context) error {
	// Between two looks it waits what is left of the grace, between 10ms
	// and 50ms.
	pause := func() time.Duration {
		g.mu.Lock()
		defer g.mu.Unlock()
		return max(min(g.graceLeft(), 50*time.Millisecond), 10*time.Millisecond)
	}
	return wait.DelayFunc(pause).Until(ctx, true, true, func(context.Context) (bool, error) {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.inflight == 0 && g.graceLeft() <= 0 {
			g.closed = true
			return true, nil
		}
		return false, nil
	})
}

// graceLeft is how much of replyGrace is left since the last call
// returned; g.mu is held.
func (g *gate) graceLeft() time.Duration {
	return replyGrace - time.Since(g.lastDone)
}

// open opens a closed gate again.
func (g *gate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed, g.knocked = false, false
}

// wasKnocked reports whether a call came while the gate was closed.
func (g *gate) wasKnocked() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.knocked
}

// gated is a plugin whose prepare and unprepare calls pass a gate.
type gated struct {
	kubeletplugin.DRAPlugin
	g *gate
}

func (p *gated) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	if !p.g.enter() {
		return nil, errStopping
	}
	defer p.g.leave()
	return p.DRAPlugin.PrepareResourceClaims(ctx, claims)
}

func (p *gated) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	if !p.g.enter() {
		return nil, errStopping
	}
	defer p.g.leave()
	return p.DRAPlugin.UnprepareResourceClaims(ctx, claims)
}
