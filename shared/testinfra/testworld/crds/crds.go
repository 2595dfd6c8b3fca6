// Package crds installs netdra's CustomResourceDefinitions (the Helm
// chart's pods/chart/netdra/files/crds) into a cluster, for the test
// world's tests, benchmarks and `make dev`.
package crds

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// Install creates, or updates, every CRD that dir/kustomization.yaml lists
// (strictly decoded: a field the API does not know is an error), waits
// until each is established and its kind is in the apiserver's discovery
// (a client's REST mapper resolves kinds through discovery, which lags the
// Established condition), and returns their names.
func Install(ctx context.Context, cfg *rest.Config, dir string) ([]string, error) {
	c, err := apiextclient.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		return nil, err
	}
	var kust struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(b, &kust); err != nil || len(kust.Resources) == 0 {
		return nil, fmt.Errorf("%s/kustomization.yaml lists no resources (%v)", dir, err)
	}
	api := c.ApiextensionsV1().CustomResourceDefinitions()
	var names []string
	for _, r := range kust.Resources {
		f := filepath.Join(dir, r)
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		crd := &apiextv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(data, crd); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		if _, err := api.Create(ctx, crd, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
			old, err := api.Get(ctx, crd.Name, metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
			crd.ResourceVersion = old.ResourceVersion
			if _, err := api.Update(ctx, crd, metav1.UpdateOptions{}); err != nil {
				return nil, fmt.Errorf("updating CRD %s: %w", crd.Name, err)
			}
		} else if err != nil {
			return nil, fmt.Errorf("creating CRD %s: %w", crd.Name, err)
		}
		err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			got, err := api.Get(ctx, crd.Name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			for _, cond := range got.Status.Conditions {
				if cond.Type == apiextv1.Established && cond.Status == apiextv1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return nil, fmt.Errorf("CRD %s not established: %w", crd.Name, err)
		}
		if err := discovered(ctx, c.Discovery(), crd); err != nil {
			return nil, err
		}
		names = append(names, crd.Name)
	}
	return names, nil
}

// discovered waits until discovery lists crd's kind under every version it
// serves.
func discovered(ctx context.Context, d discovery.DiscoveryInterface, crd *apiextv1.CustomResourceDefinition) error {
	for _, v := range crd.Spec.Versions {
		if !v.Served {
			continue
		}
		gv := crd.Spec.Group + "/" + v.Name
		err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			list, err := d.ServerResourcesForGroupVersion(gv)
			if err != nil {
				return false, nil
			}
			for _, r := range list.APIResources {
				if r.Kind == crd.Spec.Names.Kind {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("CRD %s: kind %s not in discovery under %s: %w", crd.Name, crd.Spec.Names.Kind, gv, err)
		}
	}
	return nil
}
