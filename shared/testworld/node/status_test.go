package node

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
)

func TestConfigDefaults(t *testing.T) {
	long := "/tmp/" + string(make([]byte, 120))
	tests := []struct {
		name    string
		cfg     Config
		wantErr bool
	}{
		{name: "no client", cfg: Config{NodeName: "n", RegistryDir: "/r", NRISocket: "/s"}, wantErr: true},
		{name: "socket too long", cfg: Config{Client: fakeClient(), NodeName: "n", RegistryDir: "/r", NRISocket: long}, wantErr: true},
		{name: "complete", cfg: Config{Client: fakeClient(), NodeName: "n", RegistryDir: "/r", NRISocket: "/s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.defaults()
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if err == nil && (tt.cfg.NetnsPrefix != "testworld-" || tt.cfg.Workers != 16 || tt.cfg.Capacity == nil) {
				t.Errorf("defaults not applied: %+v", tt.cfg)
			}
		})
	}
}

func TestRunningStatus(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	now := metav1.NewTime(at)
	sb := &sandbox{id: "0123456789abcdef0123456789abcdef"}
	tests := []struct {
		name        string
		hostNetwork bool
		wantPodIP   string
	}{
		{name: "pod network"},
		{name: "host network", hostNetwork: true, wantPodIP: hostIP},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{
				Spec: corev1.PodSpec{HostNetwork: tt.hostNetwork, Containers: []corev1.Container{{Name: "c", Image: "i"}}},
				Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{
					{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
				}},
			}
			st := runningStatus(pod, sb, at)
			if st.Phase != corev1.PodRunning || st.PodIP != tt.wantPodIP || st.HostIP != hostIP || !st.StartTime.Equal(&now) {
				t.Errorf("status %+v", st)
			}
			var got []corev1.PodConditionType
			for _, c := range st.Conditions {
				if c.Status == corev1.ConditionTrue {
					got = append(got, c.Type)
				}
			}
			want := []corev1.PodConditionType{corev1.PodScheduled, corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("true conditions (-want +got):\n%s", diff)
			}
			if len(st.ContainerStatuses) != 1 || !st.ContainerStatuses[0].Ready || st.ContainerStatuses[0].State.Running == nil {
				t.Errorf("container statuses %+v", st.ContainerStatuses)
			}
		})
	}
}

func TestMergeUIDs(t *testing.T) {
	got := mergeUIDs([]types.UID{"a"}, []podClaim{{claimRef: claimRef{UID: "a"}}, {claimRef: claimRef{UID: "b"}}})
	if diff := cmp.Diff([]types.UID{"a", "b"}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func fakeClient() *fake.Clientset { return fake.NewClientset() }
