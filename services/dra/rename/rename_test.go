package rename

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/services/dra/callgate"
	"github.com/netdra/netdra/services/dra/nodeconfig"
	"github.com/netdra/netdra/services/dra/publish/publishtest"
	"github.com/netdra/netdra/services/dra/slicepool"
	"github.com/netdra/netdra/shared/apis/v1alpha1"
)

const node = "node-a"

// plugin is a kubelet plugin whose calls succeed, behind a gate.
type plugin struct{ kubeletplugin.DRAPlugin }

func (plugin) PrepareResourceClaims(context.Context, []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	return nil, nil
}

// call makes a kubelet prepare call through gate, and reports whether the
// gate let it through.
func call(gate *callgate.Gate) bool {
	_, err := callgate.Wrap(plugin{}, gate).PrepareResourceClaims(context.Background(), nil)
	return !errors.Is(err, callgate.ErrStopping)
}

// host is the agent as the renamer sees it: it records what it was asked.
type host struct {
	mu         sync.Mutex
	served     string
	gate       *callgate.Gate
	inForce    *v1alpha1.NodeConfigSpec
	configured []string // driver names sent with Configure
	putInForce []string // driver names put in force
	stopped    int
	servedNew  int
}

func (h *host) Served() (string, *callgate.Gate) { return h.served, h.gate }

func (h *host) InForce() *v1alpha1.NodeConfigSpec { return h.inForce }

func (h *host) Configure(_ context.Context, spec *v1alpha1.NodeConfigSpec) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.configured = append(h.configured, spec.DriverName)
	return nil
}

func (h *host) PutInForce(_ context.Context, spec *v1alpha1.NodeConfigSpec, _ int64) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.putInForce = append(h.putInForce, spec.DriverName)
	h.inForce = spec
	return nil
}

func (h *host) StopServing() { h.stopped++ }

func (h *host) ServeAgain() { h.servedNew++ }

// state answers ListAllocations with its rows, or err.
type state struct {
	statev1.StateServiceClient
	mu   sync.Mutex
	rows []*statev1.Allocation
	err  error
}

func (s *state) set(rows ...*statev1.Allocation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rows = rows
}

func (s *state) ListAllocations(context.Context, *statev1.ListAllocationsRequest, ...grpc.CallOption) (*statev1.ListAllocationsResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &statev1.ListAllocationsResponse{Allocations: s.rows}, s.err
}

func row(claimUID string) *statev1.Allocation {
	return &statev1.Allocation{ClaimUid: claimUID, ClaimNamespace: "ns", ClaimName: "c-" + claimUID, Pool: "p", DeviceName: "vf1"}
}

type world struct {
	h      *host
	st     *state
	allocs *publishtest.Views
	kube   *fake.Clientset
	r      *Renamer
	retry  chan struct{}
}

func newWorld(t *testing.T, h *host) *world {
	t.Helper()
	w := &world{h: h, st: &state{}, allocs: publishtest.New(), kube: fake.NewClientset(),
		retry: make(chan struct{}, 8)}
	w.r = New(Config{NodeName: node, Kube: w.kube, State: w.st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Host: h, Allocations: w.allocs, Retry: func() { w.retry <- struct{}{} }})
	return w
}

