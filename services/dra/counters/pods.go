package counters

import (
	"context"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
)

// KubePods names pods from the apiserver: the pods of the node in the
// namespace, remembered by UID (a pod's name never changes).
type KubePods struct {
	Kube     kubernetes.Interface
	NodeName string

	mu    sync.Mutex
	names map[string]string
}

var _ PodNamer = (*KubePods)(nil)

// PodName implements PodNamer.
func (k *KubePods) PodName(ctx context.Context, namespace, uid string) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	if name, ok := k.names[uid]; ok {
		return name
	}
	pods, err := k.Kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", k.NodeName).String()})
	if err != nil {
		return ""
	}
	k.names = map[string]string{} // the pods of now: the gone ones drop out
	for _, p := range pods.Items {
		k.names[string(p.UID)] = p.Name
	}
	return k.names[uid]
}
