package kernelrig

import (
	"fmt"
	"testing"
)

// fakeTB records Fatalf instead of stopping the goroutine.
type fakeTB struct {
	testing.TB
	failed bool
	msg    string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed = true
	f.msg = fmt.Sprintf(format, args...)
}

func TestRequire(t *testing.T) {
	for _, tc := range []struct {
		name, env string
		fail      bool
	}{
		{name: "outside the rig", env: "", fail: true},
		{name: "wrong value", env: "true", fail: true},
		{name: "inside the rig", env: "1", fail: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(EnvVar, tc.env)
			f := &fakeTB{TB: t}
			Require(f)
			if f.failed != tc.fail {
				t.Fatalf("Require with %s=%q: failed=%v (%q), want failed=%v", EnvVar, tc.env, f.failed, f.msg, tc.fail)
			}
		})
	}
}
