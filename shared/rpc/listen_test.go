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

// TestListen_SocketDir: Listen refuses a socket directory others may
// write (sticky or not), one owned by a uid that is neither root nor the
// process's, and one inside a directory others may write without the
// sticky bit; it creates nothing there. A group-writable directory (the
// node pod's shared one, setgid) and a sticky parent (/tmp) are fine.
func TestListen_SocketDir(t *testing.T) {
	tests := []struct {
		name string
		// setup makes dir's parent and dir and returns the socket's path.
		setup   func(t *testing.T, parent string) string
		wantErr string
	}{
		{"group-writable, setgid", mode(0o755, 0o2770), ""},
		{"world-writable", mode(0o755, 0o777), "anyone may create or replace sockets in it"},
		{"world-writable with the sticky bit", mode(0o755, 0o1777), "anyone may create or replace sockets in it"},
		{"inside a world-writable directory", mode(0o777, 0o755), "which has mode 0777: anyone may rename"},
		{"inside a sticky world-writable directory", mode(0o1777, 0o755), ""},
		{"owned by another uid", func(t *testing.T, parent string) string {
			if os.Geteuid() != 0 {
				t.Skip("needs root to chown")
			}
			path := mode(0o755, 0o755)(t, parent)
			if err := os.Chown(filepath.Dir(path), 65532, 65532); err != nil {
				t.Fatal(err)
			}
			return path
		}, "owned by uid 65532, neither root nor"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := tt.setup(t, filepath.Join(filepath.Dir(socketPath(t)), "p"))
			lis, err := Listen(path)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Listen: %v", err)
				}
				lis.Close()
				return
			}
			if err == nil {
				lis.Close()
				t.Fatalf("Listen succeeded, want an error containing %q", tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), filepath.Dir(path)) {
				t.Fatalf("Listen error %q, want it to name %s and contain %q", err, filepath.Dir(path), tt.wantErr)
			}
			t.Log(err)
			if err := isNotExist(path); err != nil {
				t.Errorf("after a refusal: %v", err)
			}
		})
	}
}

// mode makes parent with mode p and a directory d in it with mode d, and
// returns a socket path in d.
func mode(p, d os.FileMode) func(t *testing.T, parent string) string {
	return func(t *testing.T, parent string) string {
		dir := filepath.Join(parent, "d")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		for _, x := range []struct {
			path string
			m    os.FileMode
		}{{parent, p}, {dir, d}} {
			m := x.m.Perm()
			if x.m&0o1000 != 0 {
				m |= os.ModeSticky
			}
			if x.m&0o2000 != 0 {
				m |= os.ModeSetgid
			}
			if err := os.Chmod(x.path, m); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() { _ = os.Chmod(parent, 0o755) })
		return filepath.Join(dir, "s.sock")
	}
}

// TestCheckSocket: a socket of another uid, or with another mode than
// 0660, is not the one Listen made.
func TestCheckSocket(t *testing.T) {
	path := socketPath(t)
	lis, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	if err := checkSocket(path); err != nil {
		t.Fatalf("checkSocket of Listen's socket: %v", err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := checkSocket(path); err == nil || !strings.Contains(err.Error(), "mode 0666") {
		t.Errorf("checkSocket of a 0666 socket = %v", err)
	}
	if os.Geteuid() == 0 {
		if err := os.Chmod(path, 0o660); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(path, 65532, -1); err != nil {
			t.Fatal(err)
		}
		if err := checkSocket(path); err == nil || !strings.Contains(err.Error(), "owned by uid 65532") {
			t.Errorf("checkSocket of another uid's socket = %v", err)
		}
	}
}
