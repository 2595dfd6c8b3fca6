package sriov

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/shared/fielderr"
)

func ifaces(pairs ...any) []*provisionerv1.SriovInterface {
	var out []*provisionerv1.SriovInterface
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, &provisionerv1.SriovInterface{IfName: pairs[i].(string), VfCount: uint32(pairs[i+1].(int))})
	}
	return out
}

func TestProvisionVFs(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ifaces []*provisionerv1.SriovInterface
		// wantNumVFs is every listed PF's sriov_numvfs afterwards.
		wantNumVFs map[string]string
		// wantWarn and wantErrIn are substrings of the warnings / error.
		wantWarn  []string
		wantErr   error
		wantErrIn []string
	}{
		{name: "PF already has the count", ifaces: ifaces("ens1f0", 2),
			wantNumVFs: map[string]string{"ens1f0": "2"}},
		{name: "PF with no VFs gets the count", ifaces: ifaces("ens3f0", 4),
			wantNumVFs: map[string]string{"ens3f0": "4"}},
		{name: "PF with no VFs gets up to the total", ifaces: ifaces("ens3f0", 8),
			wantNumVFs: map[string]string{"ens3f0": "8"}},
		{name: "more than sriov_totalvfs", ifaces: ifaces("ens3f0", 9),
			wantNumVFs: map[string]string{"ens3f0": "0"},
			wantErr:    ErrTooManyVFs, wantErrIn: []string{"ens3f0", "9", "sriov_totalvfs 8"}},
		{name: "a different non-zero count is left alone with a warning", ifaces: ifaces("ens2f0np0", 5),
			wantNumVFs: map[string]string{"ens2f0np0": "3"},
			wantWarn:   []string{"ens2f0np0 has 3 VFs, not the 5 configured"}},
		{name: "vfCount 0 leaves both kinds of PF alone, without a warning", ifaces: ifaces("ens3f0", 0, "ens2f0np0", 0),
			wantNumVFs: map[string]string{"ens3f0": "0", "ens2f0np0": "3"}},
		{name: "missing PF", ifaces: ifaces("ens9f9", 2),
			wantErr: ErrPFNotFound, wantErrIn: []string{"ens9f9"}},
		{name: "PF without SR-IOV", ifaces: ifaces("eno1", 2),
			wantErr: ErrNotSriov, wantErrIn: []string{"eno1"}},
		{name: "a bad PF does not stop the others", ifaces: ifaces("ens9f9", 2, "ens3f0", 4, "ens2f0np0", 2),
			wantNumVFs: map[string]string{"ens3f0": "4", "ens2f0np0": "3"},
			wantWarn:   []string{"ens2f0np0 has 3 VFs, not the 2 configured"},
			wantErr:    ErrPFNotFound, wantErrIn: []string{"ens9f9"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := fixtureTree(t)
			warns, err := ProvisionVFs(testLogger(t), root, tc.ifaces)
			checkErr(t, err, tc.wantErr, tc.wantErrIn)
			checkContains(t, "warnings", warns, tc.wantWarn)
			got := map[string]string{}
			for pf := range tc.wantNumVFs {
				got[pf] = readFile(t, filepath.Join(root, "class/net", pf, "device/sriov_numvfs"))
			}
			if diff := cmp.Diff(tc.wantNumVFs, got, cmpEmptyMap); diff != "" {
				t.Errorf("sriov_numvfs (-want +got):\n%s", diff)
			}
			if tc.wantErr != nil {
				return
			}
			// Idempotent: the second run finds what the first wrote.
			warns2, err := ProvisionVFs(testLogger(t), root, tc.ifaces)
			if err != nil {
				t.Fatalf("second ProvisionVFs: %v", err)
			}
			if diff := cmp.Diff(warns, warns2); diff != "" {
				t.Errorf("second ProvisionVFs warnings (-first +second):\n%s", diff)
			}
		})
	}
}

var cmpEmptyMap = cmp.Transformer("nilMap", func(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return m
})

