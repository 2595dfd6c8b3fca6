// Package claimconfig parses a claim's opaque device parameters — what a
// ResourceClaim's config says of a netdra device — strictly: unknown fields,
// wrong types and trailing data are errors naming the field, and every
// value is range-checked before anything on the node is touched. The result
// is the device config the provisioner applies.
//
// The parameters, in JSON (all optional):
//
//	podIfName   interface name in the pod ([a-zA-Z0-9._-], at most 15, not lo)
//	vlan        VLAN ID 0..4094; vlanQoS 0..7 and vlanProto "802.1q" | "802.1ad" need a vlan
//	mac         unicast MAC address
//	spoofChk, trust           booleans
//	linkState   "auto" | "enable" | "disable"
//	minTxRate, maxTxRate      Mbps, min <= max when both are set
//	mtu         68..65535
//	addresses   ["10.0.0.2/24", "fd00::2/64"]
//	routes      [{"destination": "10.1.0.0/16", "gateway": "10.0.0.1"}]
//	ipPools     ["pool-v4", "pool-v6"] (node-local address pools)
//	vfio        true: the pod wants a VF bound to vfio-pci (DPDK), its /dev/vfio
//	            device nodes and no netdev, so none of podIfName, mtu, addresses,
//	            routes, ipPools; false: a device with a netdev; absent: either
//	dhcp        true: the IPv4 address, routes and MTU from a DHCP server on the
//	            interface's network; exclusive with addresses and ipPools
//
// and the rest of the pod's network (network.go): routes' table, scope,
// source, metric and onlink; policy rules; permanent neighbours; a VRF;
// per-interface sysctls of an allow-list; txqueuelen and GSO/GRO max sizes;
// ethtool features and private flags; the eBPF opt-out. The parameters may
// say what they are, apiVersion netdra.io/v1alpha1 and kind NetworkConfig,
// or neither. Reference (reference.go) documents every parameter, and
// docs/claims.md's claim reference is generated from it.
package claimconfig

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"strings"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/shared/fielderr"
)

// Params is the JSON form of the parameters.
type Params struct {
	APIVersion string   `json:"apiVersion,omitempty"`
	Kind       string   `json:"kind,omitempty"`
	PodIfName  string   `json:"podIfName,omitempty"`
	Vlan       *uint32  `json:"vlan,omitempty"`
	VlanQoS    *uint32  `json:"vlanQoS,omitempty"`
	VlanProto  string   `json:"vlanProto,omitempty"`
	MAC        string   `json:"mac,omitempty"`
	SpoofChk   *bool    `json:"spoofChk,omitempty"`
	Trust      *bool    `json:"trust,omitempty"`
	LinkState  string   `json:"linkState,omitempty"`
	MinTxRate  *uint32  `json:"minTxRate,omitempty"`
	MaxTxRate  *uint32  `json:"maxTxRate,omitempty"`
	MTU        uint32   `json:"mtu,omitempty"`
	Addresses  []string `json:"addresses,omitempty"`
	Routes     []Route  `json:"routes,omitempty"`
	IPPools    []string `json:"ipPools,omitempty"`
	Vfio       *bool    `json:"vfio,omitempty"`
	DHCP       bool     `json:"dhcp,omitempty"`
	Network
}

// Route is a route in the pod, through the device's interface.
type Route struct {
	Destination string `json:"destination"`
	Gateway     string `json:"gateway,omitempty"`
	Table       uint32 `json:"table,omitempty"`
	Scope       string `json:"scope,omitempty"`
	Source      string `json:"source,omitempty"`
	Metric      uint32 `json:"metric,omitempty"`
	OnLink      bool   `json:"onlink,omitempty"`
}

var vlanProtos = map[string]devicev1.VlanProto{
	"802.1q":  devicev1.VlanProto_VLAN_PROTO_8021Q,
	"802.1ad": devicev1.VlanProto_VLAN_PROTO_8021AD,
}

