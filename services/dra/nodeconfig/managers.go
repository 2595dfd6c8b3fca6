package nodeconfig

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/shared/apis/v1alpha1"
	"github.com/netdra/netdra/shared/managername"
)

// ManagerWarnings keeps the NodeConfig's DeviceManagersSettled condition
// on what the provisioner last said each device manager does not do as
// configured (an SR-IOV PF whose vfCount waits until its allocated VFs
// are freed), with the generation in force.
type ManagerWarnings struct {
	log        *slog.Logger
	status     *StatusWriter
	generation func() int64

	mu       sync.Mutex
	warnings map[string][]string // by manager name
}

// NewManagerWarnings returns the keeper of the condition, written through
// status; generation says the generation in force.
func NewManagerWarnings(log *slog.Logger, status *StatusWriter, generation func() int64) *ManagerWarnings {
	return &ManagerWarnings{log: log, status: status, generation: generation, warnings: map[string][]string{}}
}

// Set takes manager m's warnings, as the provisioner last reported them
// (none: it does what it is asked), and sets the condition; a change is
// logged.
func (w *ManagerWarnings) Set(m devicev1.DeviceManager, warnings []string) {
	generation := w.generation()
	name := managername.Of(m)
	w.mu.Lock()
	changed := !slices.Equal(w.warnings[name], warnings)
	w.warnings[name] = slices.Clone(warnings)
	cond := ManagersCondition(generation, w.warnings)
	w.mu.Unlock()
	if changed {
		w.log.Info("Device manager warnings", "manager", name, "warnings", warnings)
	}
	w.status.SetCondition(cond)
}

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
