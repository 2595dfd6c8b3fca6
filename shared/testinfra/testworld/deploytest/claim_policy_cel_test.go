package deploytest

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apiserver/pkg/cel/environment"
)

// TestClaimPolicy_Compiles compiles every expression of the chart's claim
// policy with the apiserver's CEL environment, its variables declared as
// dyn: a syntax error or an unknown function fails here, without a control
// plane.
func TestClaimPolicy_Compiles(t *testing.T) {
	objs := renderChart(t, "--show-only", "templates/claim-policy.yaml")
	policy := typed[admissionv1.ValidatingAdmissionPolicy](t, find(t, objs, "ValidatingAdmissionPolicy", "netdra-claims"))
	env, err := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()).Env(environment.StoredExpressions)
	if err != nil {
		t.Fatal(err)
	}
	var exprs []string
	for _, v := range policy.Spec.Variables {
		exprs = append(exprs, v.Expression)
	}
	for _, v := range policy.Spec.Validations {
		exprs = append(exprs, v.Expression, v.MessageExpression)
	}
	for _, e := range exprs {
		if _, iss := env.Parse(e); iss.Err() != nil {
			t.Errorf("%s", iss.Err())
		}
	}
}

// TestClaimPolicy_Cases evaluates the policy's validations in-process, with
// variables.params and variables.at as the policy's variables make them,
// on each of claimPolicyCases and docs/claims.md's example: a quick check of what
// TestClaimPolicy checks against the apiserver.
func TestClaimPolicy_Cases(t *testing.T) {
	objs := renderChart(t, "--show-only", "templates/claim-policy.yaml")
	policy := typed[admissionv1.ValidatingAdmissionPolicy](t, find(t, objs, "ValidatingAdmissionPolicy", "netdra-claims"))
	base, err := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()).Env(environment.StoredExpressions)
	if err != nil {
		t.Fatal(err)
	}
	env, err := base.Extend(cel.Variable("variables", cel.MapType(cel.StringType, cel.DynType)))
	if err != nil {
		t.Fatal(err)
	}
	program := func(e string) cel.Program {
		ast, iss := env.Compile(e)
		if iss.Err() != nil {
			t.Fatalf("%s", iss.Err())
		}
		p, err := env.Program(ast)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	type rule struct{ ok, msg cel.Program }
	var rules []rule
	for _, v := range policy.Spec.Validations {
		rules = append(rules, rule{program(v.Expression), program(v.MessageExpression)})
	}
	const at = "spec.devices.config[1].opaque.parameters."
	refusal := func(params []byte) string {
		var p any
		if err := json.Unmarshal(params, &p); err != nil {
			t.Fatal(err)
		}
		p = intsOf(p)
		vars := map[string]any{"variables": map[string]any{"params": []any{p}, "at": []any{at}}}
		for _, r := range rules {
			out, _, err := r.ok.Eval(vars)
			if err != nil {
				return "error: " + err.Error()
			}
			if out.Value() != true {
				m, _, err := r.msg.Eval(vars)
				if err != nil {
					return "message error: " + err.Error()
				}
				return m.Value().(string)
			}
		}
		return ""
	}
	if got := refusal(claimsDocExample(t)); got != "" {
		t.Errorf("docs/claims.md's example: %s", got)
	}
	for _, tc := range claimPolicyCases {
		if got := refusal([]byte(tc.params)); !strings.HasPrefix(got, at+tc.field+": ") {
			t.Errorf("%s: %s: refused with %q, want one naming %s", tc.name, tc.params, got, tc.field)
		}
	}
}

// intsOf makes JSON's integral numbers int64, as the apiserver gives them
// to CEL.
func intsOf(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = intsOf(e)
		}
	case []any:
		for i, e := range v {
			v[i] = intsOf(e)
		}
	case float64:
		if v == float64(int64(v)) {
			return int64(v)
		}
	}
	return v
}