var linkStates = map[string]devicev1.VfLinkState{
	"auto":    devicev1.VfLinkState_VF_LINK_STATE_AUTO,
	"enable":  devicev1.VfLinkState_VF_LINK_STATE_ENABLE,
	"disable": devicev1.VfLinkState_VF_LINK_STATE_DISABLE,
}

// Parse decodes raw strictly and returns the device config. Errors are
// *fielderr.Error naming the parameter ("vlanQoS", "routes[0].gateway").
// Empty or null parameters are an empty config.
func Parse(raw []byte) (*devicev1.DeviceConfig, error) {
	var p Params
	if t := bytes.TrimSpace(raw); len(t) > 0 && !bytes.Equal(t, []byte("null")) {
		if err := exactKeys(raw); err != nil {
			return nil, err
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&p); err != nil {
			return nil, decodeError(err)
		}
		if _, err := dec.Token(); !errors.Is(err, io.EOF) {
			return nil, fielderr.New("parameters", "trailing data after the JSON object")
		}
	}
	return p.Config()
}

// exactKeys refuses keys that encoding/json would match case-insensitively
// ("VLAN" for "vlan"), unknown keys and keys given twice, in the
// parameters and in each route: the parameters are strict. What is not
// JSON, or not of the right type, it leaves to the decoder.
func exactKeys(raw []byte) error {
	if !bytes.HasPrefix(bytes.TrimSpace(raw), []byte("{")) {
		return nil
	}
	err := checkKeys(json.NewDecoder(bytes.NewReader(raw)), "", paramsKeys)
	if errors.Is(err, errLeaveToDecoder) {
		return nil
	}
	return err
}

// keySchema is the keys an object may have, each with the keys of its own
// value when that is an object (or a list of objects); nil where the value
// is not an object.
type keySchema map[string]keySchema

// anyKey is the key of a keySchema whose object is a map: any key, each
// once.
const anyKey = "*"

var paramsKeys = func() keySchema {
	s := jsonKeys(reflect.TypeFor[Params]())
	s["routes"] = jsonKeys(reflect.TypeFor[Route]())
	s["rules"] = jsonKeys(reflect.TypeFor[Rule]())
	s["neighbors"] = jsonKeys(reflect.TypeFor[Neighbor]())
	s["vrf"] = jsonKeys(reflect.TypeFor[VRF]())
	for _, m := range []string{"sysctls", "features", "privateFlags"} {
		s[m] = keySchema{anyKey: nil}
	}
	return s
}()

// jsonKeys is the keys of struct t as JSON has them, an embedded struct's
// among them.
func jsonKeys(t reflect.Type) keySchema {
	keys := keySchema{}
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous {
			maps.Copy(keys, jsonKeys(f.Type))
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		keys[name] = nil
	}
	return keys
}

// errLeaveToDecoder stops checkKeys where the decoder reports the error.
var errLeaveToDecoder = errors.New("not for checkKeys")

// checkKeys reads one JSON value from dec and checks the keys of its
// objects (lists are looked through) against s; field names the value.
func checkKeys(dec *json.Decoder, field string, s keySchema) error {
	t, err := dec.Token()
	if err != nil {
		return errLeaveToDecoder
	}
	switch t {
	case json.Delim('['):
		for i := 0; dec.More(); i++ {
			if err := checkKeys(dec, fmt.Sprintf("%s[%d]", field, i), s); err != nil {
				return err
			}
		}
	case json.Delim('{'):
		if s == nil {
			return errLeaveToDecoder // an object where none belongs
		}
		if err := checkObjectKeys(dec, field, s); err != nil {
			return err
		}
	default:
		return nil
	}
	if _, err := dec.Token(); err != nil { // the closing ']' or '}'
		return errLeaveToDecoder
	}
	return nil
}

