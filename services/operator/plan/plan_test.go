package plan

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netdra/netdra/shared/apis/v1alpha1"
)

var (
	t0  = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t1  = metav1.NewTime(t0.Add(time.Second))
	now = metav1.NewTime(t0.Add(time.Hour))
)

func node(name string, labels ...string) Node {
	n := Node{Name: name, Labels: map[string]string{}}
	for _, l := range labels {
		k, v, _ := strings.Cut(l, "=")
		n.Labels[k] = v
	}
	return n
}

// cc is a ClusterConfig created at created whose spec carries its name as
// the driver name, so assignments can be told apart.
func cc(name string, created metav1.Time, sel *metav1.LabelSelector) v1alpha1.ClusterConfig {
	return v1alpha1.ClusterConfig{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: created, Generation: 3},
		Spec: v1alpha1.ClusterConfigSpec{NodeSelector: sel, Spec: v1alpha1.NodeConfigSpec{
			DriverName: name + ".example.com",
		}},
	}
}

func match(labels ...string) *metav1.LabelSelector {
	ls := &metav1.LabelSelector{MatchLabels: map[string]string{}}
	for _, l := range labels {
		k, v, _ := strings.Cut(l, "=")
		ls.MatchLabels[k] = v
	}
	return ls
}

// outcome is a ClusterConfig's status, boiled down.
type outcome struct {
	Nodes      int32
	Conflict   metav1.ConditionStatus
	Reason     string
	BadSel     bool
	Transition time.Time
}

