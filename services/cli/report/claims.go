package report

import (
	"cmp"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The claim states `kubectl netdra claims` shows.
const (
	// ClaimFailed: a device condition is false, or a warning about the
	// claim or its pod came after the pod was last ready.
	ClaimFailed = "failed"
	// ClaimPending: not allocated yet.
	ClaimPending = "pending"
	// ClaimOK: allocated, and nothing failed since its pod was ready.
	ClaimOK = "ok"
)

// podWarnings are the reasons of the pod events that say why a pod's
// claim did not give it its device: the scheduler could not allocate it,
// the kubelet could not prepare or unprepare it (dra refused), the
// runtime could not start the sandbox (nri's attach refused).
var podWarnings = []string{"FailedScheduling", "FailedPrepareDynamicResources", "FailedUnprepareDynamicResources", "FailedCreatePodSandBox"}

// Claim is a netdra claim and why it failed.
type Claim struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Node      string `json:"node,omitempty"`
	// Pods are namespace/name of the pods that use it.
	Pods    []string `json:"pods,omitempty"`
	Devices []string `json:"devices,omitempty"`
	State   string   `json:"state"`
	Reasons []Reason `json:"reasons,omitempty"`
}

// Reason is one account of a failure: a device condition or an event.
type Reason struct {
	// Source is "claim", "device <name>" or "pod <name>".
	Source  string    `json:"source"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
	Count   int32     `json:"count,omitempty"`
	Last    time.Time `json:"last,omitzero"`
}

// ClaimsInput is what the claims' report is built from.
type ClaimsInput struct {
	// Drivers are netdra's driver names; Classes the DeviceClasses that
	// select their devices.
	Drivers, Classes map[string]bool
	Claims           []resourceapi.ResourceClaim
	// Pods are the pods of the claims' namespaces.
	Pods []corev1.Pod
	// Events are the Warning events of the claims and of those pods.
	Events []corev1.Event
}

// BuildClaims reports netdra's claims (allocated a device of its drivers,
// or asking for one of its classes), the failed first.
func BuildClaims(in ClaimsInput) []Claim {
	var out []Claim
	for i := range in.Claims {
		rc := &in.Claims[i]
		if !in.ours(rc) {
			continue
		}
		c := Claim{Namespace: rc.Namespace, Name: rc.Name, State: ClaimOK}
		if rc.Status.Allocation == nil {
			c.State = ClaimPending
		} else {
			for _, r := range rc.Status.Allocation.Devices.Results {
				if in.Drivers[r.Driver] {
					c.Devices = append(c.Devices, r.Pool+"/"+r.Device)
				}
			}
			c.Node = allocatedNode(rc.Status.Allocation)
		}
		pods := claimPods(rc, in.Pods)
		readySince := time.Time{}
		allReady := len(pods) > 0
		for _, p := range pods {
			c.Pods = append(c.Pods, p.Namespace+"/"+p.Name)
			t, ok := readyTime(p)
			allReady = allReady && ok
			readySince = later(readySince, t)
		}
		for _, d := range rc.Status.Devices {
			for _, cond := range d.Conditions {
				if cond.Status == metav1.ConditionFalse {
					c.Reasons = append(c.Reasons, Reason{Source: "device " + d.Device, Reason: cond.Reason, Message: cond.Message, Last: cond.LastTransitionTime.Time})
				}
			}
		}
		failedNow := len(c.Reasons) > 0
		for _, e := range in.Events {
			src, ok := eventAbout(e, rc, pods)
			if !ok {
				continue
			}
			last := eventTime(e)
			c.Reasons = append(c.Reasons, Reason{Source: src, Reason: e.Reason, Message: e.Message, Count: e.Count, Last: last})
			failedNow = failedNow || !allReady || last.After(readySince)
		}
		if failedNow {
			c.State = ClaimFailed
		}
		slices.SortFunc(c.Reasons, func(a, b Reason) int { return b.Last.Compare(a.Last) })
		out = append(out, c)
	}
	rank := map[string]int{ClaimFailed: 0, ClaimPending: 1, ClaimOK: 2}
	slices.SortFunc(out, func(a, b Claim) int {
		return cmp.Or(cmp.Compare(rank[a.State], rank[b.State]), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return out
}

// ours says the claim is netdra's.
func (in ClaimsInput) ours(rc *resourceapi.ResourceClaim) bool {
	if a := rc.Status.Allocation; a != nil {
		for _, r := range a.Devices.Results {
			if in.Drivers[r.Driver] {
				return true
			}
		}
	}
	for _, r := range rc.Spec.Devices.Requests {
		if r.Exactly != nil && in.Classes[r.Exactly.DeviceClassName] {
			return true
		}
		for _, s := range r.FirstAvailable {
			if in.Classes[s.DeviceClassName] {
				return true
			}
		}
	}
	return false
}

// allocatedNode is the node an allocation is limited to, when it names one.
func allocatedNode(a *resourceapi.AllocationResult) string {
	if a.NodeSelector == nil {
		return ""
	}
	for _, t := range a.NodeSelector.NodeSelectorTerms {
		for _, f := range t.MatchFields {
			if f.Key == "metadata.name" && len(f.Values) == 1 {
				return f.Values[0]
			}
		}
	}
	return ""
}

// claimPods are the pods the claim is reserved for, or, before that, the
// pods whose status or spec names it.
func claimPods(rc *resourceapi.ResourceClaim, pods []corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	for i := range pods {
		p := &pods[i]
		if p.Namespace != rc.Namespace {
			continue
		}
		use := slices.ContainsFunc(rc.Status.ReservedFor, func(r resourceapi.ResourceClaimConsumerReference) bool { return r.UID == p.UID })
		for _, s := range p.Status.ResourceClaimStatuses {
			use = use || (s.ResourceClaimName != nil && *s.ResourceClaimName == rc.Name)
		}
		for _, s := range p.Spec.ResourceClaims {
			use = use || (s.ResourceClaimName != nil && *s.ResourceClaimName == rc.Name)
		}
		if use {
			out = append(out, p)
		}
	}
	return out
}

// eventAbout says whether the Warning event e is about the claim (any
// reason) or one of its pods (podWarnings), and names its source.
func eventAbout(e corev1.Event, rc *resourceapi.ResourceClaim, pods []*corev1.Pod) (string, bool) {
	o := e.InvolvedObject
	if e.Type != corev1.EventTypeWarning || o.Namespace != rc.Namespace {
		return "", false
	}
	if o.Kind == "ResourceClaim" && o.Name == rc.Name && (o.UID == "" || o.UID == rc.UID) {
		return "claim", true
	}
	if o.Kind != "Pod" || !slices.Contains(podWarnings, e.Reason) {
		return "", false
	}
	for _, p := range pods {
		if o.Name == p.Name && (o.UID == "" || o.UID == p.UID) {
			return "pod " + p.Name, true
		}
	}
	return "", false
}

// readyTime is when the pod last became Ready; ok is false when it is not.
func readyTime(p *corev1.Pod) (time.Time, bool) {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.LastTransitionTime.Time, c.Status == corev1.ConditionTrue
		}
	}
	return time.Time{}, false
}

func eventTime(e corev1.Event) time.Time {
	switch {
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return e.Series.LastObservedTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// oneLine is s on one line, for a table cell.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
