package nodeconfig

import (
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/netdra/netdra/shared/fielderr"
)

// ProvisionerError is err, from the provisioner's Configure of
// Provisioner(spec), with a field the provisioner refused (InvalidArgument
// with a BadRequest field violation) named as the NodeConfig spec names it:
// a *fielderr.Error for "deviceManagerConfigs.sriov.ifaces[1].vfCount"
// where the provisioner said "managers.sriov.ifaces[1].vfCount" (a count
// the PF cannot take), "sysfsRoot" for "sysfsRoot" (see specField). Any
// other error is returned as it is.
func ProvisionerError(err error) error {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.InvalidArgument {
		return err
	}
	for _, d := range st.Details() {
		br, ok := d.(*errdetails.BadRequest)
		if !ok || len(br.GetFieldViolations()) == 0 {
			continue
		}
		v := br.GetFieldViolations()[0]
		field, ok := specField(v.GetField())
		if !ok {
			return err
		}
		return fielderr.New(field, "%s", v.GetDescription())
	}
	return err
}

// specField is the spec's name of a field of Provisioner(spec)'s request;
// false for one whose name in the spec is not known here (those of the
// host and subif managers, which Provisioner maps field by field, and the
// list of prepared VFs dra adds): the provisioner's error then stays as
// it is, which names it as the request does.
func specField(field string) (string, bool) {
	switch {
	case field == "sysfsRoot":
		return field, true
	case field == "managers.sriov.sysBusPciDevPath":
		return "deviceManagerConfigs.sriov.sysBusPCIDevPath", true
	case strings.HasPrefix(field, "managers.sriov.ifaces["), strings.HasPrefix(field, "managers.dummy."):
		return "deviceManagerConfigs." + strings.TrimPrefix(field, "managers."), true
	}
	return "", false
}
