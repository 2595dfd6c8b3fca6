package metrics

import "testing"

func TestBracketed(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:9651":    "127.0.0.1:9651",
		"[fd00::1]:9651":    "[fd00::1]:9651",
		"fd00::1:9651":      "[fd00::1]:9651",
		":9651":             ":9651",
		"node.example:9651": "node.example:9651",
		"nonsense":          "nonsense",
	} {
		if got := bracketed(in); got != want {
			t.Errorf("bracketed(%q) = %q, want %q", in, got, want)
		}
	}
}