func TestCompute(t *testing.T) {
	sriov := []Node{node("n1", "sriov=yes"), node("n2", "sriov=yes"), node("n3")}
	conflicting := func(c v1alpha1.ClusterConfig) v1alpha1.ClusterConfig {
		c.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionConflicting, Status: metav1.ConditionTrue,
			Reason: v1alpha1.ReasonConflict, LastTransitionTime: t0, ObservedGeneration: 3}}
		return c
	}
	tests := []struct {
		name     string
		nodes    []Node
		configs  []v1alpha1.ClusterConfig
		assigned map[string]string // node -> ClusterConfig
		outcomes map[string]outcome
		message  map[string]string // ClusterConfig -> a part of its conflict message
	}{
		{
			name:     "nil selector selects every node",
			nodes:    sriov,
			configs:  []v1alpha1.ClusterConfig{cc("all", t0, nil)},
			assigned: map[string]string{"n1": "all", "n2": "all", "n3": "all"},
			outcomes: map[string]outcome{"all": {3, metav1.ConditionFalse, v1alpha1.ReasonNoConflict, false, now.Time}},
		},
		{
			name:     "empty selector selects every node",
			nodes:    sriov,
			configs:  []v1alpha1.ClusterConfig{cc("all", t0, &metav1.LabelSelector{})},
			assigned: map[string]string{"n1": "all", "n2": "all", "n3": "all"},
			outcomes: map[string]outcome{"all": {3, metav1.ConditionFalse, v1alpha1.ReasonNoConflict, false, now.Time}},
		},
		{
			name:     "selector selects the labelled nodes",
			nodes:    sriov,
			configs:  []v1alpha1.ClusterConfig{cc("sriov", t0, match("sriov=yes"))},
			assigned: map[string]string{"n1": "sriov", "n2": "sriov"},
			outcomes: map[string]outcome{"sriov": {2, metav1.ConditionFalse, v1alpha1.ReasonNoConflict, false, now.Time}},
		},
		{
			name:     "expressions select too",
			nodes:    sriov,
			configs:  []v1alpha1.ClusterConfig{cc("plain", t0, &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "sriov", Operator: metav1.LabelSelectorOpDoesNotExist}}})},
			assigned: map[string]string{"n3": "plain"},
			outcomes: map[string]outcome{"plain": {1, metav1.ConditionFalse, v1alpha1.ReasonNoConflict, false, now.Time}},
		},
		{
			name:     "older creationTimestamp occupies first",
			nodes:    sriov,
			configs:  []v1alpha1.ClusterConfig{cc("a-newer", t1, match("sriov=yes")), cc("z-older", t0, nil)},
			assigned: map[string]string{"n1": "z-older", "n2": "z-older", "n3": "z-older"},
			outcomes: map[string]outcome{
				"z-older": {3, metav1.ConditionFalse, v1alpha1.ReasonNoConflict, false, now.Time},
				"a-newer": {0, metav1.ConditionTrue, v1alpha1.ReasonConflict, false, now.Time},
			},
			message: map[string]string{"a-newer": `ClusterConfig "z-older" governs n1, n2. It governs none of the 2 node(s) it selects`},
		},
		{
			name:     "same creationTimestamp: the name sorting first wins",
			nodes:    sriov,
			configs:  []v1alpha1.ClusterConfig{cc("beta", t0, nil), cc("alpha", t0, nil)},
			assigned: map[string]string{"n1": "alpha", "n2": "alpha", "n3": "alpha"},
			outcomes: map[string]outcome{
				"alpha": {3, metav1.ConditionFalse, v1alpha1.ReasonNoConflict, false, now.Time},
				"beta":  {0, metav1.ConditionTrue, v1alpha1.ReasonConflict, false, now.Time},
			},
			message: map[string]string{"beta": `ClusterConfig "alpha" governs n1, n2, n3.`},
		},
		{
			name:  "a conflicting ClusterConfig governs none of its nodes, not even the free ones",
			nodes: sriov,
			configs: []v1alpha1.ClusterConfig{
				cc("first", t0, match("sriov=yes")),
				cc("second", t1, nil), // n3 is free, n1 and n2 are not
			},
			assigned: map[string]string{"n1": "first", "n2": "first"},
			outcomes: map[string]outcome{
				"first":  {2, metav1.ConditionFalse, v1alpha1.ReasonNoConflict, false, now.Time},
				"second": {0, metav1.ConditionTrue, v1alpha1.ReasonConflict, false, now.Time},
			},
			message: map[string]string{"second": "none of the 3 node(s)"},
		},
		{
			name:  "a conflicting ClusterConfig occupies nothing, so a later one may take its nodes",
			nodes: sriov,
			configs: []v1alpha1.ClusterConfig{
				cc("first", t0, match("sriov=yes")),
				cc("second", t1, nil),
				cc("third", metav1.NewTime(t1.Add(time.Second)), &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "sriov", Operator: metav1.LabelSelectorOpDoesNotExist}}}),
			},
			assigned: map[string]string{"n1": "first", "n2": "first", "n3": "third"},
			outcomes: map[string]outcome{
				"first":  {2, metav1.ConditionFalse, v1alpha1.ReasonNoConflict, false, now.Time},
				"second": {0, metav1.ConditionTrue, v1alpha1.ReasonConflict, false, now.Time},
				"third":  {1, metav1.ConditionFalse, v1alpha1.ReasonNoConflict, false, now.Time},
			},
		},
		{
			name:     "the message names every occupant",
			nodes:    sriov,
			configs:  []v1alpha1.ClusterConfig{cc("a", t0, match("sriov=yes")), cc("b", t0, &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "sriov", Operator: metav1.LabelSelectorOpDoesNotExist}}}), cc("c", t1, nil)},
			assigned: map[string]string{"n1": "a", "n2": "a", "n3": "b"},
			outcomes: map[string]outcome{
				"a": {2, metav1.ConditionFalse, v1alpha1.ReasonNoConflict, false, now.Time},
				"b": {1, metav1.ConditionFalse, v1alpha1.ReasonNoConflict, false, now.Time},
				"c": {0, metav1.ConditionTrue, v1alpha1.ReasonConflict, false, now.Time},
			},
			message: map[string]string{"c": `ClusterConfig "a" governs n1, n2; ClusterConfig "b" governs n3.`},
		},
		{
			name:     "the conflict clears once the occupant no longer selects the nodes",
			nodes:    sriov,
			configs:  []v1alpha1.ClusterConfig{cc("first", t0, match("sriov=no")), conflicting(cc("second", t1, match("sriov=yes")))},
			assigned: map[string]string{"n1": "second", "n2": "second"},
			outcomes: map[string]outcome{
				"first":  {0, metav1.ConditionFalse, v1alpha1.ReasonNoConflict, false, now.Time},
				"second": {2, metav1.ConditionFalse, v1alpha1.ReasonNoConflict, false, now.Time},
			},
		},
		{
			name:     "the conflict clears once the occupant is deleted",
			nodes:    sriov,
			configs:  []v1alpha1.ClusterConfig{deleting(cc("first", t0, nil)), conflicting(cc("second", t1, nil))},
			assigned: map[string]string{"n1": "second", "n2": "second", "n3": "second"},
			outcomes: map[string]outcome{"second": {3, metav1.ConditionFalse, v1alpha1.ReasonNoConflict, false, now.Time}},
		},
		{
			name:     "a condition that stays keeps its lastTransitionTime",
			nodes:    sriov,
			configs:  []v1alpha1.ClusterConfig{cc("first", t0, nil), conflicting(cc("second", t1, nil))},
			assigned: map[string]string{"n1": "first", "n2": "first", "n3": "first"},
			outcomes: map[string]outcome{
				"first":  {3, metav1.ConditionFalse, v1alpha1.ReasonNoConflict, false, now.Time},
				"second": {0, metav1.ConditionTrue, v1alpha1.ReasonConflict, false, t0.Time},
			},
		},
		{
			name:     "a node whose labels change moves to the ClusterConfig that now selects it",
			nodes:    []Node{node("n1", "pool=b")},
			configs:  []v1alpha1.ClusterConfig{cc("a", t0, match("pool=a")), cc("b", t1, match("pool=b"))},
			assigned: map[string]string{"n1": "b"},
			outcomes: map[string]outcome{
				"a": {0, metav1.ConditionFalse, v1alpha1.ReasonNoConflict, false, now.Time},
				"b": {1, metav1.ConditionFalse, v1alpha1.ReasonNoConflict, false, now.Time},
			},
		},
		{
			name:     "an invalid selector selects no node",
			nodes:    sriov,
			configs:  []v1alpha1.ClusterConfig{cc("bad", t0, &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "sriov", Operator: "Near"}}})},
			assigned: map[string]string{},
			outcomes: map[string]outcome{"bad": {0, metav1.ConditionFalse, v1alpha1.ReasonNoConflict, true, now.Time}},
		},
		{
			name:     "no nodes",
			configs:  []v1alpha1.ClusterConfig{cc("all", t0, nil)},
			assigned: map[string]string{},
			outcomes: map[string]outcome{"all": {0, metav1.ConditionFalse, v1alpha1.ReasonNoConflict, false, now.Time}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := fmt.Sprint(tt.configs)
			res := Compute(tt.nodes, tt.configs, now)
			if fmt.Sprint(tt.configs) != before {
				t.Error("Compute modified its input")
			}
			assigned := map[string]string{}
			for n, a := range res.Assignments {
				assigned[n] = a.ClusterConfig
				if want := a.ClusterConfig + ".example.com"; a.Spec.DriverName != want {
					t.Errorf("node %s: spec of driver %q, want the spec of %s", n, a.Spec.DriverName, a.ClusterConfig)
				}
			}
			if diff := cmp.Diff(tt.assigned, assigned); diff != "" {
				t.Errorf("assignments (-want +got):\n%s", diff)
			}
			outcomes := map[string]outcome{}
			for name, st := range res.Statuses {
				c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionConflicting)
				if c == nil {
					t.Fatalf("%s: no %s condition", name, v1alpha1.ConditionConflicting)
				}
				if st.ObservedGeneration != 3 || c.ObservedGeneration != 3 {
					t.Errorf("%s: observedGeneration %d, condition's %d, want 3", name, st.ObservedGeneration, c.ObservedGeneration)
				}
				if want := tt.message[name]; !strings.Contains(c.Message, want) {
					t.Errorf("%s: message %q does not contain %q", name, c.Message, want)
				}
				outcomes[name] = outcome{st.Nodes, c.Status, c.Reason,
					meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionInvalidNodeSelector), c.LastTransitionTime.Time}
			}
			if diff := cmp.Diff(tt.outcomes, outcomes); diff != "" {
				t.Errorf("statuses (-want +got):\n%s", diff)
			}
		})
	}
}

