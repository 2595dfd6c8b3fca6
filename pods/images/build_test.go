package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// TestBuild_ReadBack builds the state image the way make images does and
// reads the archive back with go-containerregistry: index.json names the
// image for containerd, the image is valid (every digest and diff ID
// matches its content), its config has the user, entrypoint and labels,
// its one layer holds the static binary owned by the image's user (state's:
// 65532, so that it may page out its own binary's pages) with mode 0755
// and the users, and packing the same binary again gives the same bytes.
func TestBuild_ReadBack(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the state binary (-short)")
	}
	img, _ := lookup("state")
	dir := t.TempDir()
	if err := buildBinaries(context.Background(), "go", repoRoot, dir, runtime.GOARCH, "test", []string{img.service}); err != nil {
		t.Fatal(err)
	}
	c := config{out: filepath.Join(dir, "a"), prefix: "registry.example.com/netdra", tag: "v9.9.9", archs: []string{runtime.GOARCH}, prov: provenance{
		source: "https://example.com/netdra", version: "v9.9.9", revision: "0123456789abcdef", licenses: "Apache-2.0",
		created: time.Unix(1700000000, 0).UTC(),
	}}
	res := packTo(t, img, dir, c)

	checkArchiveEntries(t, res.path, c.prov.created)
	oci := readLayout(t, res.path, map[string]string{
		annotationImageName: "registry.example.com/netdra/state:v9.9.9",
		annotationRefName:   "v9.9.9",
	})
	if d, _ := oci.Digest(); d.String() != res.digest {
		t.Errorf("the archive's image is %s; pack said %s", d, res.digest)
	}
	checkConfig(t, oci, img, c)
	checkLayer(t, oci, img, c.prov.created)

	again := c
	again.out = filepath.Join(dir, "b")
	res2 := packTo(t, img, dir, again)
	if a, b := fileSum(t, res.path), fileSum(t, res2.path); a != b {
		t.Errorf("the same binary packed twice gives two archives (%x, %x)", a, b)
	}
}

func packTo(t *testing.T, img image, dir string, c config) packed {
	t.Helper()
	if err := os.MkdirAll(c.out, 0o755); err != nil {
		t.Fatal(err)
	}
	res, err := pack(img, dir, c)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// checkArchiveEntries: the archive's own entries are root's and dated at
// the image's time, and it holds an OCI layout.
func checkArchiveEntries(t *testing.T, archive string, created time.Time) {
	t.Helper()
	names := map[string]bool{}
	forEachEntry(t, archive, func(h *tar.Header, _ io.Reader) {
		names[h.Name] = true
		if !h.ModTime.Equal(created) || h.Uid != 0 || h.Gid != 0 {
			t.Errorf("archive entry %s: time %s, owner %d:%d; want %s, 0:0", h.Name, h.ModTime, h.Uid, h.Gid, created)
		}
	})
	for _, n := range []string{"oci-layout", "index.json", "blobs/sha256/"} {
		if !names[n] {
			t.Errorf("archive has no %s", n)
		}
	}
}

// readLayout unpacks the archive and returns its one image, checking the
// annotations and platform index.json gives it.
func readLayout(t *testing.T, archive string, annotations map[string]string) v1.Image {
	t.Helper()
	idx := unpackLayout(t, archive)
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("index.json lists %d manifests, want 1", len(im.Manifests))
	}
	desc := im.Manifests[0]
	if diff := cmp.Diff(annotations, desc.Annotations); diff != "" {
		t.Errorf("index.json's annotations (-want +got):\n%s", diff)
	}
	if p := desc.Platform; p == nil || p.OS != "linux" || p.Architecture != runtime.GOARCH {
		t.Errorf("index.json's platform %+v, want linux/%s", p, runtime.GOARCH)
	}
	oci, err := idx.Image(desc.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Image(oci); err != nil {
		t.Errorf("invalid image: %v", err)
	}
	if mt, _ := oci.MediaType(); mt != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %s, want %s", mt, types.OCIManifestSchema1)
	}
	return oci
}

// unpackLayout unpacks the archive's OCI layout and returns its index.json.
func unpackLayout(t *testing.T, archive string) v1.ImageIndex {
	t.Helper()
	dir := t.TempDir()
	forEachEntry(t, archive, func(h *tar.Header, r io.Reader) {
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			return
		}
		b, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	})
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("reading the OCI layout: %v", err)
	}
	return idx
}

