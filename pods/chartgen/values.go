package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The markers around the generated table in the chart's README.md.
const (
	beginMarker = "<!-- values:begin: generated from values.yaml by make manifests -->"
	endMarker   = "<!-- values:end -->"
)

// Value is one row of the table: a key of values.yaml (dotted), its YAML
// type, its default as JSON and the comment above it.
type Value struct {
	Key, Type, Default, Doc string
}

// Values reads values.yaml's documented keys, in the file's order. A
// mapping whose keys carry comments is described by its keys; any other
// value is one row, and must have a comment of its own: a key without one
// is an error naming it.
func Values(src []byte) ([]Value, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, fmt.Errorf("values.yaml: %w", err)
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("values.yaml: not a mapping")
	}
	var out []Value
	var undocumented []string
	var walk func(m *yaml.Node, prefix string) error
	walk = func(m *yaml.Node, prefix string) error {
		for i := 0; i+1 < len(m.Content); i += 2 {
			k, v := m.Content[i], m.Content[i+1]
			key := prefix + k.Value
			if v.Kind == yaml.MappingNode && documentedKeys(v) {
				if err := walk(v, key+"."); err != nil {
					return err
				}
				continue
			}
			doc := comment(k.HeadComment)
			if doc == "" {
				undocumented = append(undocumented, key)
				continue
			}
			var val any
			if err := v.Decode(&val); err != nil {
				return fmt.Errorf("values.yaml: %s: %w", key, err)
			}
			def, err := json.Marshal(val)
			if err != nil {
				return fmt.Errorf("values.yaml: %s: %w", key, err)
			}
			out = append(out, Value{Key: key, Type: typeOf(v), Default: string(def), Doc: doc})
		}
		return nil
	}
	if err := walk(doc.Content[0], ""); err != nil {
		return nil, err
	}
	if len(undocumented) > 0 {
		return nil, fmt.Errorf("values.yaml: no comment describes %s", strings.Join(undocumented, ", "))
	}
	return out, nil
}

// documentedKeys: some key of mapping m has a comment above it.
func documentedKeys(m *yaml.Node) bool {
	for i := 0; i < len(m.Content); i += 2 {
		if comment(m.Content[i].HeadComment) != "" {
			return true
		}
	}
	return false
}

// comment is a head comment as one line of text.
func comment(c string) string {
	var words []string
	for _, line := range strings.Split(c, "\n") {
		line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "#"))
		if line != "" {
			words = append(words, line)
		}
	}
	return strings.Join(words, " ")
}

func typeOf(v *yaml.Node) string {
	switch v.Kind {
	case yaml.MappingNode:
		return "object"
	case yaml.SequenceNode:
		return "list"
	}
	switch v.Tag {
	case "!!int":
		return "int"
	case "!!bool":
		return "bool"
	case "!!float":
		return "number"
	case "!!null":
		return "null"
	}
	return "string"
}

// Table is the Markdown table of values.
func Table(vals []Value) string {
	var b strings.Builder
	b.WriteString("| Key | Type | Default | Description |\n|---|---|---|---|\n")
	code := strings.NewReplacer("|", `\|`)
	text := strings.NewReplacer("|", `\|`, "<", "&lt;", ">", "&gt;")
	for _, v := range vals {
		fmt.Fprintf(&b, "| `%s` | %s | `%s` | %s |\n", v.Key, v.Type, code.Replace(v.Default), text.Replace(v.Doc))
	}
	return b.String()
}

// ChartREADME is the chart's README.md with the table between its markers
// made from values.yaml.
func ChartREADME(root string) ([]byte, error) {
	dir := filepath.Join(root, chartDir)
	src, err := os.ReadFile(filepath.Join(dir, "values.yaml"))
	if err != nil {
		return nil, err
	}
	vals, err := Values(src)
	if err != nil {
		return nil, err
	}
	readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		return nil, err
	}
	return replaceBetween(readme, Table(vals))
}

// replaceBetween puts body between the markers of doc.
func replaceBetween(doc []byte, body string) ([]byte, error) {
	i := bytes.Index(doc, []byte(beginMarker))
	j := bytes.Index(doc, []byte(endMarker))
	if i < 0 || j < i {
		return nil, fmt.Errorf("README.md: no %q ... %q around the values' table", beginMarker, endMarker)
	}
	var out bytes.Buffer
	out.Write(doc[:i+len(beginMarker)])
	out.WriteString("\n")
	out.WriteString(body)
	out.Write(doc[j:])
	return out.Bytes(), nil
}