func deleting(c v1alpha1.ClusterConfig) v1alpha1.ClusterConfig {
	c.DeletionTimestamp = &now
	return c
}

func TestCompute_InvalidSelectorCleared(t *testing.T) {
	c := cc("fixed", t0, match("sriov=yes"))
	c.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionInvalidNodeSelector, Status: metav1.ConditionTrue}}
	st := Compute([]Node{node("n1", "sriov=yes")}, []v1alpha1.ClusterConfig{c}, now).Statuses["fixed"]
	if meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionInvalidNodeSelector) != nil {
		t.Errorf("the InvalidNodeSelector condition stayed after the selector was fixed: %+v", st.Conditions)
	}
}

func TestCompute_LongConflictMessage(t *testing.T) {
	var nodes []Node
	for i := range 25 {
		nodes = append(nodes, node(fmt.Sprintf("n%02d", i)))
	}
	res := Compute(nodes, []v1alpha1.ClusterConfig{cc("a", t0, nil), cc("b", t1, nil)}, now)
	c := meta.FindStatusCondition(res.Statuses["b"].Conditions, v1alpha1.ConditionConflicting)
	if want := `ClusterConfig "a" governs n00, n01, n02, n03, n04, n05, n06, n07, n08, n09 and 15 more. It governs none of the 25 node(s)`; !strings.Contains(c.Message, want) {
		t.Errorf("message %q does not contain %q", c.Message, want)
	}
}

