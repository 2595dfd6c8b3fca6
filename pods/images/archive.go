package main

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/distribution/reference"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Annotations of index.json's descriptor that name the image. containerd
// takes the first as the image's name as it is (so it must be the
// normalized one the kubelet asks the CRI for); the second is the OCI
// layout's own, the tag alone, as containerd's exporter writes it.
const (
	annotationImageName = "io.containerd.image.name"
	annotationRefName   = "org.opencontainers.image.ref.name"
)

// provenance says where an image comes from: the values of its OCI labels.
type provenance struct {
	source   string    // org.opencontainers.image.source: the repository
	version  string    // .version
	revision string    // .revision: the git commit
	licenses string    // .licenses, an SPDX expression
	created  time.Time // .created, also the config's, the history's and every file's time
}

// labels are the image config's labels.
func (p provenance) labels(img image) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       "netdra-" + img.service,
		"org.opencontainers.image.description": img.description,
		"org.opencontainers.image.source":      p.source,
		"org.opencontainers.image.version":     p.version,
		"org.opencontainers.image.revision":    p.revision,
		"org.opencontainers.image.licenses":    p.licenses,
		"org.opencontainers.image.created":     p.created.UTC().Format(time.RFC3339),
	}
}

// imageName is the normalized reference prefix/service:tag, as containerd
// and the kubelet spell it (netdra/state:latest is
// docker.io/netdra/state:latest).
func imageName(prefix, service, tag string) (reference.NamedTagged, error) {
	ref := prefix + "/" + service + ":" + tag
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return nil, fmt.Errorf("image reference %q: %w", ref, err)
	}
	tagged, ok := named.(reference.NamedTagged)
	if !ok {
		return nil, fmt.Errorf("image reference %q: no tag", ref)
	}
	return tagged, nil
}

// newImage is the OCI image of one service for arch: its one layer and a
// config with the user, the entrypoint and the labels.
func newImage(img image, layer v1.Layer, arch string, p provenance) (v1.Image, error) {
	created := v1.Time{Time: p.created.UTC()}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	withLayer, err := mutate.Append(base, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: created, CreatedBy: "pods/images: " + img.binary() + ", distroless's users and directories"},
	})
	if err != nil {
		return nil, err
	}
	cfg, err := withLayer.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture, cfg.Created = "linux", arch, created
	cfg.Config = v1.Config{
		User:       img.user(),
		Entrypoint: img.entrypoint(),
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		WorkingDir: "/",
		Labels:     p.labels(img),
	}
	return mutate.ConfigFile(withLayer, cfg)
}

// artifact is what one service's archive holds and a push writes: one
// image for one architecture, or an OCI index of one image per
// architecture.
type artifact struct {
	image v1.Image // when index is nil
	arch  string   // image's
	index v1.ImageIndex
}

// newArtifact makes images (one per arch, in that order) an artifact: an
// OCI index when asIndex, else the one image.
func newArtifact(images []v1.Image, archs []string, asIndex bool) (artifact, error) {
	if !asIndex {
		if len(images) != 1 {
			return artifact{}, fmt.Errorf("%d architectures need an index", len(images))
		}
		return artifact{image: images[0], arch: archs[0]}, nil
	}
	adds := make([]mutate.IndexAddendum, len(images))
	for i, img := range images {
		adds[i] = mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
			MediaType: types.OCIManifestSchema1,
			Platform:  &v1.Platform{OS: "linux", Architecture: archs[i]},
		}}
	}
	return artifact{index: mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)}, nil
}

// Digest is the digest a registry names the artifact by: the index's, or
// the image manifest's.
func (a artifact) Digest() (v1.Hash, error) {
	if a.index != nil {
		return a.index.Digest()
	}
	return a.image.Digest()
}

// writeArchive writes a as an OCI image layout (oci-layout, index.json
// naming the image or index, blobs/sha256/) in one tar file, out: the
// format `ctr images import` reads. go-containerregistry writes the layout
// into a directory beside out; this packs that directory with every entry
// at mtime and owned by root, so that the same image gives the same bytes.
func writeArchive(a artifact, name reference.NamedTagged, mtime time.Time, out string) error {
	dir, err := os.MkdirTemp(filepath.Dir(out), ".layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("OCI layout: %w", err)
	}
	annotations := layout.WithAnnotations(map[string]string{annotationImageName: name.String(), annotationRefName: name.Tag()})
	if a.index != nil {
		err = p.AppendIndex(a.index, annotations)
	} else {
		err = p.AppendImage(a.image, layout.WithPlatform(v1.Platform{OS: "linux", Architecture: a.arch}), annotations)
	}
	if err != nil {
		return fmt.Errorf("OCI layout: %w", err)
	}
	tmp := out + ".tmp"
	if err := tarDir(dir, tmp, mtime); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, out)
}

// tarDir writes the tree under dir into the tar file out, in lexical order.
func tarDir(dir, out string, mtime time.Time) error {
	f, err := os.OpenFile(out, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		return tarEntry(tw, path, filepath.ToSlash(rel), d, mtime)
	})
	if err != nil {
		return fmt.Errorf("packing %s: %w", dir, err)
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}

func tarEntry(tw *tar.Writer, path, name string, d fs.DirEntry, mtime time.Time) error {
	if d.IsDir() {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: 0o755, ModTime: mtime})
	}
	if !d.Type().IsRegular() {
		return fmt.Errorf("%s: not a regular file", name)
	}
	src, err := os.Open(path)
	if err != nil {
		return err
	}
	defer src.Close()
	fi, err := src.Stat()
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: fi.Size(), ModTime: mtime}); err != nil {
		return err
	}
	_, err = io.Copy(tw, src)
	return err
}
