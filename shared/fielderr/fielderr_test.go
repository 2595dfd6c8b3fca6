package fielderr

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

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

// TestError_Long: an error quoting a huge value repeats 1 KiB of it, cut
// at a character boundary, in its text and in its status.
func TestError_Long(t *testing.T) {
	huge := strings.Repeat("é", 1<<19) // 1 MiB, two bytes a character
	err := New("podIfName", "%q is too long", huge)
	tail := fmt.Sprintf("(%d bytes)", len(err.(*Error).Reason))
	for name, s := range map[string]string{"Error": err.Error(), "status": status.Convert(err).Message()} {
		if len(s) > 2*MaxText+100 || !utf8.ValidString(s) || !strings.HasPrefix(s, "podIfName: \"éé") || !strings.HasSuffix(s, tail) {
			t.Errorf("%s: %d bytes: %.80q...%q", name, len(s), s, s[max(0, len(s)-40):])
		}
	}
	for _, d := range status.Convert(err).Details() {
		if br, ok := d.(*errdetails.BadRequest); ok && len(br.GetFieldViolations()[0].GetDescription()) > MaxText+100 {
			t.Errorf("the field violation repeats %d bytes", len(br.GetFieldViolations()[0].GetDescription()))
		}
	}
}
