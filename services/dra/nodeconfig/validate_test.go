package nodeconfig

import (
	"strings"
	"testing"

	"github.com/netdra/netdra/shared/apis/v1alpha1"
)

// TestValidate_SlicePoolLength: a pool whose slice pool name <node>/<pool>
// would pass the API's 253 characters is refused, naming the field.
func TestValidate_SlicePoolLength(t *testing.T) {
	node := strings.Repeat("n", 200)
	spec := func(pool string) *v1alpha1.NodeConfigSpec {
		return v1alpha1.Default(&v1alpha1.NodeConfigSpec{Pools: []v1alpha1.Pool{{Name: "ok"}, {Name: pool}}})
	}
	if err := validate(node, spec(strings.Repeat("p", 52))); err != nil {
		t.Errorf("253 characters: %v", err)
	}
	err := validate(node, spec(strings.Repeat("p", 53)))
	if err == nil || !strings.Contains(err.Error(), "pools[1].name") || !strings.Contains(err.Error(), "253") {
		t.Errorf("254 characters: %v, want an error naming pools[1].name", err)
	}
	if err := validate("n1", spec(strings.Repeat("p", 53))); err != nil {
		t.Errorf("short node: %v", err)
	}
}
