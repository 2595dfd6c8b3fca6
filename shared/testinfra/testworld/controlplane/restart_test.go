package controlplane_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netdra/netdra/shared/testinfra/testworld/controlplane"
	"github.com/netdra/netdra/shared/testinfra/testworld/worldtest"
)

// TestRestart restarts a control plane, gracefully and then as a crash: it
// comes back on the same address with the same certificates (the client
// made before keeps working), with a new process, and with the objects
// written before.
func TestRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cp, err := controlplane.Start(ctx, controlplane.Options{Dir: t.TempDir(), Logger: worldtest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Stop()
	c := cp.Client()
	server := cp.Server()
	for i, kill := range []bool{false, true} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "before-restart-" + string(rune('a'+i))}, Data: map[string]string{"k": "v"}}
		if _, err := c.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pid, exited := cp.PID(), cp.Exited()
		if err := cp.Restart(ctx, kill); err != nil {
			t.Fatalf("Restart(kill=%v): %v", kill, err)
		}
		select {
		case <-exited:
		default:
			t.Errorf("Restart(kill=%v): the old child %d has not exited", kill, pid)
		}
		if cp.PID() == pid {
			t.Errorf("Restart(kill=%v): same child pid %d", kill, pid)
		}
		if cp.Server() != server {
			t.Errorf("Restart(kill=%v): server %s, want %s", kill, cp.Server(), server)
		}
		got, err := c.CoreV1().ConfigMaps("default").Get(ctx, cm.Name, metav1.GetOptions{})
		if err != nil || got.Data["k"] != "v" {
			t.Errorf("Restart(kill=%v): configmap written before: %v %v", kill, got, err)
		}
		// The controller-manager runs again: a new namespace gets its
		// ServiceAccount.
		worldtest.Namespace(t, c)
	}
	if err := cp.Stop(); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if err := cp.Restart(ctx, false); err == nil {
		t.Error("Restart after Stop: no error")
	}
}
