package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is netdra.io/v1alpha1.
var GroupVersion = schema.GroupVersion{Group: "netdra.io", Version: "v1alpha1"}

var (
	// SchemeBuilder registers the package's types.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds NodeConfig, ClusterConfig and their lists to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&NodeConfig{}, &NodeConfigList{},
		&ClusterConfig{}, &ClusterConfigList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