func owned(name, clusterConfig string, spec v1alpha1.NodeConfigSpec) v1alpha1.NodeConfig {
	return *Generate(name, Assignment{ClusterConfig: clusterConfig, Spec: &spec})
}

func handMade(name string, spec v1alpha1.NodeConfigSpec) v1alpha1.NodeConfig {
	return v1alpha1.NodeConfig{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"team": "net"}}, Spec: spec}
}

// names lists the NodeConfigs a write touches, as "name<-clusterConfig".
func names(ncs []*v1alpha1.NodeConfig) []string {
	var out []string
	for _, nc := range ncs {
		out = append(out, nc.Name+"<-"+nc.Labels[v1alpha1.LabelClusterConfig])
	}
	return out
}

func TestDiff(t *testing.T) {
	specA := v1alpha1.NodeConfigSpec{DriverName: "a.example.com", Pools: []v1alpha1.Pool{{Name: "p"}}}
	specB := v1alpha1.NodeConfigSpec{DriverName: "b.example.com"}
	assign := func(pairs ...string) Result {
		r := Result{Assignments: map[string]Assignment{}}
		for _, p := range pairs {
			n, c, _ := strings.Cut(p, "<-")
			spec := specA
			if c == "b" {
				spec = specB
			}
			r.Assignments[n] = Assignment{ClusterConfig: c, Spec: &spec}
		}
		return r
	}
	drifted := specA
	drifted.Pools = []v1alpha1.Pool{{Name: "edited"}}
	withEmpty := specA
	withEmpty.Pools = append([]v1alpha1.Pool{}, specA.Pools...)
	withEmpty.Pools[0].Filter = &v1alpha1.PoolFilter{IfNames: []string{}}
	withNil := specA
	withNil.Pools = append([]v1alpha1.Pool{}, specA.Pools...)
	withNil.Pools[0].Filter = &v1alpha1.PoolFilter{}

	tests := []struct {
		name     string
		res      Result
		existing []v1alpha1.NodeConfig
		create   []string
		update   []string
		delete   []string
	}{
		{name: "a newly assigned node gets a NodeConfig", res: assign("n1<-a"), create: []string{"n1<-a"}},
		{name: "an up-to-date NodeConfig is left alone", res: assign("n1<-a"), existing: []v1alpha1.NodeConfig{owned("n1", "a", specA)}},
		{name: "drift is overwritten", res: assign("n1<-a"), existing: []v1alpha1.NodeConfig{owned("n1", "a", drifted)}, update: []string{"n1<-a"}},
		{name: "a moved node gets the new ClusterConfig's spec", res: assign("n1<-b"), existing: []v1alpha1.NodeConfig{owned("n1", "a", specA)}, update: []string{"n1<-b"}},
		{name: "a hand-made NodeConfig on an assigned node is taken over", res: assign("n1<-a"), existing: []v1alpha1.NodeConfig{handMade("n1", specA)}, update: []string{"n1<-a"}},
		{name: "a hand-made NodeConfig on an unassigned node is left alone", res: assign(), existing: []v1alpha1.NodeConfig{handMade("n1", specB)}},
		{name: "the operator's NodeConfig on an unassigned node is deleted", res: assign("n2<-a"), existing: []v1alpha1.NodeConfig{owned("n1", "a", specA), owned("n2", "a", specA)}, delete: []string{"n1<-a"}},
		{name: "an empty list is no drift", res: Result{Assignments: map[string]Assignment{"n1": {ClusterConfig: "a", Spec: &withEmpty}}}, existing: []v1alpha1.NodeConfig{owned("n1", "a", withNil)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			acts := Diff(tt.res, tt.existing, nil)
			got := [][]string{names(acts.Create), names(acts.Update), names(acts.Delete)}
			if diff := cmp.Diff([][]string{tt.create, tt.update, tt.delete}, got); diff != "" {
				t.Errorf("[create update delete] (-want +got):\n%s", diff)
			}
			for _, nc := range append(acts.Create, acts.Update...) {
				want := tt.res.Assignments[nc.Name].Spec
				if diff := cmp.Diff(want, &nc.Spec); diff != "" {
					t.Errorf("%s: spec (-want +got):\n%s", nc.Name, diff)
				}
				if nc.Labels[v1alpha1.LabelManagedBy] != v1alpha1.ManagedByOperator {
					t.Errorf("%s: labels %v lack the operator's", nc.Name, nc.Labels)
				}
			}
		})
	}
}

