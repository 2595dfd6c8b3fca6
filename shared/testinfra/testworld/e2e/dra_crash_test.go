package e2e

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/shared/testinfra/testworld/worldtest"
)

// statusGate is a validating admission webhook that holds dra's first
// write of a claim's device status (the step after CommitPrepare, once
// the prepare returned to the kubelet) until the test lets it go, and
// then refuses it, as if the write had never happened. Other writes pass
// at once.
type statusGate struct {
	srv     *httptest.Server
	held    atomic.Bool
	arrived chan string // the claim whose status write is held
	release chan struct{}
	once    sync.Once
	probed  chan struct{}
}

func newStatusGate(t *testing.T) *statusGate {
	g := &statusGate{arrived: make(chan string, 1), release: make(chan struct{}), probed: make(chan struct{}, 1)}
	g.srv = httptest.NewTLSServer(http.HandlerFunc(g.serve))
	t.Cleanup(func() {
		g.open()
		g.srv.Close()
	})
	return g
}

// open lets held and later writes go (refused).
func (g *statusGate) open() { g.once.Do(func() { close(g.release) }) }

func (g *statusGate) serve(w http.ResponseWriter, r *http.Request) {
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, "bad review", http.StatusBadRequest)
		return
	}
	resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
	var claim resourceapi.ResourceClaim
	_ = json.Unmarshal(review.Request.Object.Raw, &claim)
	switch {
	case review.Request.Operation == admissionv1.Create && strings.HasPrefix(claim.Name, "probe-"):
		select {
		case g.probed <- struct{}{}:
		default:
		}
	case review.Request.SubResource == "status" && hasDriverStatus(&claim) && g.held.CompareAndSwap(false, true):
		g.arrived <- claim.Namespace + "/" + claim.Name
		<-g.release
		resp.Allowed = false
		resp.Result = &metav1.Status{Message: "held by the test while dra was killed", Code: http.StatusForbidden}
	}
	review.Response = resp
	review.Request = nil
	_ = json.NewEncoder(w).Encode(&review)
}

func hasDriverStatus(c *resourceapi.ResourceClaim) bool {
	for _, d := range c.Status.Devices {
		if d.Driver == driver && d.Data != nil {
			return true
		}
	}
	return false
}

// install registers the webhook and waits until the apiserver calls it.
func (g *statusGate) install(t *testing.T, c kubernetes.Interface, ns string) {
	t.Helper()
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: g.srv.Certificate().Raw})
	name := "netdra-status-gate-" + ns
	cfg := &admissionregv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregv1.ValidatingWebhook{{
			Name:                    "gate.e2e.netdra.io",
			ClientConfig:            admissionregv1.WebhookClientConfig{URL: ptr.To(g.srv.URL + "/validate"), CABundle: caPEM},
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             ptr.To(admissionregv1.SideEffectClassNone),
			FailurePolicy:           ptr.To(admissionregv1.Fail),
			TimeoutSeconds:          ptr.To(int32(30)),
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
			Rules: []admissionregv1.RuleWithOperations{{
				Operations: []admissionregv1.OperationType{admissionregv1.Create, admissionregv1.Update},
				Rule: admissionregv1.Rule{APIGroups: []string{"resource.k8s.io"}, APIVersions: []string{"v1"},
					Resources: []string{"resourceclaims", "resourceclaims/status"}},
			}},
		}}}
	if _, err := c.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(context.Background(), cfg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	probe := &resourceapi.ResourceClaim{Spec: resourceapi.ResourceClaimSpec{}}
	waitFor(t, "the webhook to be called", time.Minute, func(ctx context.Context) (bool, error) {
		probe.ObjectMeta = metav1.ObjectMeta{GenerateName: "probe-", Namespace: ns}
		created, err := c.ResourceV1().ResourceClaims(ns).Create(ctx, probe, metav1.CreateOptions{})
		if err == nil {
			_ = c.ResourceV1().ResourceClaims(ns).Delete(ctx, created.Name, metav1.DeleteOptions{})
		}
		select {
		case <-g.probed:
			return true, nil
		default:
			return false, nil
		}
	})
}

