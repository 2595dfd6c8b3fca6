package callgate

import (
	"context"
	"errors"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

// blockingPlugin's unprepare waits until released.
type blockingPlugin struct {
	kubeletplugin.DRAPlugin
	entered, release chan struct{}
}

func (p *blockingPlugin) UnprepareResourceClaims(context.Context, []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	p.entered <- struct{}{}
	<-p.release
	return map[types.UID]error{}, nil
}

func (p *blockingPlugin) PrepareResourceClaims(context.Context, []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	return map[types.UID]kubeletplugin.PrepareResult{}, nil
}

// TestGate: the gate closes only after the call under way returned (and
// its reply had time to go out); a call while closed is refused and noted;
// reopened, calls pass again.
func TestGate(t *testing.T) {
	g := &Gate{}
	p := &blockingPlugin{entered: make(chan struct{}), release: make(chan struct{})}
	gp := Wrap(p, g)
	ctx := context.Background()
	returned := make(chan struct{})
	go func() {
		_, _ = gp.UnprepareResourceClaims(ctx, nil)
		close(returned)
	}()
	<-p.entered
	closed := make(chan error, 1)
	go func() { closed <- g.Close(ctx) }()
	select {
	case err := <-closed:
		t.Fatalf("the gate closed (%v) while a call was under way", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(p.release)
	<-returned
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if _, err := gp.PrepareResourceClaims(ctx, nil); !errors.Is(err, ErrStopping) {
		t.Errorf("prepare through a closed gate: %v, want ErrStopping", err)
	}
	if !g.WasKnocked() {
		t.Error("the refused call was not noted")
	}
	g.Open()
	if _, err := gp.PrepareResourceClaims(ctx, nil); err != nil || g.WasKnocked() {
		t.Errorf("prepare through a reopened gate: %v, knocked %v", err, g.WasKnocked())
	}
	// A gate that cannot close gives up with ctx.
	go func() { _, _ = gp.UnprepareResourceClaims(ctx, nil) }()
	<-p.entered
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := g.Close(cctx); !errors.Is(err, context.Canceled) {
		t.Errorf("close with a call under way and ctx ended: %v", err)
	}
}
