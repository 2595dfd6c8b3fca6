package process

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/grpc/grpclog"
)

func TestLogFormatFlag(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		wantCode int
		json     bool
	}{
		{args: nil, json: true},
		{args: []string{"-log-format", "json"}, json: true},
		{args: []string{"-log-format", "TEXT"}},
		{args: []string{"-log-format", "logfmt"}, wantCode: 2},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var f Flags
			fs := flag.NewFlagSet("state", flag.ContinueOnError)
			f.Register(fs, "state")
			var out bytes.Buffer
			code := mainWith(fs, tc.args, &f, io.Discard, &out, func(_ context.Context, log *slog.Logger) error {
				log.Info("hello", "k", "v")
				return nil
			})
			if code != tc.wantCode {
				t.Fatalf("exit code %d, want %d: %s", code, tc.wantCode, out.String())
			}
			if code != 0 {
				if !strings.Contains(out.String(), "json or text") {
					t.Errorf("the refusal does not say the formats: %s", out.String())
				}
				return
			}
			line := strings.TrimSpace(out.String())
			if got := json.Valid([]byte(line)); got != tc.json {
				t.Errorf("line %q: JSON %v, want %v", line, got, tc.json)
			}
			if !strings.Contains(line, "hello") {
				t.Errorf("line %q lacks the message", line)
			}
		})
	}
}

// TestRouteGRPCLogs checks that grpc-go's lines come out of the process's
// logger, its informational ones at debug only.
func TestRouteGRPCLogs(t *testing.T) {
	defer grpclog.SetLoggerV2(grpclog.NewLoggerV2(io.Discard, io.Discard, io.Discard))
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		var out bytes.Buffer
		RouteGRPCLogs(NewLogger(&out, level, LogJSON))
		grpclog.Info("channel idle")
		grpclog.Warningf("address %s unreachable", "x")
		var msgs []string
		for line := range strings.Lines(out.String()) {
			var rec struct {
				Level, Msg, Component string
			}
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("level %v: line %q: %v", level, line, err)
			}
			if rec.Component != "grpc" {
				t.Errorf("line %q: component %q, want grpc", line, rec.Component)
			}
			msgs = append(msgs, rec.Level+" "+rec.Msg)
		}
		want := []string{"WARN address x unreachable"}
		if level == slog.LevelDebug {
			want = append([]string{"DEBUG channel idle"}, want...)
		}
		if strings.Join(msgs, "|") != strings.Join(want, "|") {
			t.Errorf("level %v: lines %q, want %q", level, msgs, want)
		}
	}
}