func TestDiff_TakeOverKeepsOtherLabels(t *testing.T) {
	spec := v1alpha1.NodeConfigSpec{DriverName: "a.example.com"}
	existing := []v1alpha1.NodeConfig{handMade("n1", spec)}
	existing[0].ResourceVersion = "42"
	acts := Diff(Result{Assignments: map[string]Assignment{"n1": {ClusterConfig: "a", Spec: &spec}}}, existing, nil)
	want := map[string]string{"team": "net", v1alpha1.LabelManagedBy: v1alpha1.ManagedByOperator, v1alpha1.LabelClusterConfig: "a"}
	if len(acts.Update) != 1 {
		t.Fatalf("updates %v, want n1", names(acts.Update))
	}
	if diff := cmp.Diff(want, acts.Update[0].Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if acts.Update[0].ResourceVersion != "42" {
		t.Errorf("resourceVersion %q, want 42 kept for the optimistic update", acts.Update[0].ResourceVersion)
	}
	if len(existing[0].Labels) != 1 {
		t.Errorf("Diff modified its input: %v", existing[0].Labels)
	}
}

func TestDiff_Status(t *testing.T) {
	configs := []v1alpha1.ClusterConfig{cc("a", t0, nil), cc("b", t1, nil)}
	res := Compute([]Node{node("n1")}, configs, now)
	acts := Diff(res, nil, configs)
	if len(acts.Status) != 2 {
		t.Fatalf("%d status writes, want 2 (both new)", len(acts.Status))
	}
	// Once written, the same state needs no status write.
	for i := range configs {
		configs[i].Status = res.Statuses[configs[i].Name]
	}
	later := metav1.NewTime(now.Add(time.Minute))
	acts = Diff(Compute([]Node{node("n1")}, configs, later), []v1alpha1.NodeConfig{owned("n1", "a", configs[0].Spec.Spec)}, configs)
	if !acts.Empty() {
		t.Errorf("a settled cluster still has writes: %+v", acts)
	}
}