// servedWorld is a world whose plugin is served as a.example, that name
// in force, with one of its ResourceSlices.
func servedWorld(t *testing.T) (*world, *host, *callgate.Gate) {
	t.Helper()
	gate := &callgate.Gate{}
	h := &host{served: "a.example", gate: gate, inForce: spec("a.example")}
	w := newWorld(t, h)
	if _, err := w.kube.ResourceV1().ResourceSlices().Create(context.Background(), slice("old", "a.example"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return w, h, gate
}

func spec(driver string) *v1alpha1.NodeConfigSpec {
	return &v1alpha1.NodeConfigSpec{DriverName: driver}
}

func slice(name, driver string) *resourceapi.ResourceSlice {
	n := node
	return &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceSliceSpec{Driver: driver, NodeName: &n, Pool: resourceapi.ResourcePool{Name: slicepool.SlicePool(node, "p")}}}
}

// The same name as the one served is no rename: nothing happens.
func TestBegin_SameName(t *testing.T) {
	h := &host{served: "a.example", gate: &callgate.Gate{}, inForce: spec("a.example")}
	w := newWorld(t, h)
	rn, err := w.r.Begin(context.Background(), spec("a.example"), 2)
	if err != nil || rn != nil {
		t.Fatalf("Begin: %v, %v; want no rename", rn, err)
	}
	// A nil rename's steps do nothing.
	rn.Cancel()
	rn.ServeNewName()
	if err := rn.Complete(context.Background()); err != nil || h.stopped != 0 || h.servedNew != 0 {
		t.Fatalf("nil rename: Complete %v, stopped %d, served %d", err, h.stopped, h.servedNew)
	}
}

// A rename with no claim prepared: the old plugin's gate closes at Begin,
// Complete stops it and deletes the old name's slices, ServeNewName
// serves the new one.
func TestRename_NoClaims(t *testing.T) {
	ctx := context.Background()
	w, h, gate := servedWorld(t)
	rn, err := w.r.Begin(ctx, spec("b.example"), 2)
	if err != nil || rn == nil {
		t.Fatalf("Begin: %v, %v; want a rename", rn, err)
	}
	// The gate is closed: a kubelet call now is refused and noted.
	if call(gate) {
		t.Fatal("a call went through the closed gate")
	}
	gate.Open() // forget the knock: the next case tests it
	if err := rn.Complete(ctx); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if h.stopped != 1 {
		t.Errorf("old plugin stopped %d times, want 1", h.stopped)
	}
	list, err := w.kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Errorf("the old name's slices left: %d", len(list.Items))
	}
	rn.ServeNewName()
	if h.servedNew != 1 {
		t.Errorf("ServeAgain %d times, want 1", h.servedNew)
	}
}

// Claims prepared under the old name refuse the rename naming the reason,
// the gate stays open, and Run has the NodeConfig applied again once the
// last allocation is gone.
func TestRename_RefusedWhileClaimsPrepared(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gate := &callgate.Gate{}
	h := &host{served: "a.example", gate: gate, inForce: spec("a.example")}
	w := newWorld(t, h)
	w.st.set(row("u1"), row("u1"), row("u2"))
	w.allocs.Set(row("u1"), row("u2"))
	done := make(chan error, 1)
	go func() { done <- w.r.Run(ctx) }()

	rn, err := w.r.Begin(ctx, spec("b.example"), 2)
	var ref *nodeconfig.Refusal
	if rn != nil || !errors.As(err, &ref) || ref.Reason != v1alpha1.ReasonDriverNameInUse {
		t.Fatalf("Begin with claims prepared: %v, %v; want a %s refusal", rn, err, v1alpha1.ReasonDriverNameInUse)
	}
	if want := "2 claims are prepared under a.example"; !strings.Contains(ref.Message, want) {
		t.Errorf("refusal %q, want it to say %q", ref.Message, want)
	}
	if !call(gate) {
		t.Fatal("the gate closed for a refused rename")
	}
	if len(h.putInForce) != 0 {
		t.Errorf("a spec in force was changed: %v", h.putInForce)
	}
	select {
	case <-w.retry:
		t.Fatal("retried while claims are prepared")
	case <-time.After(50 * time.Millisecond):
	}
	w.allocs.Set()
	select {
	case <-w.retry:
	case <-time.After(5 * time.Second):
		t.Fatal("not retried once the last allocation went")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// dra starts (nothing served, nothing in force) with claims prepared
// under another name than the spec's: the rename is refused and the spec
// is put in force under the name the claims were prepared under.
func TestBegin_AtStartKeepsTheNameClaimsWerePreparedUnder(t *testing.T) {
	ctx := context.Background()
	h := &host{}
	w := newWorld(t, h)
	w.st.set(row("u1"))
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c-u1", UID: "u1"}}
	claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
		Results: []resourceapi.DeviceRequestAllocationResult{{Request: "r", Driver: "a.example", Pool: slicepool.SlicePool(node, "p"), Device: "vf1"}}}}
	if _, err := w.kube.ResourceV1().ResourceClaims("ns").Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rn, err := w.r.Begin(ctx, spec("b.example"), 3)
	var ref *nodeconfig.Refusal
	if rn != nil || !errors.As(err, &ref) {
		t.Fatalf("Begin at start: %v, %v; want a refusal", rn, err)
	}
	if len(h.putInForce) != 1 || h.putInForce[0] != "a.example" {
		t.Errorf("put in force under %v, want [a.example]", h.putInForce)
	}

	// Without a claim of another name, nothing is renamed at start.
	w2 := newWorld(t, &host{})
	if rn, err := w2.r.Begin(ctx, spec("b.example"), 3); rn != nil || err != nil {
		t.Errorf("Begin at start without claims: %v, %v; want nothing", rn, err)
	}
}