// checkObjectKeys checks the members of the object whose '{' dec read.
func checkObjectKeys(dec *json.Decoder, field string, s keySchema) error {
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return errLeaveToDecoder
		}
		key, _ := t.(string)
		child, known := s[key]
		name := key
		if field != "" {
			name = field + "." + key
		}
		c, isMap := s[anyKey]
		if isMap { // the map is named, its key said
			child, known, name = c, true, field
		}
		switch {
		case isMap && seen[key]:
			return fielderr.New(name, "%q given twice", key)
		case key == "":
			return fielderr.New(cmp.Or(field, "parameters"), `unknown field ""`)
		case !known:
			return fielderr.New(name, "unknown field")
		case seen[key]:
			return fielderr.New(name, "given twice")
		}
		seen[key] = true
		if err := checkKeys(dec, name, child); err != nil {
			return err
		}
	}
	return nil
}

func decodeError(err error) error {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr) && typeErr.Field == "":
		return fielderr.New("parameters", "%s is not a JSON object", typeErr.Value)
	case errors.As(err, &typeErr):
		// encoding/json names a field of the embedded Network through it.
		return fielderr.New(strings.TrimPrefix(typeErr.Field, "Network."), "%s is not a %s", typeErr.Value, typeErr.Type)
	case errors.As(err, &syntaxErr):
		return fielderr.New("parameters", "not JSON: %v", err)
	}
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return fielderr.New(strings.Trim(name, `"`), "unknown field")
	}
	return fielderr.New("parameters", "%v", err)
}

// Config validates p and returns the device config.
func (p *Params) Config() (*devicev1.DeviceConfig, error) {
	if err := p.validate(); err != nil {
		return nil, err
	}
	routes, err := p.routes()
	if err != nil {
		return nil, err
	}
	c := &devicev1.DeviceConfig{
		PodIfName: p.PodIfName, Vlan: p.Vlan, VlanQos: p.VlanQoS, VlanProto: vlanProtos[strings.ToLower(p.VlanProto)],
		MacAddress: strings.ToLower(p.MAC), SpoofChk: p.SpoofChk, Trust: p.Trust, LinkState: linkStates[p.LinkState],
		MinTxRate: p.MinTxRate, MaxTxRate: p.MaxTxRate, Mtu: p.MTU, Addresses: p.Addresses, IpPools: p.IPPools,
		Vfio: p.Vfio, Routes: routes, Dhcp: p.DHCP,
	}
	p.Network.into(c)
	if err := ValidateNetwork(c, ""); err != nil {
		return nil, err
	}
	return c, nil
}

func (p *Params) validate() error {
	if err := p.validateVersion(); err != nil {
		return err
	}
	if err := ValidateIfName("podIfName", p.PodIfName); err != nil {
		return err
	}
	if err := p.validateVlan(); err != nil {
		return err
	}
	if p.MAC != "" {
		if err := validMAC(p.MAC); err != nil {
			return err
		}
	}
	if _, ok := linkStates[p.LinkState]; p.LinkState != "" && !ok {
		return fielderr.New("linkState", "%q is not auto, enable or disable", p.LinkState)
	}
	if p.MinTxRate != nil && p.MaxTxRate != nil && *p.MaxTxRate != 0 && *p.MinTxRate > *p.MaxTxRate {
		return fielderr.New("minTxRate", "%d is above maxTxRate %d", *p.MinTxRate, *p.MaxTxRate)
	}
	if p.MTU != 0 && (p.MTU < 68 || p.MTU > 65535) {
		return fielderr.New("mtu", "%d is out of range 68..65535", p.MTU)
	}
	for i, a := range p.Addresses {
		if err := validCIDR(fmt.Sprintf("addresses[%d]", i), a); err != nil {
			return err
		}
	}
	for i, r := range p.Routes {
		if err := validRoute(fmt.Sprintf("routes[%d]", i), r); err != nil {
			return err
		}
	}
	if err := validPools(p.IPPools); err != nil {
		return err
	}
	if err := ValidateDHCP("", p.DHCP, p.Addresses, p.IPPools); err != nil {
		return err
	}
	return p.validateVfio()
}

