package main

import (
	"context"
	"fmt"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// push writes p's image or index to the registry its name names, with the
// credentials of the Docker config (docker login, or DOCKER_CONFIG).
// go-containerregistry speaks plain HTTP to a registry on localhost or a
// loopback address, and HTTPS to any other.
func push(ctx context.Context, p packed) error {
	ref, err := name.ParseReference(p.name)
	if err != nil {
		return err
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}
	if p.artifact.index != nil {
		err = remote.WriteIndex(ref, p.artifact.index, opts...)
	} else {
		err = remote.Write(ref, p.artifact.image, opts...)
	}
	if err != nil {
		return fmt.Errorf("pushing %s: %w", p.name, err)
	}
	return nil
}
