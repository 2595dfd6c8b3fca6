package main

import (
	"bytes"
	"path/filepath"

	"go.yaml.in/yaml/v3"

	"github.com/netdra/netdra/shared/claimconfig"
)

// claimValidationsFile is the claim admission policy's validations, which
// templates/claim-policy.yaml includes: generated from claimconfig, so the
// policy checks what prepare's parser does, by the same names.
var claimValidationsFile = filepath.Join(chartDir, "files", "claim-validations.yaml")

// ClaimValidations is claimValidationsFile's content: claimconfig's
// Validations as a YAML list.
func ClaimValidations() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("# Generated from shared/claimconfig (Validations) by make manifests: edit\n" +
		"# claimconfig, not this file. One validation per claim parameter; each\n" +
		"# names the parameter as dra's refusal at prepare does.\n")
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(claimconfig.Validations()); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
