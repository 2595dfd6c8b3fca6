package nodeconfig

import (
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netdra/netdra/shared/apis/v1alpha1"
)

// TestManagersCondition: True without warnings; False with each warning
// after its manager's name, managers by name; a message that would be too
// long counts the warnings left out.
func TestManagersCondition(t *testing.T) {
	c := ManagersCondition(4, map[string][]string{"dummy": nil, "sr-iov": {}})
	if c.Type != v1alpha1.ConditionDeviceManagersSettled || c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonManagersSettled || c.ObservedGeneration != 4 {
		t.Errorf("no warnings: %+v", c)
	}
	waits := "PF eth1: vfCount 4 waits until its 2 allocated VFs are freed (it keeps its 2 VFs until then)"
	c = ManagersCondition(5, map[string][]string{"sr-iov": {waits, "PF eth2: vfCount 3 waits until its allocated VF is freed (it keeps its 1 VFs until then)"},
		"host": {"stopped: no sysfs"}})
	want := "host: stopped: no sysfs; sr-iov: " + waits + "; sr-iov: PF eth2: vfCount 3 waits until its allocated VF is freed (it keeps its 1 VFs until then)"
	if c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonManagersWaiting || c.Message != want || c.ObservedGeneration != 5 {
		t.Errorf("warnings: %+v, want False, %s, %q", c, v1alpha1.ReasonManagersWaiting, want)
	}

	var many []string
	for i := range 200 {
		many = append(many, fmt.Sprintf("PF eth%d: vfCount 4 waits until its 2 allocated VFs are freed (it keeps its 2 VFs until then)", i))
	}
	c = ManagersCondition(1, map[string][]string{"sr-iov": many})
	if len(c.Message) > maxManagersMessage {
		t.Errorf("message of %d bytes, more than %d", len(c.Message), maxManagersMessage)
	}
	shown := strings.Count(c.Message, "sr-iov: ")
	if !strings.HasSuffix(c.Message, fmt.Sprintf("; and %d more", 200-shown)) || shown == 0 {
		t.Errorf("message ends %q with %d warnings shown, want the other %d counted", c.Message[len(c.Message)-40:], shown, 200-shown)
	}
}
