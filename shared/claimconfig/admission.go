package claimconfig

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// Validation is one validation of the chart's ValidatingAdmissionPolicy
// for claims: CEL over variables.params, the parameters (JSON objects) of
// a claim's config entries for netdra, and variables.at, the path of each
// ("spec.devices.config[0].opaque.parameters."). Its message names the
// parameter as Parse's error does ("routes[1].table: ...").
type Validation struct {
	// Param is the Reference name the validation checks, or "parameters"
	// for the keys of the parameters.
	Param             string `json:"-" yaml:"-"`
	Expression        string `json:"expression" yaml:"expression"`
	MessageExpression string `json:"messageExpression" yaml:"messageExpression"`
	Reason            string `json:"reason" yaml:"reason"`
}

// PrepareOnly is what Parse checks that the admission policy does not,
// each with why: docs/claims.md's list of them is this.
var PrepareOnly = []string{
	"Rules between two top-level parameters (vlanQoS and vlanProto need a vlan; minTxRate at most maxTxRate; apiVersion with kind; vfio with none of the interface's parameters; dhcp with neither addresses nor ipPools; vrf.name not podIfName): dra merges every config entry of the driver that applies to a request, the DeviceClass's first, so one entry may hold what another completes.",
	"A key given twice in one object: the apiserver decodes the parameters before the policy sees them, and keeps one.",
	"A value only the node knows: a pool that exists, a feature the device can change, a private flag its driver has, a gsoMaxSize within the device's TSO maximum.",
}

// The cel expressions a check is made of use $v for the value checked and
// $o for the object holding it (the parameters, or a route, rule,
// neighbour or the vrf).
type check struct {
	ok  string // true when $v is good
	msg string // the reason, a string, when it is not
	// sep: msg begins with what follows the field's name ("[2]: ...",
	// ".name: ..."); else ": " goes between them.
	sep bool
}

func quote(s string) string { return strconv.Quote(s) }

