package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestInitDir runs `state init-dir` as the node pod's init container does
// (as the directory's owner, to one of its groups): the directory ends up
// in the group with mode 2770; a group the caller is not in is refused
// with the directory and the group named.
func TestInitDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "netdra")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sockets := filepath.Join(t.TempDir(), "sockets")
	if err := os.Mkdir(sockets, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sockets, 0o777|os.ModeSetgid); err != nil { // as the kubelet makes an emptyDir with an fsGroup
		t.Fatal(err)
	}
	gid := os.Getgid()
	var stderr bytes.Buffer
	if code := initDir([]string{"-db", filepath.Join(dir, "state.db"), "-group", strconv.Itoa(gid), "-socket-dir", sockets}, &stderr); code != 0 {
		t.Fatalf("init-dir: exit %d: %s", code, stderr.String())
	}
	if fi, err := os.Stat(sockets); err != nil || fi.Mode()&(os.ModePerm|os.ModeSetgid) != 0o770|os.ModeSetgid {
		t.Errorf("sockets' directory: %v %v, want drwxrws---", fi.Mode(), err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode() & (os.ModePerm | os.ModeSetgid); got != 0o770|os.ModeSetgid {
		t.Errorf("mode %v, want drwxrws---", got)
	}
	if st := fi.Sys().(*syscall.Stat_t); int(st.Gid) != gid {
		t.Errorf("group %d, want %d", st.Gid, gid)
	}
	if os.Geteuid() == 0 {
		return // root may chgrp to any group
	}
	stderr.Reset()
	if code := initDir([]string{"-db", filepath.Join(dir, "state.db"), "-group", "1"}, &stderr); code != 1 ||
		!strings.Contains(stderr.String(), dir) || !strings.Contains(stderr.String(), "group 1") {
		t.Errorf("init-dir to a foreign group: exit %d: %s", code, stderr.String())
	}
}
