package main

import (
	"bytes"
	"context"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// TestPack_MultiArchIndex: with two architectures, a service's archive
// holds one OCI index, named for containerd, of one valid image per
// architecture, each with its own platform and config architecture.
func TestPack_MultiArchIndex(t *testing.T) {
	img, _ := lookup("state")
	dir := t.TempDir()
	for _, arch := range []string{"amd64", "arm64"} {
		writeFakeBinaries(t, img, filepath.Join(dir, arch), arch)
	}
	c := testConfig(t, []string{"amd64", "arm64"})
	res := packTo(t, img, dir, c)

	idx := readIndex(t, res.path, "registry.example.com/netdra/state:v9.9.9")
	if d, _ := idx.Digest(); d.String() != res.digest {
		t.Errorf("the archive's index is %s; pack said %s", d, res.digest)
	}
	checkIndex(t, idx, []string{"amd64", "arm64"})
}

// TestRelease_PushesAndPackages runs a release of one service, as make
// release does, against a registry served in the test: the image is an
// index in the registry under its version's tag; the chart is pushed to
// <prefix>/charts with the release's version and appVersion, the prefix as
// its registry and the image pinned to the digest pushed, and renders
// that reference.
func TestRelease_PushesAndPackages(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the state binary (-short)")
	}
	helm := os.Getenv("HELM")
	if helm == "" {
		t.Fatal("HELM is not set: make test-images sets it to the pinned helm")
	}
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	out := t.TempDir()
	t.Setenv("HELM_CONFIG_HOME", t.TempDir())
	t.Setenv("HELM_CACHE_HOME", t.TempDir())
	var stdout bytes.Buffer
	err := run(context.Background(), []string{"-root", repoRoot, "-out", out, "-prefix", host + "/netdra", "-services", "state",
		"-release", "v0.0.1-test.1", "-push", "-helm", helm, "-epoch", "1700000000"}, &stdout)
	if err != nil {
		t.Fatalf("release: %v\n%s", err, stdout.String())
	}
	t.Log(stdout.String())

	ref, err := name.ParseReference(host + "/netdra/state:v0.0.1-test.1")
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(ref)
	if err != nil {
		t.Fatalf("the pushed index: %v", err)
	}
	checkIndex(t, idx, []string{runtime.GOARCH}) // -arch's default
	digest, _ := idx.Digest()

	want := host + "/netdra/state:v0.0.1-test.1@" + digest.String()
	if b, err := os.ReadFile(filepath.Join(out, "images.txt")); err != nil || strings.TrimSpace(string(b)) != want {
		t.Errorf("images.txt = %q (%v), want %q", b, err, want)
	}
	chart := "oci://" + host + "/netdra/charts/netdra"
	show := helmOut(t, helm, "show", "chart", chart, "--version", "0.0.1-test.1", "--plain-http")
	for _, line := range []string{"version: 0.0.1-test.1", "appVersion: v0.0.1-test.1"} {
		if !strings.Contains(show, line+"\n") {
			t.Errorf("the pushed chart has no %q:\n%s", line, show)
		}
	}
	manifests := helmOut(t, helm, "template", "netdra", chart, "--version", "0.0.1-test.1", "--plain-http")
	if !strings.Contains(manifests, "image: "+want+"\n") && !strings.Contains(manifests, `image: "`+want+`"`) {
		t.Errorf("the pushed chart does not render image %s", want)
	}
}

func helmOut(t *testing.T, helm string, args ...string) string {
	t.Helper()
	out, err := exec.Command(helm, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// writeFakeBinaries writes the image's programs into dir: bytes that name
// the architecture, which is all packing looks at.
func writeFakeBinaries(t *testing.T, img image, dir, arch string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range img.programs() {
		if err := os.WriteFile(filepath.Join(dir, p.name), []byte(p.name+" for "+arch), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func testConfig(t *testing.T, archs []string) config {
	return config{out: t.TempDir(), prefix: "registry.example.com/netdra", tag: "v9.9.9", archs: archs, prov: provenance{
		source: "https://example.com/netdra", version: "v9.9.9", revision: "0123456789abcdef", licenses: "Apache-2.0",
	}}
}

// readIndex unpacks the archive and returns its one index, checking that
// index.json names it for containerd.
func readIndex(t *testing.T, archive, wantName string) v1.ImageIndex {
	t.Helper()
	outer := unpackLayout(t, archive)
	im, err := outer.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("index.json lists %d manifests, want 1", len(im.Manifests))
	}
	desc := im.Manifests[0]
	if desc.MediaType != types.OCIImageIndex {
		t.Errorf("index.json's entry is a %s, want %s", desc.MediaType, types.OCIImageIndex)
	}
	if got := desc.Annotations[annotationImageName]; got != wantName {
		t.Errorf("index.json names %q, want %q", got, wantName)
	}
	idx, err := outer.ImageIndex(desc.Digest)
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

// checkIndex: a valid OCI index of one valid image per arch, in order,
// each with its platform and its config's architecture.
func checkIndex(t *testing.T, idx v1.ImageIndex, archs []string) {
	t.Helper()
	if err := validate.Index(idx); err != nil {
		t.Errorf("invalid index: %v", err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if im.MediaType != types.OCIImageIndex || len(im.Manifests) != len(archs) {
		t.Fatalf("index %s of %d manifests, want %s of %d", im.MediaType, len(im.Manifests), types.OCIImageIndex, len(archs))
	}
	for i, desc := range im.Manifests {
		if p := desc.Platform; p == nil || p.OS != "linux" || p.Architecture != archs[i] {
			t.Errorf("manifest %d: platform %+v, want linux/%s", i, p, archs[i])
		}
		img, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Architecture != archs[i] {
			t.Errorf("manifest %d: config architecture %s, want %s", i, cfg.Architecture, archs[i])
		}
	}
}
