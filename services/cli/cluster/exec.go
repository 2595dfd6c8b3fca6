package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/netdra/netdra/shared/process"
)

// Exec reads a node's processes by running `<process> inspect` in their
// containers of the node pod, as `kubectl exec` does: no root on the host,
// only the exec permission on the pod.
type Exec struct {
	Client *Client
	Pod    *corev1.Pod
}

// Inspect runs the process's inspect subcommand in its container, with
// the container's own -socket, and returns the report it prints (which it
// prints also when the process is unhealthy). An error means no report.
func (e *Exec) Inspect(ctx context.Context, name string) (process.Report, error) {
	var r process.Report
	c, ok := container(e.Pod, name)
	if !ok {
		return r, fmt.Errorf("pod %s/%s has no container %s", e.Pod.Namespace, e.Pod.Name, name)
	}
	cmd := InspectCommand(c)
	var stdout, stderr bytes.Buffer
	err := e.exec(ctx, name, cmd, &stdout, &stderr)
	if jerr := json.Unmarshal(stdout.Bytes(), &r); jerr != nil {
		if err == nil {
			err = jerr
		}
		return r, fmt.Errorf("exec %s in %s/%s: %w: %s", strings.Join(cmd, " "), e.Pod.Name, name, err, strings.TrimSpace(stderr.String()))
	}
	return r, nil
}

// InspectCommand is the command that inspects the container's process:
// its binary (the container's command, else the image's /usr/local/bin/<name>)
// with inspect and the container's -socket flag, if it has one.
func InspectCommand(c *corev1.Container) []string {
	bin := path.Join("/usr/local/bin", c.Name)
	if len(c.Command) > 0 {
		bin = c.Command[0]
	}
	cmd := []string{bin, "inspect"}
	for _, a := range c.Args {
		if strings.HasPrefix(a, "-socket=") || strings.HasPrefix(a, "--socket=") {
			cmd = append(cmd, a)
		}
	}
	return cmd
}

func container(p *corev1.Pod, name string) (*corev1.Container, bool) {
	for i := range p.Spec.Containers {
		if p.Spec.Containers[i].Name == name {
			return &p.Spec.Containers[i], true
		}
	}
	return nil, false
}

// exec runs cmd in the container over the websocket protocol, falling
// back to SPDY where the apiserver or a proxy does not upgrade to it, as
// kubectl exec does.
func (e *Exec) exec(ctx context.Context, containerName string, cmd []string, stdout, stderr *bytes.Buffer) error {
	req := e.Client.Kube.CoreV1().RESTClient().Post().Resource("pods").Namespace(e.Pod.Namespace).Name(e.Pod.Name).
		SubResource("exec").VersionedParams(&corev1.PodExecOptions{Container: containerName, Command: cmd, Stdout: true, Stderr: true},
		scheme.ParameterCodec)
	spdy, err := remotecommand.NewSPDYExecutor(e.Client.Config, http.MethodPost, req.URL())
	if err != nil {
		return err
	}
	ws, err := remotecommand.NewWebSocketExecutor(e.Client.Config, http.MethodGet, req.URL().String())
	if err != nil {
		return err
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return err
	}
	return ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: stdout, Stderr: stderr})
}

func isNotFound(err error) bool {
	var se apierrors.APIStatus
	return err != nil && (apierrors.IsNotFound(err) || (errors.As(err, &se) && se.Status().Code == http.StatusNotFound))
}
