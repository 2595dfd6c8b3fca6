package manager

import (
	"testing"
	"time"
)

func TestRescanMaxAfter(t *testing.T) {
	for _, tc := range []struct{ took, want time.Duration }{
		{0, RescanMax},
		{RescanMax / 4, RescanMax},
		{time.Second, 4 * time.Second},
	} {
		if got := RescanMaxAfter(tc.took); got != tc.want {
			t.Errorf("RescanMaxAfter(%v) = %v, want %v", tc.took, got, tc.want)
		}
	}
}
