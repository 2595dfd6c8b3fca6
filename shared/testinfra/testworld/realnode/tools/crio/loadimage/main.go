// Command loadimage copies docker-archive image tarballs (what
// realnode.Build writes for ctr images import) into a containers/storage
// store, where CRI-O finds them: the real node's equivalent of ctr images
// import for CRI-O. It runs with CRI-O stopped or running (the store's
// locks serialize the two).
//
//	loadimage -root <graphroot> -runroot <runroot> -driver overlay <ref>=<archive>...
//
// Each argument names the reference the image gets in the store and the
// archive it comes from. It exits non-zero, naming the image, on the first
// failure.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/containers/image/v5/copy"
	"github.com/containers/image/v5/docker/archive"
	"github.com/containers/image/v5/signature"
	istorage "github.com/containers/image/v5/storage"
	"github.com/containers/storage"
	"github.com/containers/storage/pkg/reexec"
	stypes "github.com/containers/storage/types"
)

func main() {
	if reexec.Init() {
		return
	}
	root := flag.String("root", "", "the store's graph root (CRI-O's root)")
	runroot := flag.String("runroot", "", "the store's run root (CRI-O's runroot)")
	driver := flag.String("driver", "overlay", "the store's graph driver (CRI-O's storage_driver)")
	flag.Parse()
	if err := load(*root, *runroot, *driver, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "loadimage:", err)
		os.Exit(1)
	}
}

func load(root, runroot, driver string, images []string) (err error) {
	if root == "" || runroot == "" {
		return fmt.Errorf("-root and -runroot are required")
	}
	if len(images) == 0 {
		return fmt.Errorf("no <ref>=<archive> argument")
	}
	store, err := storage.GetStore(stypes.StoreOptions{GraphRoot: root, RunRoot: runroot, GraphDriverName: driver})
	if err != nil {
		return fmt.Errorf("opening the store at %s: %w", root, err)
	}
	defer func() {
		if _, serr := store.Shutdown(false); serr != nil && err == nil {
			err = fmt.Errorf("closing the store: %w", serr)
		}
	}()
	policy, err := signature.NewPolicyContext(&signature.Policy{Default: []signature.PolicyRequirement{signature.NewPRInsecureAcceptAnything()}})
	if err != nil {
		return err
	}
	defer policy.Destroy()
	for _, arg := range images {
		ref, path, ok := strings.Cut(arg, "=")
		if !ok || ref == "" || path == "" {
			return fmt.Errorf("argument %q: want <ref>=<archive>", arg)
		}
		src, err := archive.ParseReference(path)
		if err != nil {
			return fmt.Errorf("image %s: archive %s: %w", ref, path, err)
		}
		dst, err := istorage.Transport.ParseStoreReference(store, ref)
		if err != nil {
			return fmt.Errorf("image %s: %w", ref, err)
		}
		if _, err := copy.Image(context.Background(), policy, dst, src, &copy.Options{}); err != nil {
			return fmt.Errorf("image %s from %s: %w", ref, path, err)
		}
	}
	return nil
}
