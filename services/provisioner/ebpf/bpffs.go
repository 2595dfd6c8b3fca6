package ebpf

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// hostNetnsID names the network namespace of the process (its main
// thread's): "net-<inode>". Pins live under it, so that provisioners in
// different namespaces sharing one bpffs (tests, each in a throwaway
// namespace standing in for the host's) never meet, while a restarted
// provisioner in the same host namespace finds its pins.
func hostNetnsID() (string, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/net", &st); err != nil {
		return "", fmt.Errorf("identifying the host netns: %w", err)
	}
	return fmt.Sprintf("net-%d", st.Ino), nil
}

// bpffsMagic is BPF_FS_MAGIC, the f_type statfs reports for a bpffs.
const bpffsMagic = 0xcafe4a11

// isBPFFS reports whether dir is on a bpffs.
func isBPFFS(dir string) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return uint32(st.Type) == bpffsMagic, nil
}

// mountBPFFS makes sure mnt is a bpffs: it is left alone when it is one,
// and a bpffs is mounted on it (created if missing) otherwise.
func mountBPFFS(mnt string) error {
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		return fmt.Errorf("creating bpffs mount point: %w", err)
	}
	ok, err := isBPFFS(mnt)
	if err != nil || ok {
		return err
	}
	if err := unix.Mount("bpf", mnt, "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("mounting a bpffs on %s: %w: %w", mnt, ErrNotBPFFS, err)
	}
	return nil
}

// pinRoot mounts a bpffs on bpffs unless one is there and creates the pin
// directory <bpffs>/<name>/net-<host netns inode>, which it returns.
func pinRoot(bpffs, name string) (string, error) {
	if err := mountBPFFS(bpffs); err != nil {
		return "", err
	}
	id, err := hostNetnsID()
	if err != nil {
		return "", err
	}
	root := filepath.Join(bpffs, name, id)
	if err := os.MkdirAll(root, 0o700); err != nil {
		return "", fmt.Errorf("creating pin directory: %w", err)
	}
	return root, nil
}
