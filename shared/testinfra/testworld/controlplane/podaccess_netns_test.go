package controlplane_test

import (
	"context"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/netdra/netdra/shared/testinfra/testenv"
	"github.com/netdra/netdra/shared/testinfra/testworld/controlplane"
	"github.com/netdra/netdra/shared/testinfra/testworld/worldtest"
)

// TestPodAccess checks that the control plane issues ServiceAccount tokens
// as a cluster does and that a pod's in-cluster configuration works with
// them: a token from the TokenRequest API (what the kubelet asks for a
// projected token), bound to a pod, with the CA of the kube-root-ca.crt
// ConfigMap (the root CA publisher), authenticates as the ServiceAccount at
// the kubernetes Service's ClusterIP:443, which the serving certificate
// names. After Stop the ClusterIP is gone from lo.
func TestPodAccess(t *testing.T) {
	testenv.RequireRoot(t, "adds the kubernetes Service's ClusterIP to lo")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cp, err := controlplane.Start(ctx, controlplane.Options{Dir: t.TempDir(), Logger: worldtest.Logger(t), PodAccess: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Stop()
	c := cp.Client()
	// The apiserver's bootstrap controller makes the Service shortly after
	// the apiserver is ready.
	var svc *corev1.Service
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var gerr error
		svc, gerr = c.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
		return gerr == nil, nil
	})
	if err != nil {
		t.Fatalf("the kubernetes Service: %v", err)
	}
	host, port, _ := net.SplitHostPort(cp.KubernetesService())
	if svc.Spec.ClusterIP != host || port != "443" || svc.Spec.Ports[0].Port != 443 {
		t.Fatalf("kubernetes Service %s:%d, the control plane says %s", svc.Spec.ClusterIP, svc.Spec.Ports[0].Port, cp.KubernetesService())
	}
	ns := worldtest.Namespace(t, c)
	pod := saPod(t, ctx, c, ns)
	cfg := &rest.Config{Host: "https://" + cp.KubernetesService(), BearerToken: podToken(t, ctx, c, pod),
		TLSClientConfig: rest.TLSClientConfig{CAData: []byte(rootCA(t, ctx, c, ns))}}
	sc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := sc.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("in-cluster client at %s: %v", cfg.Host, err)
	}
	if u := rev.Status.UserInfo; u.Username != "system:serviceaccount:"+ns+":default" {
		t.Errorf("the token authenticates as %q, want the ServiceAccount", u.Username)
	} else if got := u.Extra["authentication.kubernetes.io/pod-name"]; len(got) != 1 || got[0] != pod.Name {
		t.Errorf("the token is not bound to the pod: extra %v", u.Extra)
	}
	if err := cp.Stop(); err != nil {
		t.Fatal(err)
	}
	if out, _ := exec.Command("ip", "-4", "addr", "show", "dev", "lo").Output(); strings.Contains(string(out), " "+host+"/32") {
		t.Errorf("ClusterIP %s left on lo after Stop:\n%s", host, out)
	}
}

// saPod creates a pod (never scheduled) for a token to be bound to.
func saPod(t *testing.T, ctx context.Context, c kubernetes.Interface, ns string) *corev1.Pod {
	t.Helper()
	pod, err := c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "in-cluster"},
		Spec: corev1.PodSpec{NodeName: "nowhere", Containers: []corev1.Container{{Name: "c", Image: "none"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

// podToken asks the TokenRequest API for a token of the pod's
// ServiceAccount bound to the pod, as the kubelet does for a projected
// serviceAccountToken volume.
func podToken(t *testing.T, ctx context.Context, c kubernetes.Interface, pod *corev1.Pod) string {
	t.Helper()
	tr, err := c.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, pod.Spec.ServiceAccountName, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3607),
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest: %v", err)
	}
	return tr.Status.Token
}

// rootCA waits for the namespace's kube-root-ca.crt ConfigMap.
func rootCA(t *testing.T, ctx context.Context, c kubernetes.Interface, ns string) string {
	t.Helper()
	var ca string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		cm, err := c.CoreV1().ConfigMaps(ns).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		ca = cm.Data["ca.crt"]
		return ca != "", nil
	})
	if err != nil {
		t.Fatalf("no kube-root-ca.crt in %s: %v", ns, err)
	}
	return ca
}
