package nodeconfig

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/netdra/netdra/shared/fielderr"
)

// TestProvisionerError: a field the provisioner refused is named as the
// spec names it, as a *fielderr.Error with the provisioner's reason; other
// errors, and fields the spec has no known name for, stay as they are.
func TestProvisionerError(t *testing.T) {
	// What a dra client gets: the status of a *fielderr.Error, wrapped.
	refused := func(field string) error {
		st, _ := status.FromError(fielderr.New(field, "8 is more than PF eth1 can have (its sriov_totalvfs is 7)"))
		return fmt.Errorf("configuring the provisioner: %w", st.Err())
	}
	for _, tc := range []struct {
		err       error
		wantField string // "": err comes back as it is
	}{
		{err: refused("managers.sriov.ifaces[1].vfCount"), wantField: "deviceManagerConfigs.sriov.ifaces[1].vfCount"},
		{err: refused("managers.sriov.sysBusPciDevPath"), wantField: "deviceManagerConfigs.sriov.sysBusPCIDevPath"},
		{err: refused("managers.dummy.count"), wantField: "deviceManagerConfigs.dummy.count"},
		{err: refused("sysfsRoot"), wantField: "sysfsRoot"},
		{err: refused("managers.host.keepEbpfProgramsPools[0]")},
		{err: refused("preparedVfs.devices[0]")},
		{err: status.Error(codes.InvalidArgument, "no detail")},
		{err: status.Error(codes.Unavailable, "down")},
		{err: errors.New("plain")},
	} {
		got := ProvisionerError(tc.err)
		var fe *fielderr.Error
		switch {
		case tc.wantField == "" && got != tc.err:
			t.Errorf("%v: became %v, want it as it is", tc.err, got)
		case tc.wantField == "":
		case !errors.As(got, &fe) || fe.Field != tc.wantField:
			t.Errorf("%v: %v, want a field error for %s", tc.err, got, tc.wantField)
		case fe.Reason != "8 is more than PF eth1 can have (its sriov_totalvfs is 7)":
			t.Errorf("%v: reason %q, want the provisioner's", tc.err, fe.Reason)
		}
	}
}
