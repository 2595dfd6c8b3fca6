package nodeconfig

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netdra/netdra/shared/apis/v1alpha1"
)

// maxManagersMessage bounds the DeviceManagersSettled message: a node with
// many waiting PFs says how many more there are rather than each.
const maxManagersMessage = 4096

// ManagersCondition is the DeviceManagersSettled condition of the device
// managers' warnings, by manager name ("sr-iov"), as the provisioner last
// reported them under the configuration of generation: True when there is
// none; False with the warnings as message, each after its manager's name
// ("sr-iov: PF eth1: vfCount 4 waits until its 2 allocated VFs are freed
// (it keeps its 2 VFs until then)"), by manager name, as many as fit in
// maxManagersMessage and the others counted.
func ManagersCondition(generation int64, warnings map[string][]string) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionDeviceManagersSettled, Status: metav1.ConditionTrue,
		Reason: v1alpha1.ReasonManagersSettled, Message: "every device manager does what the configuration asks",
		ObservedGeneration: generation}
	var all []string
	for _, m := range slices.Sorted(maps.Keys(warnings)) {
		for _, w := range warnings[m] {
			all = append(all, m+": "+w)
		}
	}
	if len(all) == 0 {
		return c
	}
	var msg strings.Builder
	for i, w := range all {
		more := fmt.Sprintf("; and %d more", len(all)-i)
		if i > 0 && msg.Len()+len("; ")+len(w)+len(more) > maxManagersMessage {
			msg.WriteString(more)
			break
		}
		if i > 0 {
			msg.WriteString("; ")
		}
		msg.WriteString(w)
	}
	c.Status, c.Reason, c.Message = metav1.ConditionFalse, v1alpha1.ReasonManagersWaiting, msg.String()
	return c
}
