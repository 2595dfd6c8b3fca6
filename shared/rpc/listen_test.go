package rpc

import (
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestListen(t *testing.T) {
	tests := []struct {
		name string
		// setup prepares path, whose parent dirs do not exist yet.
		setup   func(t *testing.T, path string)
		wantErr string // substring; empty means Listen must succeed
		// after checks path once Listen returned.
		after func(t *testing.T, path string)
	}{
		{
			name: "fresh path in missing dirs",
		},
		{
			name: "stale socket of a closed listener",
			setup: func(t *testing.T, path string) {
				l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
				if err != nil {
					t.Fatal(err)
				}
				l.SetUnlinkOnClose(false)
				l.Close()
				mustBeSocket(t, path)
			},
		},
		{
			name: "socket file bound but never listened",
			setup: func(t *testing.T, path string) {
				fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
				if err != nil {
					t.Fatal(err)
				}
				defer unix.Close(fd)
				if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
					t.Fatal(err)
				}
				mustBeSocket(t, path)
			},
		},
		{
			name: "live server",
			setup: func(t *testing.T, path string) {
				l, err := net.Listen("unix", path)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { l.Close() })
			},
			wantErr: "a server is already listening",
			after:   mustBeSocket,
		},
		{
			name: "regular file",
			setup: func(t *testing.T, path string) {
				if err := os.WriteFile(path, []byte("keep"), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			wantErr: "is not a socket",
			after: func(t *testing.T, path string) {
				b, err := os.ReadFile(path)
				if err != nil || string(b) != "keep" {
					t.Errorf("regular file was touched: %q, %v", b, err)
				}
			},
		},
		{
			name: "directory",
			setup: func(t *testing.T, path string) {
				if err := os.Mkdir(path, 0o755); err != nil {
					t.Fatal(err)
				}
			},
			wantErr: "is not a socket",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(filepath.Dir(socketPath(t)), "a", "b", "s.sock")
			if tt.setup != nil {
				mkParent(t, path)
				tt.setup(t, path)
			}
			lis, err := Listen(path)
			if tt.after != nil {
				defer tt.after(t, path)
			}
			if tt.wantErr != "" {
				if err == nil {
					lis.Close()
					t.Fatalf("Listen succeeded, want error containing %q", tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Listen error %q, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Listen: %v", err)
			}
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := fi.Mode().Type(), fs.ModeSocket; got != want {
				t.Errorf("file type %v, want %v", got, want)
			}
			if got, want := fi.Mode().Perm(), fs.FileMode(0o660); got != want {
				t.Errorf("socket mode %#o, want %#o", got, want)
			}
			c, err := net.Dial("unix", path)
			if err != nil {
				t.Fatalf("connect to new socket: %v", err)
			}
			c.Close()
			if err := lis.Close(); err != nil {
				t.Fatal(err)
			}
			if err := isNotExist(path); err != nil {
				t.Errorf("after Close: %v", err)
			}
		})
	}
}

func TestListenPathTooLong(t *testing.T) {
	path := "/tmp/" + strings.Repeat("x", 120) + ".sock"
	lis, err := Listen(path)
	if err == nil {
		lis.Close()
		t.Fatal("Listen succeeded on an over-long path")
	}
	if !strings.Contains(err.Error(), "byte limit") {
		t.Errorf("error %q does not explain the length limit", err)
	}
}

func mkParent(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
}

func mustBeSocket(t *testing.T, path string) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		t.Fatalf("%s is %v, want a socket", path, fi.Mode())
	}
}
