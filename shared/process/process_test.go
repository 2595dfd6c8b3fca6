package process

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"

	"github.com/netdra/netdra/shared/rpc"
)

func TestMain_FlagsAndExitCodes(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		runErr   error
		wantCode int
		wantRun  bool
		wantOut  string
	}{
		{name: "clean run", args: []string{"-log-level", "debug"}, wantRun: true},
		{name: "run error", runErr: errors.New("boom"), wantCode: 1, wantRun: true, wantOut: "boom"},
		{name: "bad flag", args: []string{"-nope"}, wantCode: 2},
		{name: "bad uid list", args: []string{"-allowed-uids", "x"}, wantCode: 2},
		{name: "stray argument", args: []string{"extra"}, wantCode: 2, wantOut: "unexpected arguments"},
		{name: "help", args: []string{"-h"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f Flags
			fs := flag.NewFlagSet("x", flag.ContinueOnError)
			f.Register(fs, "x")
			var out bytes.Buffer
			ran := false
			code := mainWith(fs, tt.args, &f, io.Discard, &out, func(context.Context, *slog.Logger) error {
				ran = true
				return tt.runErr
			})
			if code != tt.wantCode || ran != tt.wantRun || !strings.Contains(out.String(), tt.wantOut) {
				t.Errorf("code %d ran %v out %q; want %d %v %q", code, ran, out.String(), tt.wantCode, tt.wantRun, tt.wantOut)
			}
			if f.Socket != "/run/netdra/x.sock" {
				t.Errorf("default socket %q", f.Socket)
			}
		})
	}
}

func TestMain_HealthSubcommand(t *testing.T) {
	dir, err := os.MkdirTemp("", "pr")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "x.sock")
	health := func() (int, string) {
		var f Flags
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		f.Register(fs, "x")
		var out bytes.Buffer
		code := mainWith(fs, []string{"health", "-socket", sock}, &f, io.Discard, &out, func(context.Context, *slog.Logger) error {
			t.Error("health ran the process")
			return nil
		})
		return code, out.String()
	}
	if code, out := health(); code != 1 || !strings.Contains(out, sock) {
		t.Errorf("no server: code %d, %q", code, out)
	}
	srv := rpc.NewServer(rpc.ServerConfig{SocketPath: sock, Logger: slog.New(slog.DiscardHandler)})
	done := make(chan error, 1)
	go func() { done <- srv.Serve() }()
	defer func() { srv.Stop(); <-done }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, out := health()
		if code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("serving: code %d, %q", code, out)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestMain_InspectSubcommand: `x inspect` prints a Report: unhealthy with
// the reason when nothing serves; healthy, with the version and the
// Inspector's reply as protojson, when the socket serves. It never runs
// the process.
func TestMain_InspectSubcommand(t *testing.T) {
	dir, err := os.MkdirTemp("", "pr")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "x.sock")
	inspect := func() (int, Report) {
		var f Flags
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		f.Register(fs, "x")
		f.Inspect = func(ctx context.Context, cc *grpc.ClientConn) (proto.Message, error) {
			return healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
		}
		var out bytes.Buffer
		code := mainWith(fs, []string{"inspect", "-socket", sock}, &f, &out, io.Discard, func(context.Context, *slog.Logger) error {
			t.Error("inspect ran the process")
			return nil
		})
		var r Report
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			t.Fatalf("inspect printed no report: %v: %q", err, out.String())
		}
		return code, r
	}
	if code, r := inspect(); code != 1 || r.Healthy || !strings.Contains(r.HealthError, sock) || r.Process != "x" || r.Version == "" {
		t.Errorf("no server: code %d, %+v", code, r)
	}
	srv := rpc.NewServer(rpc.ServerConfig{SocketPath: sock, Logger: slog.New(slog.DiscardHandler)})
	done := make(chan error, 1)
	go func() { done <- srv.Serve() }()
	defer func() { srv.Stop(); <-done }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, r := inspect()
		if code == 0 {
			if !r.Healthy || string(r.Status) == "" || !strings.Contains(string(r.Status), "SERVING") {
				t.Errorf("serving: %+v (status %s)", r, r.Status)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("serving: code %d, %+v", code, r)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
