package worldtest

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
)

// Driver is netdra's DRA driver name.
const Driver = "netdra.io"

// DeviceClass creates the DeviceClass name selecting netdra's pool (by the
// device's pool attribute, as pods/examples' classes do), removed at the
// test's end.
func DeviceClass(tb testing.TB, c kubernetes.Interface, name, pool string) string {
	tb.Helper()
	dc := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourceapi.DeviceClassSpec{
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf(`device.driver == %q && device.attributes[%q].pool == %q`, Driver, Driver, pool)}}}}}
	if _, err := c.ResourceV1().DeviceClasses().Create(context.Background(), dc, metav1.CreateOptions{}); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = c.ResourceV1().DeviceClasses().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	return name
}

// ClaimTemplate creates the ResourceClaimTemplate "net" in ns for one
// device of class with the given opaque parameters (netdra's claim
// config).
func ClaimTemplate(tb testing.TB, c kubernetes.Interface, ns, class string, params map[string]any) string {
	tb.Helper()
	raw, err := json.Marshal(params)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "net"}, Spec: resourceapi.ResourceClaimTemplateSpec{
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "net", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class}}},
			Config: []resourceapi.DeviceClaimConfiguration{{Requests: []string{"net"}, DeviceConfiguration: resourceapi.DeviceConfiguration{
				Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: Driver, Parameters: runtime.RawExtension{Raw: raw}}}}},
		}}}}
	if _, err := c.ResourceV1().ResourceClaimTemplates(ns).Create(context.Background(), tmpl, metav1.CreateOptions{}); err != nil {
		tb.Fatal(err)
	}
	return tmpl.Name
}