// TestE2E_DraCrashBeforeStatus: dra is killed (-9) after a prepare
// committed and returned to the kubelet, while its claim status write is
// held: the allocation is PREPARED, the claim has no status. The pod
// starts with its device meanwhile (the kubelet waits for the prepare
// only). Restarted, dra writes the claim's Ready status from the
// allocation the state service holds; after the pod is gone nothing is
// left: no allocation, the device back in the host and published again.
func TestE2E_DraCrashBeforeStatus(t *testing.T) {
	nn := startNetdra(t, "data0")
	c := nn.cp.Client()
	nn.applyNodeConfig(t, map[string]any{
		"deviceManagerConfigs": map[string]any{"host": map[string]any{"enabled": true, "ifNames": []any{"data0"}}},
		"pools":                []any{map[string]any{"name": "net"}},
	})
	ns := worldtest.Namespace(t, c)
	gate := newStatusGate(t)
	gate.install(t, c, ns)
	waitFor(t, "pool net with data0", 2*time.Minute, func(ctx context.Context) (bool, error) {
		p, err := slicePools(ctx, c, nn.node.Name())
		return err == nil && p["net"] == 1, nil
	})
	before, ok := link(t, nn.hostNS, "data0")
	if !ok {
		t.Fatal("data0 missing in the host netns")
	}
	tmpl := claimTemplate(t, c, ns, deviceClass(t, c, "net"), map[string]any{"podIfName": "net1", "mtu": 1400})
	pod := newPod(t, c, ns, "app", nn.node.Name(), tmpl)

	var claim string
	select {
	case claim = <-gate.arrived:
	case <-time.After(3 * time.Minute):
		t.Fatal("dra never wrote the claim status")
	}
	// The prepare committed before its status write.
	resp, err := nn.stateClient.ListAllocations(context.Background(), &statev1.ListAllocationsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if rows := resp.GetAllocations(); len(rows) != 1 || rows[0].GetPhase() == statev1.Phase_PHASE_PREPARING || rows[0].GetPreparedDevice() == nil {
		t.Fatalf("while the status write is held, allocations = %v, want one committed with its prepared device", rows)
	}
	nn.dra.Kill()
	gate.open()
	t.Logf("dra killed while writing the status of claim %s", claim)
	claimNS, claimName, _ := strings.Cut(claim, "/")
	if got, err := c.ResourceV1().ResourceClaims(claimNS).Get(context.Background(), claimName, metav1.GetOptions{}); err != nil || hasDriverStatus(got) {
		t.Fatalf("after the kill, the claim's status has dra's entry (%v): the held write was not refused", err)
	}
	nn.dra.Restart()

	waitFor(t, "the claim's Ready status, written by the restarted dra", time.Minute, func(ctx context.Context) (bool, error) {
		got, err := c.ResourceV1().ResourceClaims(claimNS).Get(ctx, claimName, metav1.GetOptions{})
		return err == nil && hasDriverStatus(got), nil
	})
	waitFor(t, "the pod to run", 3*time.Minute, func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, nil
	})
	if log := nn.dra.Log(); !strings.Contains(log, "claim status written at recovery") {
		t.Error("dra did not write the claim status at recovery")
	}
	netns, ok := nn.node.Sandbox(pod.UID)
	if !ok {
		t.Fatal("the node has no sandbox for the pod")
	}
	if in, ok := link(t, netns, "net1"); !ok || in.MTU != 1400 {
		t.Fatalf("net1 in the pod: %+v %v", in, ok)
	}
	waitFor(t, "the allocation ATTACHED", time.Minute, func(ctx context.Context) (bool, error) {
		resp, err := nn.stateClient.ListAllocations(ctx, &statev1.ListAllocationsRequest{})
		return err == nil && len(resp.GetAllocations()) == 1 && resp.GetAllocations()[0].GetPhase() == statev1.Phase_PHASE_ATTACHED, nil
	})

	if err := c.CoreV1().Pods(ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pod to be gone", 2*time.Minute, func(ctx context.Context) (bool, error) {
		_, err := c.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	waitFor(t, "no allocation left", time.Minute, func(ctx context.Context) (bool, error) {
		resp, err := nn.stateClient.ListAllocations(ctx, &statev1.ListAllocationsRequest{})
		return err == nil && len(resp.GetAllocations()) == 0, nil
	})
	after, ok := link(t, nn.hostNS, "data0")
	if !ok || after.Address != before.Address || after.MTU != before.MTU {
		t.Errorf("data0 back in the host as %+v (%v), want %s/%d", after, ok, before.Address, before.MTU)
	}
	waitFor(t, "data0 published again", time.Minute, func(ctx context.Context) (bool, error) {
		p, err := slicePools(ctx, c, nn.node.Name())
		return err == nil && p["net"] == 1, nil
	})
}