func TestValidateConfig(t *testing.T) {
	long := strings.Repeat("e", 16)
	for _, tc := range []struct {
		name      string
		cfg       *provisionerv1.SriovConfig
		wantField string
	}{
		{name: "nil"},
		{name: "no ifaces", cfg: &provisionerv1.SriovConfig{Enabled: true}},
		{name: "good", cfg: &provisionerv1.SriovConfig{Ifaces: ifaces("ens1f0", 4, "ens2f0np0", 8)}},
		{name: "empty ifName", cfg: &provisionerv1.SriovConfig{Ifaces: ifaces("", 4)}, wantField: "ifaces[0].ifName"},
		{name: "long ifName", cfg: &provisionerv1.SriovConfig{Ifaces: ifaces("ens1f0", 1, long, 4)}, wantField: "ifaces[1].ifName"},
		{name: "slash in ifName", cfg: &provisionerv1.SriovConfig{Ifaces: ifaces("a/b", 4)}, wantField: "ifaces[0].ifName"},
		{name: "space in ifName", cfg: &provisionerv1.SriovConfig{Ifaces: ifaces("a b", 4)}, wantField: "ifaces[0].ifName"},
		{name: "dot ifName", cfg: &provisionerv1.SriovConfig{Ifaces: ifaces("..", 4)}, wantField: "ifaces[0].ifName"},
		{name: "duplicate ifName", cfg: &provisionerv1.SriovConfig{Ifaces: ifaces("ens1f0", 1, "ens1f0", 2)}, wantField: "ifaces[1].ifName"},
		{name: "zero vfCount uses the VFs there are", cfg: &provisionerv1.SriovConfig{Ifaces: ifaces("ens1f0", 0)}},
		{name: "most VFs", cfg: &provisionerv1.SriovConfig{Ifaces: ifaces("ens1f0", 4096)}},
		{name: "too many VFs", cfg: &provisionerv1.SriovConfig{Ifaces: ifaces("ens1f0", 1, "ens1f1", 4097)}, wantField: "ifaces[1].vfCount"},
		{name: "path too long", cfg: &provisionerv1.SriovConfig{SysBusPciDevPath: "/" + strings.Repeat("a", 4095)}, wantField: "sysBusPciDevPath"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkField(t, ValidateConfig(tc.cfg), tc.wantField)
			if _, err := New(nil, t.TempDir(), tc.cfg); tc.wantField == "" && err != nil {
				t.Errorf("New: %v", err)
			}
		})
	}
}

// checkField checks that err is a *fielderr.Error for field, or nil when
// field is "".
func checkField(tb testing.TB, err error, field string) {
	tb.Helper()
	var fe *fielderr.Error
	switch {
	case field == "" && err != nil:
		tb.Errorf("error %v, want none", err)
	case field == "":
	case !errors.As(err, &fe):
		tb.Errorf("error %v, want a field error for %s", err, field)
	case fe.Field != field:
		tb.Errorf("error for field %q (%v), want %q", fe.Field, err, field)
	default:
		tb.Logf("%s", err)
	}
}

// checkErr checks that err is want (nil: no error) and mentions every
// substring of in.
func checkErr(tb testing.TB, err, want error, in []string) {
	tb.Helper()
	if !errors.Is(err, want) || (want == nil) != (err == nil) {
		tb.Fatalf("error %v, want %v", err, want)
	}
	if err == nil {
		return
	}
	tb.Logf("error: %v", err)
	for _, s := range in {
		if !strings.Contains(err.Error(), s) {
			tb.Errorf("error %q does not mention %q", err, s)
		}
	}
}

// checkContains checks that got has one entry per want, each containing
// its want.
func checkContains(tb testing.TB, what string, got, want []string) {
	tb.Helper()
	if len(got) != len(want) {
		tb.Errorf("%s = %q, want %d containing %q", what, got, len(want), want)
		return
	}
	for i := range want {
		if !strings.Contains(got[i], want[i]) {
			tb.Errorf("%s[%d] = %q, want it to contain %q", what, i, got[i], want[i])
		}
	}
}
