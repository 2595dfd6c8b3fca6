package node

import (
	"context"
	"fmt"
	goruntime "runtime"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

const (
	// hostIP is the node's only address: everything runs on loopback.
	hostIP = "127.0.0.1"
	// KubeletVersion is what the Node reports as its kubelet version.
	KubeletVersion = "v1.37.2"
	// RuntimeVersion is what the Node reports as its container runtime.
	RuntimeVersion = "testworld://0.1.0"

	leaseNamespace   = "kube-node-lease"
	leaseDuration    = 40 * time.Second
	heartbeatPeriod  = 10 * time.Second
	notReadyTaintKey = "node.kubernetes.io/not-ready"
	unreachableTaint = "node.kubernetes.io/unreachable"
)

// register creates the Node object (or adopts an existing one), makes it
// Ready through UpdateStatus and removes the taints the node-lifecycle
// controller would remove, since the control plane runs without it.
func (n *Node) register(ctx context.Context) error {
	nodes := n.client.CoreV1().Nodes()
	labels := map[string]string{
		corev1.LabelHostname:   n.cfg.NodeName,
		corev1.LabelOSStable:   "linux",
		corev1.LabelArchStable: goruntime.GOARCH,
	}
	for k, v := range n.cfg.Labels {
		labels[k] = v
	}
	_, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.cfg.NodeName, Labels: labels}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating node %s: %w", n.cfg.NodeName, err)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := nodes.Get(ctx, n.cfg.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		node.Status = n.readyStatus(node.Status)
		_, err = nodes.UpdateStatus(ctx, node, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("making node %s ready: %w", n.cfg.NodeName, err)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := nodes.Get(ctx, n.cfg.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var kept []corev1.Taint
		for _, t := range node.Spec.Taints {
			if t.Key != notReadyTaintKey && t.Key != unreachableTaint {
				kept = append(kept, t)
			}
		}
		if len(kept) == len(node.Spec.Taints) {
			return nil
		}
		node.Spec.Taints = kept
		_, err = nodes.Update(ctx, node, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("removing the not-ready taint of node %s: %w", n.cfg.NodeName, err)
	}
	return nil
}

func (n *Node) readyStatus(old corev1.NodeStatus) corev1.NodeStatus {
	now := metav1.Now()
	condition := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: now}
	}
	st := old
	st.Capacity = n.cfg.Capacity.DeepCopy()
	st.Allocatable = n.cfg.Capacity.DeepCopy()
	st.Conditions = []corev1.NodeCondition{
		condition(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
		condition(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
		condition(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
		condition(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "testworld node is posting ready status"),
	}
	st.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: hostIP},
		{Type: corev1.NodeHostName, Address: n.cfg.NodeName},
	}
	st.NodeInfo = corev1.NodeSystemInfo{
		KubeletVersion:          KubeletVersion,
		ContainerRuntimeVersion: RuntimeVersion,
		OperatingSystem:         "linux",
		Architecture:            goruntime.GOARCH,
		OSImage:                 "testworld",
	}
	return st
}

// heartbeat keeps the node's Lease fresh, as the kubelet does, until ctx
// ends. Nothing in the control plane acts on a stale Lease (the
// node-lifecycle controller is off), so failures are only logged.
func (n *Node) heartbeat(ctx context.Context) {
	t := time.NewTicker(heartbeatPeriod)
	defer t.Stop()
	for {
		if err := n.renewLease(ctx); err != nil && ctx.Err() == nil {
			n.log.Warn("renewing node lease", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (n *Node) renewLease(ctx context.Context) error {
	leases := n.client.CoordinationV1().Leases(leaseNamespace)
	now := metav1.NewMicroTime(time.Now())
	lease, err := leases.Get(ctx, n.cfg.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		node, err := n.client.CoreV1().Nodes().Get(ctx, n.cfg.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Name: n.cfg.NodeName, Namespace: leaseNamespace,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}},
			},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(n.cfg.NodeName),
				LeaseDurationSeconds: ptr.To(int32(leaseDuration.Seconds())),
				RenewTime:            &now,
			},
		}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	lease.Spec.RenewTime = &now
	_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	return err
}
