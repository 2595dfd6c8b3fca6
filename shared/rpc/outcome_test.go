package rpc

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestOutcomeUnknown(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"unavailable", status.Error(codes.Unavailable, "connection reset"), true},
		{"deadline exceeded", status.Error(codes.DeadlineExceeded, "late"), true},
		{"canceled", status.Error(codes.Canceled, "gone"), true},
		{"context deadline, wrapped", fmt.Errorf("setup: %w", context.DeadlineExceeded), true},
		{"context canceled", context.Canceled, true},
		{"refused: invalid argument", status.Error(codes.InvalidArgument, "bad"), false},
		{"refused: not found", status.Error(codes.NotFound, "no link"), false},
		{"plain error", errors.New("boom"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := OutcomeUnknown(tc.err); got != tc.want {
				t.Errorf("OutcomeUnknown(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