func checkConfig(t *testing.T, oci v1.Image, img image, c config) {
	t.Helper()
	cfg, err := oci.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OS != "linux" || cfg.Architecture != c.archs[0] || !cfg.Created.Time.Equal(c.prov.created) {
		t.Errorf("config: %s/%s created %s; want linux/%s created %s", cfg.OS, cfg.Architecture, cfg.Created.Time, c.archs[0], c.prov.created)
	}
	if cfg.Config.User != "65532:65532" {
		t.Errorf("config user %q, want 65532:65532", cfg.Config.User)
	}
	if diff := cmp.Diff([]string{"/usr/local/bin/state"}, cfg.Config.Entrypoint); diff != "" {
		t.Errorf("entrypoint (-want +got):\n%s", diff)
	}
	want := map[string]string{
		"org.opencontainers.image.title":       "netdra-state",
		"org.opencontainers.image.description": img.description,
		"org.opencontainers.image.source":      "https://example.com/netdra",
		"org.opencontainers.image.version":     "v9.9.9",
		"org.opencontainers.image.revision":    "0123456789abcdef",
		"org.opencontainers.image.licenses":    "Apache-2.0",
		"org.opencontainers.image.created":     "2023-11-14T22:13:20Z",
	}
	if diff := cmp.Diff(want, cfg.Config.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
}

// checkLayer: one OCI layer with the skeleton and the binary, static,
// the image user's, 0755; every entry dated at the image's time.
func checkLayer(t *testing.T, oci v1.Image, img image, created time.Time) {
	t.Helper()
	layers, err := oci.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers (%v), want 1", len(layers), err)
	}
	if mt, _ := layers[0].MediaType(); mt != types.OCILayer {
		t.Errorf("layer media type %s, want %s", mt, types.OCILayer)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var names []string
	files := map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if !h.ModTime.Equal(created) {
			t.Errorf("layer entry %s: time %s, want %s", h.Name, h.ModTime, created)
		}
		if h.Name != "usr/local/bin/state" {
			if h.Typeflag == tar.TypeReg {
				files[h.Name], _ = io.ReadAll(tr)
			}
			continue
		}
		if h.Typeflag != tar.TypeReg || h.Mode != 0o755 || h.Uid != img.uid || h.Gid != img.gid {
			t.Errorf("binary: type %c mode %o owner %d:%d; want a regular file, 0755, %s", h.Typeflag, h.Mode, h.Uid, h.Gid, img.user())
		}
		b, _ := io.ReadAll(tr)
		checkStatic(t, b)
		checkTags(t, b)
	}
	var want []string
	for _, e := range rootfs(img, nil) {
		want = append(want, e.name)
	}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("layer entries (-want +got):\n%s", diff)
	}
	if !strings.Contains(string(files["etc/passwd"]), "nonroot:x:65532:65532:") {
		t.Errorf("etc/passwd has no nonroot:\n%s", files["etc/passwd"])
	}
}

// checkStatic: an ELF executable without an interpreter (CGO_ENABLED=0).
func checkStatic(t *testing.T, b []byte) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("binary is not ELF: %v", err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("binary has an ELF interpreter: not static")
		}
	}
}

// checkTags: the binary was built with buildTags (grpcnotrace).
func checkTags(t *testing.T, b []byte) {
	t.Helper()
	info, err := buildinfo.Read(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("binary's build info: %v", err)
	}
	for _, s := range info.Settings {
		if s.Key == "-tags" {
			if s.Value != buildTags {
				t.Errorf("binary built with -tags %q, want %q", s.Value, buildTags)
			}
			return
		}
	}
	t.Errorf("binary built without -tags, want %q", buildTags)
}

func forEachEntry(t *testing.T, archive string, fn func(*tar.Header, io.Reader)) {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		fn(h, tr)
	}
}

func fileSum(t *testing.T, p string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// TestImageName: references normalized as containerd and the kubelet
// spell them.
func TestImageName(t *testing.T) {
	for _, tc := range []struct {
		name, prefix, tag, want string
	}{
		{"docker hub", "netdra", "latest", "docker.io/netdra/state:latest"},
		{"registry", "registry.example.com/netdra", "v0.1.0", "registry.example.com/netdra/state:v0.1.0"},
		{"registry with port", "localhost:5000/x", "dev", "localhost:5000/x/state:dev"},
		{"upper case in the path", "netdra/Bad", "latest", ""},
		{"bad tag", "netdra", "a/b", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := imageName(tc.prefix, "state", tc.tag)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("imageName(%q, state, %q) = %s, want an error", tc.prefix, tc.tag, got)
				}
				return
			}
			if err != nil || got.String() != tc.want {
				t.Fatalf("imageName(%q, state, %q) = %v, %v; want %s", tc.prefix, tc.tag, got, err, tc.want)
			}
		})
	}
}

// TestDefaultLicensesIsTheRepositorys: the images' default licence label
// names the licence of the repository's LICENSE file.
func TestDefaultLicensesIsTheRepositorys(t *testing.T) {
	b, err := os.ReadFile("../../LICENSE")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "Apache License") || !strings.Contains(string(b), "Version 2.0, January 2004") || DefaultLicenses != "Apache-2.0" {
		t.Errorf("LICENSE is not the Apache License 2.0 that DefaultLicenses (%s) names", DefaultLicenses)
	}
	c, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.prov.licenses != DefaultLicenses {
		t.Errorf("-licenses defaults to %q, want %q", c.prov.licenses, DefaultLicenses)
	}
}