// A kubelet call that came while the old plugin stopped rolls the rename
// back: the configuration in force is sent again and the old name served.
func TestComplete_KnockedRollsBack(t *testing.T) {
	ctx := context.Background()
	w, h, gate := servedWorld(t)
	rn, err := w.r.Begin(ctx, spec("b.example"), 2)
	if err != nil {
		t.Fatal(err)
	}
	call(gate)
	err = rn.Complete(ctx)
	var ref *nodeconfig.Refusal
	if !errors.As(err, &ref) || ref.Reason != v1alpha1.ReasonDriverNameInUse {
		t.Fatalf("Complete after a knock: %v, want a refusal", err)
	}
	if len(h.configured) != 1 || h.configured[0] != "a.example" || h.servedNew != 1 {
		t.Errorf("rollback: configured %v, served again %d; want [a.example], 1", h.configured, h.servedNew)
	}
	list, _ := w.kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if len(list.Items) != 1 {
		t.Errorf("the old name's slices deleted on a rollback: %d left", len(list.Items))
	}
}

// A claim prepared between Begin and Complete rolls back the same way;
// Cancel opens the gate again.
func TestComplete_ClaimPreparedMeanwhile(t *testing.T) {
	ctx := context.Background()
	gate := &callgate.Gate{}
	h := &host{served: "a.example", gate: gate, inForce: spec("a.example")}
	w := newWorld(t, h)
	rn, err := w.r.Begin(ctx, spec("b.example"), 2)
	if err != nil {
		t.Fatal(err)
	}
	w.st.set(row("u9"))
	if err := rn.Complete(ctx); err == nil || h.servedNew != 1 {
		t.Fatalf("Complete with a claim prepared meanwhile: %v, served again %d", err, h.servedNew)
	}

	if _, err := w.r.Begin(ctx, spec("c.example"), 3); err == nil {
		t.Fatal("Begin with a claim prepared: no refusal")
	}
	w.st.set()
	rn, err = w.r.Begin(ctx, spec("c.example"), 4)
	if err != nil || rn == nil {
		t.Fatalf("Begin: %v, %v", rn, err)
	}
	rn.Cancel()
	if !call(gate) {
		t.Fatal("Cancel left the gate closed")
	}
}

// The state service unreachable is an error, not a refusal: nothing is
// renamed.
func TestBegin_StateError(t *testing.T) {
	h := &host{served: "a.example", gate: &callgate.Gate{}, inForce: spec("a.example")}
	w := newWorld(t, h)
	w.st.err = errors.New("unavailable")
	rn, err := w.r.Begin(context.Background(), spec("b.example"), 2)
	var ref *nodeconfig.Refusal
	if rn != nil || err == nil || errors.As(err, &ref) {
		t.Fatalf("Begin with the state service down: %v, %v; want a plain error", rn, err)
	}
}
