package process

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
			code := mainWith(fs, tt.args, &f, &out, func(context.Context, *slog.Logger) error {
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
		code := mainWith(fs, []string{"health", "-socket", sock}, &f, &out, func(context.Context, *slog.Logger) error {
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
