package fielderr

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestError(t *testing.T) {
	err := fmt.Errorf("setup: %w", Prefix("config", New("vlan", "%d is out of range 0..4095", 5000)))
	if got, want := err.Error(), "setup: config.vlan: 5000 is out of range 0..4095"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(err, ErrInvalid) {
		t.Error("does not unwrap to ErrInvalid")
	}
	st := status.Convert(err)
	if st.Code() != codes.InvalidArgument {
		t.Errorf("code %v, want InvalidArgument", st.Code())
	}
	var field string
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			field = br.GetFieldViolations()[0].GetField()
		}
	}
	if field != "config.vlan" {
		t.Errorf("BadRequest field %q, want config.vlan", field)
	}
	if other := errors.New("x"); Prefix("config", other) != other {
		t.Error("Prefix changed a non-field error")
	}
}