// validateVfio refuses what a vfio device (no netdev, used through its
// device node) cannot take: the settings of an interface in the pod.
func (p *Params) validateVfio() error {
	if p.Vfio == nil || !*p.Vfio {
		return nil
	}
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"podIfName", p.PodIfName != ""}, {"mtu", p.MTU != 0}, {"addresses", len(p.Addresses) > 0},
		{"routes", len(p.Routes) > 0}, {"ipPools", len(p.IPPools) > 0}, {"dhcp", p.DHCP},
		{"rules", len(p.Rules) > 0}, {"neighbors", len(p.Neighbors) > 0}, {"vrf", p.VRF != nil},
		{"sysctls", len(p.Sysctls) > 0}, {"txqueuelen", p.TxQueueLen != nil},
		{"gsoMaxSize", p.GSOMaxSize != nil}, {"groMaxSize", p.GROMaxSize != nil},
		{"gsoIPv4MaxSize", p.GSOIPv4MaxSize != nil}, {"groIPv4MaxSize", p.GROIPv4MaxSize != nil},
		{"features", len(p.Features) > 0}, {"privateFlags", len(p.PrivateFlags) > 0},
	} {
		if f.set {
			return fielderr.New(f.name, "a vfio device (vfio: true) has no interface in the pod to take it")
		}
	}
	return nil
}

// ValidateDHCP refuses dhcp with static addresses or address pools: the
// interface's IPv4 address is the DHCP server's to give. prefix goes
// before the field's name ("config." in a provisioner request).
func ValidateDHCP(prefix string, dhcp bool, addresses, pools []string) error {
	switch {
	case !dhcp:
		return nil
	case len(addresses) > 0:
		return fielderr.New(prefix+"dhcp", "exclusive with addresses: the address comes from the DHCP server")
	case len(pools) > 0:
		return fielderr.New(prefix+"dhcp", "exclusive with ipPools: the address comes from the DHCP server")
	}
	return nil
}

func (p *Params) validateVlan() error {
	switch {
	case p.Vlan != nil && *p.Vlan > 4094:
		return fielderr.New("vlan", "%d is out of range 0..4094", *p.Vlan)
	case p.VlanQoS != nil && *p.VlanQoS > 7:
		return fielderr.New("vlanQoS", "%d is out of range 0..7", *p.VlanQoS)
	case p.VlanQoS != nil && *p.VlanQoS != 0 && (p.Vlan == nil || *p.Vlan == 0):
		return fielderr.New("vlanQoS", "needs a non-zero vlan")
	case p.VlanProto != "" && (p.Vlan == nil || *p.Vlan == 0):
		return fielderr.New("vlanProto", "needs a non-zero vlan")
	}
	if _, ok := vlanProtos[strings.ToLower(p.VlanProto)]; p.VlanProto != "" && !ok {
		return fielderr.New("vlanProto", "%q is not 802.1q or 802.1ad", p.VlanProto)
	}
	return nil
}

// MergeParams merges JSON objects key by key, later ones winning. One
// object is returned as it is, so claimconfig sees it whole.
func MergeParams(raws [][]byte) ([]byte, error) {
	switch len(raws) {
	case 0:
		return nil, nil
	case 1:
		return raws[0], nil
	}
	merged := map[string]json.RawMessage{}
	for _, raw := range raws {
		if err := objectFields(raw, merged); err != nil {
			return nil, err
		}
	}
	return json.Marshal(merged)
}

// objectFields adds the top-level fields of the JSON object raw to into;
// null or empty raw adds none. A key given twice is an error.
func objectFields(raw []byte, into map[string]json.RawMessage) error {
	if t := bytes.TrimSpace(raw); len(t) == 0 || bytes.Equal(t, []byte("null")) {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return fielderr.New("parameters", "not a JSON object")
	}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return fielderr.New("parameters", "not JSON: %v", err)
		}
		key := t.(string)
		if seen[key] {
			if key == "" {
				return fielderr.New("parameters", `key "" given twice`)
			}
			return fielderr.New(key, "given twice")
		}
		seen[key] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return fielderr.New("parameters", "not JSON: %v", err)
		}
		into[key] = v
	}
	if _, err := dec.Token(); err != nil {
		return fielderr.New("parameters", "not JSON: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fielderr.New("parameters", "trailing data after the JSON object")
	}
	return nil
}
