package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The users every image knows, as distroless's static base has them (the
// base pods/Dockerfile builds on): names for uid 0 and 65532, and the
// home directories they point to.
const (
	passwd = "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
		"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group = "root:x:0:\n" +
		"nobody:x:65534:\n" +
		"nonroot:x:65532:\n"
)

// entry is one file or directory of an image's only layer.
type entry struct {
	name     string // relative; a directory's ends in /
	mode     int64
	uid, gid int
	data     []byte // a regular file's content
}

// rootfs is everything an image holds: the distroless skeleton the
// processes may look at (the users, a home for each, /tmp) and the
// binaries (bins, by program name), executable by every user and owned by
// the image's user: a process may have the kernel page out its own
// binary's pages only when it owns the file (process.RunServer gives its
// start-up pages back); the root filesystem is read-only, so owning the
// file lets it change nothing. No mount points: the runtime creates those before it makes the
// root read-only.
func rootfs(img image, bins map[string][]byte) []entry {
	entries := []entry{
		{name: "etc/", mode: 0o755},
		{name: "etc/group", mode: 0o644, data: []byte(group)},
		{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "home/", mode: 0o755},
		{name: "home/nonroot/", mode: 0o700, uid: 65532, gid: 65532},
		{name: "root/", mode: 0o700},
		{name: "tmp/", mode: 0o1777},
		{name: "usr/", mode: 0o755},
		{name: "usr/local/", mode: 0o755},
		{name: "usr/local/bin/", mode: 0o755},
	}
	for _, p := range img.programs() {
		entries = append(entries, entry{name: strings.TrimPrefix(path.Join(binDir, p.name), "/"), mode: 0o755, uid: img.uid, gid: img.gid, data: bins[p.name]})
	}
	return entries
}

// newLayer packs the image's root into a gzip-compressed OCI layer whose
// every entry has the time mtime, so that the same binaries (in dir) always
// give the same layer digest.
func newLayer(img image, dir string, mtime time.Time) (v1.Layer, error) {
	bins := map[string][]byte{}
	for _, p := range img.programs() {
		b, err := os.ReadFile(filepath.Join(dir, p.name))
		if err != nil {
			return nil, err
		}
		bins[p.name] = b
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range rootfs(img, bins) {
		h := &tar.Header{Name: e.name, Mode: e.mode, Uid: e.uid, Gid: e.gid, ModTime: mtime}
		if strings.HasSuffix(e.name, "/") {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", e.name, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
}
