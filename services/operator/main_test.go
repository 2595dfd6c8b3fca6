package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestRun_ExitCodes(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"help", []string{"-h"}, 0, "-leader-election-namespace"},
		{"bad flag", []string{"-refresh", "soon"}, 2, "invalid value"},
		{"extra argument", []string{"now"}, 2, "unexpected arguments"},
		{"no client rate", []string{"-kube-api-qps", "0"}, 1, "-kube-api-qps 0"},
		{"no client burst", []string{"-kube-api-burst", "-1"}, 1, "-kube-api-burst -1"},
		{"no cluster", nil, 1, "pass -kubeconfig outside a cluster"},
		{"missing kubeconfig", []string{"-kubeconfig", "/nonexistent"}, 1, "kubeconfig /nonexistent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			if code := run(context.Background(), tt.args, &stderr); code != tt.code {
				t.Errorf("exit code %d, want %d; stderr:\n%s", code, tt.code, stderr.String())
			}
			if !strings.Contains(stderr.String(), tt.stderr) {
				t.Errorf("stderr does not contain %q:\n%s", tt.stderr, stderr.String())
			}
		})
	}
}