// celList is strs as a CEL list of strings.
func celList(strs []string) string {
	q := make([]string, len(strs))
	for i, s := range strs {
		q[i] = quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

func uintRange(lo, hi int64) check {
	return check{
		ok:  fmt.Sprintf("type($v) == int && $v >= %d && $v <= %d", lo, hi),
		msg: fmt.Sprintf(`type($v) == int ? string($v) + " is out of range %d..%d" : "not an integer %d..%d"`, lo, hi, lo, hi),
	}
}

var (
	uint32Check = uintRange(0, math.MaxUint32)
	boolCheck   = check{ok: "type($v) == bool", msg: `"not true or false"`}
	stringCheck = check{ok: "type($v) == string", msg: `"not a string"`}
)

func enum(vals []string, fold bool) check {
	v := "$v"
	if fold {
		v = "$v.lowerAscii()"
	}
	names := strings.Join(vals[:len(vals)-1], ", ") + " or " + vals[len(vals)-1]
	return check{
		ok:  fmt.Sprintf("type($v) == string && %s in %s", v, celList(vals)),
		msg: fmt.Sprintf(`type($v) == string ? "\"" + $v + "\" is not %s" : "not a string"`, names),
	}
}

func exactly(want string) check {
	return check{
		ok:  fmt.Sprintf("type($v) == string && $v == %s", quote(want)),
		msg: fmt.Sprintf(`type($v) == string ? "\"" + $v + "\" is not a known one: %s" : "not a string"`, want),
	}
}

// ifNameCheck is ValidateIfName: empty, or a name the kernel takes.
var ifNameCheck = check{
	ok: fmt.Sprintf(`type($v) == string && ($v == "" || $v.matches("^[a-zA-Z0-9._-]{1,%d}$") && !($v in [".", "..", "lo"]))`, MaxIfNameLen),
	msg: fmt.Sprintf(`type($v) != string ? "not a string" : size($v) > %d ? "\"" + $v + "\" is longer than %d bytes" : `+
		`$v in [".", "..", "lo"] ? "\"" + $v + "\" is reserved" : "\"" + $v + "\": use letters, digits, '.', '_' and '-'"`, MaxIfNameLen, MaxIfNameLen),
}

// requiredIfName is an interface name that must be given.
var requiredIfName = check{
	ok:  `$v != "" && ` + ifNameCheck.ok,
	msg: `$v == "" ? "required" : ` + ifNameCheck.msg,
}

const macRE = `^([0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}|[0-9a-fA-F]{2}(-[0-9a-fA-F]{2}){5}|[0-9a-fA-F]{4}\\.[0-9a-fA-F]{4}\\.[0-9a-fA-F]{4})$`

// macCheck is a 48-bit MAC address, not all zeros; unicast says not a
// multicast one either.
func macCheck(unicast bool) check {
	c := check{
		ok:  fmt.Sprintf(`type($v) == string && $v.matches("%s") && !$v.matches("^[0.:-]+$")`, macRE),
		msg: fmt.Sprintf(`type($v) == string && $v.matches("%s") ? "\"" + $v + "\" is all zeros" : "not a 48-bit MAC address"`, macRE),
	}
	if unicast {
		odd := `$v.substring(1, 2) in ["1", "3", "5", "7", "9", "b", "d", "f", "B", "D", "F"]`
		c.ok += " && !(" + odd + ")"
		c.msg = fmt.Sprintf(`type($v) == string && $v.matches("%s") && %s ? "\"" + $v + "\" is a multicast address" : %s`, macRE, odd, c.msg)
	}
	return c
}

// unicast is ippool.Unicast of the CEL IP x (isIP and isCIDR refuse zones
// and IPv4-mapped IPv6 already).
func unicast(x string) string {
	return strings.ReplaceAll(`!$x.isUnspecified() && !cidr("224.0.0.0/4").containsIP($x) && !cidr("ff00::/8").containsIP($x) && $x != ip("255.255.255.255")`, "$x", x)
}

var (
	cidrAddrCheck = check{
		ok:  `type($v) == string && isCIDR($v) && ` + unicast(`cidr($v).ip()`),
		msg: `type($v) == string && isCIDR($v) ? "\"" + $v + "\" is not a unicast address" : "not an address in CIDR form (10.0.0.2/24, fd00::2/64)"`,
	}
	unicastIPCheck = check{
		ok:  `type($v) == string && isIP($v) && ` + unicast(`ip($v)`),
		msg: `type($v) == string && isIP($v) ? "\"" + $v + "\" is not a unicast address" : "not an IP address"`,
	}
	prefixCheck = check{
		ok:  `type($v) == string && isCIDR($v) && cidr($v).masked() == cidr($v)`,
		msg: `type($v) == string && isCIDR($v) ? "\"" + $v + "\" has host bits set; the prefix is " + string(cidr($v).masked()) : "not a prefix in CIDR form (10.0.0.0/8, fd00::/64)"`,
	}
)

func and(c check, cond, msg string) check {
	return check{ok: c.ok + " && (" + cond + ")", msg: fmt.Sprintf("(!(%s) ? (%s) : (%s))", c.ok, c.msg, msg), sep: c.sep}
}

// validTableCheck is validTable: not 253 or 255; nonZero: not 0 either.
func tableCheck(nonZero bool) check {
	c := and(uint32Check, "!($v in [253, 255])", `string($v) + " is one of the kernel's tables (253 default, 255 local)"`)
	if nonZero {
		c = and(uint32Check, "$v != 0", `"required"`)
		c = and(c, "!($v in [253, 255])", `string($v) + " is one of the kernel's tables (253 default, 255 local)"`)
	}
	return c
}

// sameFamily adds to an IP check that $v is of the family of the prefix
// field other of $o, when that is one.
func sameFamily(c check, other, ofWhat string, addr string) check {
	o := fmt.Sprintf(`$o[%s]`, quote(other))
	cond := fmt.Sprintf(`!(%s in $o && type(%s) == string && isCIDR(%s)) || cidr(%s).ip().family() == %s.family()`, quote(other), o, o, o, addr)
	return and(c, cond, fmt.Sprintf(`$v + " and %s " + %s + " are of different IP families"`, ofWhat, o))
}

func sub(s, k, x string) string {
	return strings.NewReplacer("$k", k, "$x", x).Replace(s)
}

var sysctlsCheck = func() check {
	var b strings.Builder
	b.WriteString("{")
	for i, k := range sortedKeys(Sysctls) {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s: [%d, %d]", quote(k), Sysctls[k].min, Sysctls[k].max)
	}
	b.WriteString("}")
	allowed := b.String()
	return check{
		ok: fmt.Sprintf("type($v) == map && $v.all(k, k in %s && type($v[k]) == int && $v[k] >= %s[k][0] && $v[k] <= %s[k][1])", allowed, allowed, allowed),
		msg: fmt.Sprintf(`type($v) != map ? "not an object" : $v.exists(k, !(k in %s)) ? "\"" + $v.filter(k, !(k in %s))[0] + "\" is not a per-interface sysctl a claim may set (%s)" : `+
			`$v.exists(k, type($v[k]) != int) ? $v.filter(k, type($v[k]) != int).map(k, "\"" + k + "\": not an integer")[0] : `+
			`$v.filter(k, type($v[k]) == int && !($v[k] >= %s[k][0] && $v[k] <= %s[k][1])).map(k, "\"" + k + "\": " + string($v[k]) + " is out of range " + string(%s[k][0]) + ".." + string(%s[k][1]))[0]`,
			allowed, allowed, strings.Join(sortedKeys(Sysctls), ", "), allowed, allowed, allowed, allowed),
	}
}()

var ethtoolCheck = check{
	ok: fmt.Sprintf(`type($v) == map && $v.all(k, k.matches("^[a-zA-Z0-9._-]{1,%d}$") && type($v[k]) == bool)`, maxEthtoolName),
	msg: fmt.Sprintf(`type($v) != map ? "not an object" : $v.exists(k, !k.matches("^[a-zA-Z0-9._-]{1,%d}$")) ? `+
		`"\"" + $v.filter(k, !k.matches("^[a-zA-Z0-9._-]{1,%d}$"))[0] + "\": a name is 1..%d bytes of letters, digits, '-', '_' and '.'" : `+
		`"\"" + $v.filter(k, type($v[k]) != bool)[0] + "\": not true or false"`, maxEthtoolName, maxEthtoolName, maxEthtoolName),
}

// listOf is a list of elem; more are checks of the whole list, [ok, msg]
// with msg beginning as a sep one does.
func listOf(elem check, more ...[2]string) check {
	eok, emsg := strings.ReplaceAll(elem.ok, "$v", "e"), strings.ReplaceAll(elem.msg, "$v", "e")
	c := check{
		ok: "type($v) == list && $v.all(e, " + eok + ")",
		msg: `type($v) != list ? ": not a list" : $v.transformList(i, e, !(` + eok + `), ` +
			`"[" + string(i) + "]: " + (` + emsg + `))[0]`,
		sep: true,
	}
	for _, m := range more {
		c = and(c, m[0], m[1])
	}
	return c
}

// objectsOf is a list of objects with the keys of t.
func objectsOf(t reflect.Type) check {
	keys := celList(sortedKeys(jsonKeys(t)))
	return check{
		ok: "type($v) == list && $v.all(e, type(e) == map && e.all(k, k in " + keys + "))",
		msg: `type($v) != list ? ": not a list" : $v.transformList(i, e, !(type(e) == map && e.all(k, k in ` + keys + `)), ` +
			`type(e) != map ? "[" + string(i) + "]: not an object" : "[" + string(i) + "]." + e.filter(k, !(k in ` + keys + `))[0] + ": unknown field")[0]`,
		sep: true,
	}
}

// The fields and types of the parameters the policy's expressions take
// apart.
type field struct {
	c        check
	required bool
}

// Fields is the check of each Reference name. A list's or an object's own
// entry checks its type and keys; its fields' entries check the fields.
var fields = map[string]field{
	"apiVersion": {c: exactly(APIVersion)},
	"kind":       {c: exactly(Kind)},
	"podIfName":  {c: ifNameCheck},
	"vlan":       {c: uintRange(0, 4094)},
	"vlanQoS":    {c: uintRange(0, 7)},
	"vlanProto":  {c: enum(sortedKeys(vlanProtos), true)},
	"mac":        {c: macCheck(true)},
	"spoofChk":   {c: boolCheck},
	"trust":      {c: boolCheck},
	"linkState":  {c: enum(sortedKeys(linkStates), false)},
	"minTxRate":  {c: uint32Check},
	"maxTxRate":  {c: uint32Check},
	"mtu":        {c: and(uint32Check, "$v == 0 || $v >= 68 && $v <= 65535", `string($v) + " is out of range 68..65535"`)},
	"addresses": {c: listOf(cidrAddrCheck, [2]string{fmt.Sprintf("size($v) <= %d", MaxStatusIPs), fmt.Sprintf(`": " + string(size($v)) + " addresses; a claim status holds at most %d"`, MaxStatusIPs)},
		[2]string{"$v.all(i, a, !$v.exists(j, b, j < i && b == a))", `$v.transformList(i, a, $v.exists(j, b, j < i && b == a), "[" + string(i) + "]: " + a + " is given twice")[0]`})},
	"ipPools":              {c: listOf(and(stringCheck, `$v.matches("`+poolNameRE.String()+`")`, `"\"" + $v + "\" is not a pool name"`), [2]string{"size($v) <= 2", `": at most two pools (one per IP family), got " + string(size($v))`})},
	"vfio":                 {c: boolCheck},
	"dhcp":                 {c: boolCheck},
	"routes":               {c: objectsOf(reflect.TypeFor[Route]())},
	"routes[].destination": {c: prefixCheck, required: true},
	"routes[].gateway":     {c: sameFamily(unicastIPCheck, "destination", "destination", "ip($v)")},
	"routes[].table":       {c: tableCheck(false)},
	"routes[].scope": {c: and(enum([]string{"universe", "site", "link", "host"}, false),
		`$v != "link" || !("gateway" in $o) || $o["gateway"] == "" || $o["gateway"] == null`, `"a route with a gateway cannot be of scope link"`)},
	"routes[].source":     {c: sameFamily(unicastIPCheck, "destination", "destination", "ip($v)")},
	"routes[].metric":     {c: uint32Check},
	"routes[].onlink":     {c: and(boolCheck, `!$v || "gateway" in $o && type($o["gateway"]) == string && $o["gateway"] != ""`, `"needs a gateway"`)},
	"rules":               {c: objectsOf(reflect.TypeFor[Rule]())},
	"rules[].priority":    {c: uint32Check},
	"rules[].from":        {c: prefixCheck},
	"rules[].to":          {c: sameFamily(prefixCheck, "from", "from", "cidr($v).ip()")},
	"rules[].table":       {c: tableCheck(true), required: true},
	"rules[].iif":         {c: ifNameCheck},
	"rules[].oif":         {c: ifNameCheck},
	"rules[].fwmark":      {c: uint32Check},
	"rules[].fwmask":      {c: and(uint32Check, `"fwmark" in $o && $o["fwmark"] != null`, `"needs an fwmark"`)},
	"neighbors":           {c: objectsOf(reflect.TypeFor[Neighbor]())},
	"neighbors[].address": {c: unicastIPCheck, required: true},
	"neighbors[].mac":     {c: macCheck(false), required: true},
	"vrf": {c: check{
		ok:  "type($v) == map && $v.all(k, k in " + celList(sortedKeys(jsonKeys(reflect.TypeFor[VRF]()))) + ")",
		msg: `type($v) != map ? ": not an object" : "." + $v.filter(k, !(k in ` + celList(sortedKeys(jsonKeys(reflect.TypeFor[VRF]()))) + `))[0] + ": unknown field"`,
		sep: true,
	}},
	"vrf.name":       {c: requiredIfName, required: true},
	"vrf.table":      {c: tableCheck(true), required: true},
	"sysctls":        {c: sysctlsCheck},
	"txqueuelen":     {c: uintRange(0, math.MaxInt32)},
	"gsoMaxSize":     {c: uintRange(1, maxGSOSize)},
	"groMaxSize":     {c: uintRange(1, maxGSOSize)},
	"gsoIPv4MaxSize": {c: uintRange(1, maxGSOSize)},
	"groIPv4MaxSize": {c: uintRange(1, maxGSOSize)},
	"features":       {c: ethtoolCheck},
	"privateFlags":   {c: ethtoolCheck},
	"ebpfPrograms":   {c: boolCheck},
}

// MaxStatusIPs is how many addresses a claim status entry's networkData
// holds: dra refuses more at prepare, and the admission policy at apply.
const MaxStatusIPs = 16

// Validations is the policy's validations: the keys of the parameters,
// then one for each parameter of Reference, in its order.
func Validations() []Validation {
	keys := celList(sortedKeys(paramsKeys))
	out := []Validation{{
		Param:             "parameters",
		Expression:        "variables.params.all(p, p.all(k, k in " + keys + "))",
		MessageExpression: "variables.params.transformList(j, p, !p.all(k, k in " + keys + `), variables.at[j] + p.filter(k, !(k in ` + keys + `))[0] + ": unknown field")[0]`,
		Reason:            "Invalid",
	}}
	for _, p := range Reference {
		f := fields[p.Name]
		out = append(out, validation(p.Name, f))
	}
	return out
}

// validation is the Validation of the parameter name with f.
func validation(name string, f field) Validation {
	// Each is checked where it is set, null counting as unset.
	set := func(o, k string) string {
		return fmt.Sprintf(`%s in %s && type(%s[%s]) != null_type`, quote(k), o, o, quote(k))
	}
	// ok and msg over the value v in object o, named by the CEL string
	// expression label.
	okAt := func(o, k string) string {
		c := strings.NewReplacer("$v", o+"["+quote(k)+"]", "$o", o).Replace(f.c.ok)
		if f.required {
			return "(" + set(o, k) + " && " + c + ")"
		}
		return "(!(" + set(o, k) + ") || " + c + ")"
	}
	msgAt := func(o, k string) string {
		m := strings.NewReplacer("$v", o+"["+quote(k)+"]", "$o", o).Replace(f.c.msg)
		if f.required {
			return "(!(" + set(o, k) + `) ? "required" : ` + m + ")"
		}
		return "(" + m + ")"
	}
	v := Validation{Param: name, Reason: "Invalid"}
	parent, k, nested := strings.Cut(name, ".")
	switch {
	case !nested:
		v.Expression = "variables.params.all(p, " + okAt("p", name) + ")"
		sep := ` + ": " + `
		if f.c.sep {
			sep = " + "
		}
		v.MessageExpression = "variables.params.transformList(j, p, !" + okAt("p", name) + ", variables.at[j] + " + quote(name) + sep + msgAt("p", name) + ")[0]"
	case strings.HasSuffix(parent, "[]"):
		list := strings.TrimSuffix(parent, "[]")
		// Elements that are not objects are the list's own validation's.
		guard := fmt.Sprintf(`!(%s) || type(p[%s]) != list`, set("p", list), quote(list))
		v.Expression = fmt.Sprintf("variables.params.all(p, %s || p[%s].all(e, type(e) != map || %s))", guard, quote(list), okAt("e", k))
		v.MessageExpression = fmt.Sprintf(`variables.params.transformList(j, p, !(%s || p[%s].all(e, type(e) != map || %s)), `+
			`variables.at[j] + p[%s].transformList(i, e, type(e) == map && !%s, %s + "[" + string(i) + "].%s: " + %s)[0])[0]`,
			guard, quote(list), okAt("e", k), quote(list), okAt("e", k), quote(list), k, msgAt("e", k))
	default:
		guard := fmt.Sprintf(`!(%s) || type(p[%s]) != map`, set("p", parent), quote(parent))
		o := "p[" + quote(parent) + "]"
		v.Expression = fmt.Sprintf("variables.params.all(p, %s || %s)", guard, okAt(o, k))
		v.MessageExpression = fmt.Sprintf(`variables.params.transformList(j, p, !(%s || %s), variables.at[j] + "%s.%s: " + %s)[0]`, guard, okAt(o, k), parent, k, msgAt(o, k))
	}
	return v
}

// validationParams is the Reference names Validations covers, and
// "parameters".
func validationParams() []string {
	var names []string
	for _, v := range Validations() {
		names = append(names, v.Param)
	}
	return slices.Sorted(slices.Values(names))
}
