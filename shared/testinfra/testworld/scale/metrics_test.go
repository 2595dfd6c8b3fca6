package scale

import "testing"

// TestSliceWrites: the slice writes and their time come from the
// apiserver's request histogram (POST and DELETE of resourceslices, no
// subresource) and its etcd histogram of resourceslices (lists left out).
func TestSliceWrites(t *testing.T) {
	s := parseSample([]byte(`# HELP x
apiserver_request_duration_seconds_count{component="apiserver",resource="resourceslices",scope="resource",subresource="",verb="POST",version="v1"} 20
apiserver_request_duration_seconds_sum{component="apiserver",resource="resourceslices",scope="resource",subresource="",verb="POST",version="v1"} 4
apiserver_request_duration_seconds_count{component="apiserver",resource="resourceslices",scope="resource",subresource="",verb="DELETE",version="v1"} 10
apiserver_request_duration_seconds_sum{component="apiserver",resource="resourceslices",scope="resource",subresource="",verb="DELETE",version="v1"} 2
apiserver_request_duration_seconds_count{component="apiserver",resource="resourceslices",scope="cluster",subresource="",verb="LIST",version="v1"} 7
apiserver_request_duration_seconds_sum{component="apiserver",resource="resourceslices",scope="cluster",subresource="",verb="LIST",version="v1"} 9
apiserver_request_duration_seconds_count{component="apiserver",resource="nodeconfigs",scope="resource",subresource="",verb="POST",version="v1alpha1"} 5
etcd_request_duration_seconds_sum{group="resource.k8s.io",operation="create",resource="resourceslices"} 3
etcd_request_duration_seconds_sum{group="resource.k8s.io",operation="delete",resource="resourceslices"} 1.5
etcd_request_duration_seconds_sum{group="resource.k8s.io",operation="listWithCount",resource="resourceslices"} 8
etcd_request_duration_seconds_sum{group="netdra.io",operation="update",resource="nodeconfigs"} 8
`))
	n, total, etcd := s.sliceWrites()
	if n != 30 || total != 6 || etcd != 4.5 {
		t.Fatalf("sliceWrites: %v writes, %v s, %v s on etcd; want 30, 6, 4.5", n, total, etcd)
	}
}
