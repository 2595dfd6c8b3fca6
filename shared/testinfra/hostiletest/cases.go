// Package hostiletest sends every method of a gRPC service hostile
// requests and judges the answers, for tests that a service's validation
// holds against any message. The requests are made from the service's
// descriptors: the zero request, and for each valid request a test gives
// (a base), one variant per field and per kind of abuse: a string or bytes
// of 1 MiB, a list or map of 10,000 entries, an enum number the enum does
// not define (999), the largest and smallest integers, a message cleared
// or present but empty. Run fails the test for a method that has no base,
// so a method added later is covered or the test says it is not.
//
// An answer is good when it is success, or InvalidArgument whose message
// names, in a BadRequest field violation, a field the request has (JSON
// names, indices inside their lists) on the path of what was changed; a
// refused request must leave the service as it was (Target.State). With
// HOSTILETEST_VERBOSE set, every accepted case is logged, to review what a
// service takes.
package hostiletest

import (
	"fmt"
	"math"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Sizes of the abuse.
const (
	// BigString is the length of an oversized string or bytes field.
	BigString = 1 << 20
	// ManyEntries is the length of an oversized list or map.
	ManyEntries = 10_000
	// BadEnum is an enum number no netdra enum defines.
	BadEnum = 999
	// maxDepth bounds how deep Cases goes into messages the base leaves
	// unset.
	maxDepth = 4
)

// Case is one request for one method.
type Case struct {
	// Name says what was done ("allocations[0].claimUid: 1 MiB").
	Name string
	// Path is the field changed, in JSON names ("allocations[0].claimUid");
	// "" for the zero request.
	Path string
	// Scope is where a refusal may point: Path, or the outermost message
	// on it that the base lacks and the case made (whose other fields are
	// unset, so a refusal may name one of them); "" for anywhere.
	Scope string
	// Req is the request.
	Req proto.Message
}

// Cases returns the zero request of md's input type and the variants of
// each base.
func Cases(md protoreflect.MethodDescriptor, bases ...proto.Message) []Case {
	zero := bases[0].ProtoReflect().Type().New().Interface()
	out := []Case{{Name: "zero request", Req: zero}}
	if md.Input().FullName() != zero.ProtoReflect().Descriptor().FullName() {
		panic(fmt.Sprintf("%s takes %s, not %s", md.FullName(), md.Input().FullName(), zero.ProtoReflect().Descriptor().FullName()))
	}
	for i, base := range bases {
		g := &generator{base: base, prefix: fmt.Sprintf("base %d: ", i)}
		g.message(nil, base.ProtoReflect().Descriptor(), 0)
		out = append(out, g.cases...)
	}
	return out
}

// step is one element of a field path: a field, and the list index under
// it when there is one.
type step struct {
	fd    protoreflect.FieldDescriptor
	index int // -1: none
}

func pathString(path []step) string {
	var b strings.Builder
	for i, s := range path {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(s.fd.JSONName())
		if s.index >= 0 {
			fmt.Fprintf(&b, "[%d]", s.index)
		}
	}
	return b.String()
}

type generator struct {
	base   proto.Message
	prefix string
	cases  []Case
	// made is the path of the outermost message the base lacks on the
	// way to the field being varied; nil when the base has them all.
	made []step
}

// add adds a case for path.
func (g *generator) add(path []step, what string, req proto.Message) {
	p := pathString(path)
	scope := p
	if g.made != nil {
		scope = pathString(g.made)
	}
	g.cases = append(g.cases, Case{Name: g.prefix + p + ": " + what, Path: p, Scope: scope, Req: req})
}

// inMade runs f with path as the outermost made message, unless one is
// already.
func (g *generator) inMade(path []step, f func()) {
	if g.made != nil {
		f()
		return
	}
	g.made = append([]step(nil), path...)
	defer func() { g.made = nil }()
	f()
}

// variant adds the case made by applying change to a copy of the base at
// path (the message holding the field is reached by path minus its last
// step; nothing on the way is created that the base lacks unless change
// makes it).
func (g *generator) variant(path []step, what string, change func(m protoreflect.Message, fd protoreflect.FieldDescriptor)) {
	req := proto.Clone(g.base)
	m := req.ProtoReflect()
	for _, s := range path[:len(path)-1] {
		m = descend(m, s)
	}
	change(m, path[len(path)-1].fd)
	g.add(path, what, req)
}

// descend returns the message at s under m, making it when it is unset
// (a list element one past the end is appended).
func descend(m protoreflect.Message, s step) protoreflect.Message {
	if s.index < 0 {
		return m.Mutable(s.fd).Message()
	}
	l := m.Mutable(s.fd).List()
	if s.index == l.Len() {
		l.Append(l.NewElement())
	}
	return l.Get(s.index).Message()
}

// message adds the variants of every field of md, the message at path;
// the base's values there, where it has the message, are what is varied.
func (g *generator) message(path []step, md protoreflect.MessageDescriptor, depth int) {
	base := g.at(path)
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		p := append(append([]step(nil), path...), step{fd: fd, index: -1})
		switch {
		case fd.IsList():
			g.list(p, base, depth)
		case fd.IsMap():
			g.mapField(p)
		case fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind:
			g.subMessage(p, base, depth)
		default:
			g.scalar(p, base)
		}
	}
}

// at returns the base's message at path, or nil where the base has none.
func (g *generator) at(path []step) protoreflect.Message {
	m := g.base.ProtoReflect()
	for _, s := range path {
		if !m.Has(s.fd) {
			return nil
		}
		switch v := m.Get(s.fd); {
		case s.index < 0:
			m = v.Message()
		case s.index >= v.List().Len():
			return nil
		default:
			m = v.List().Get(s.index).Message()
		}
	}
	return m
}

func (g *generator) subMessage(p []step, base protoreflect.Message, depth int) {
	fd := p[len(p)-1].fd
	if base != nil && base.Has(fd) {
		g.variant(p, "cleared", func(m protoreflect.Message, fd protoreflect.FieldDescriptor) { m.Clear(fd) })
		g.message(p, fd.Message(), depth)
		return
	}
	if depth >= maxDepth {
		return
	}
	g.variant(p, "empty", func(m protoreflect.Message, fd protoreflect.FieldDescriptor) {
		m.Set(fd, protoreflect.ValueOfMessage(m.NewField(fd).Message()))
	})
	g.inMade(p, func() { g.message(p, fd.Message(), depth+1) })
}

func (g *generator) scalar(p []step, base protoreflect.Message) {
	fd := p[len(p)-1].fd
	var cur protoreflect.Value
	if base != nil {
		cur = base.Get(fd)
	}
	for _, v := range hostileValues(fd, cur) {
		g.variant(p, v.what, func(m protoreflect.Message, fd protoreflect.FieldDescriptor) { m.Set(fd, v.value) })
	}
}

func (g *generator) list(p []step, base protoreflect.Message, depth int) {
	fd := p[len(p)-1].fd
	var first protoreflect.Value
	if base != nil && base.Get(fd).List().Len() > 0 {
		first = base.Get(fd).List().Get(0)
	}
	g.variant(p, fmt.Sprintf("%d copies", ManyEntries), func(m protoreflect.Message, fd protoreflect.FieldDescriptor) {
		l := m.Mutable(fd).List()
		e := first
		if !e.IsValid() {
			e = element(l, fd)
		}
		for l.Len() < ManyEntries {
			l.Append(copyValue(e, fd))
		}
	})
	if fd.Kind() == protoreflect.StringKind {
		g.variant(p, fmt.Sprintf("%d different", ManyEntries), func(m protoreflect.Message, fd protoreflect.FieldDescriptor) {
			l := m.Mutable(fd).List()
			s := "x"
			if first.IsValid() {
				s = first.String()
			}
			for i := l.Len(); i < ManyEntries; i++ {
				l.Append(protoreflect.ValueOfString(fmt.Sprintf("%s%d", s, i)))
			}
		})
	}
	isMessage := fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind
	switch {
	case isMessage && first.IsValid():
		p[len(p)-1].index = 0
		g.message(p, fd.Message(), depth)
	case isMessage && depth < maxDepth:
		p[len(p)-1].index = 0 // an element the base lacks, made by descend
		g.inMade(p, func() { g.message(p, fd.Message(), depth+1) })
	case !isMessage:
		// Element 0 (the base's or a new one) of each hostile value.
		p[len(p)-1].index = 0
		for _, v := range hostileValues(fd, first) {
			g.listOf(p, v)
		}
	}
}

func (g *generator) listOf(p []step, v hostile) {
	req := proto.Clone(g.base)
	m := req.ProtoReflect()
	for _, s := range p[:len(p)-1] {
		m = descend(m, s)
	}
	if l := m.Mutable(p[len(p)-1].fd).List(); l.Len() > 0 {
		l.Set(0, v.value)
	} else {
		l.Append(v.value)
	}
	g.add(p, v.what, req)
}

func (g *generator) mapField(p []step) {
	g.variant(p, fmt.Sprintf("%d entries", ManyEntries), func(m protoreflect.Message, fd protoreflect.FieldDescriptor) {
		mp := m.Mutable(fd).Map()
		for i := range ManyEntries {
			k := mapKey(fd.MapKey(), i)
			if fd.MapValue().Kind() == protoreflect.MessageKind {
				mp.Mutable(k)
				continue
			}
			mp.Set(k, zeroish(fd.MapValue()))
		}
	})
	if p[len(p)-1].fd.MapKey().Kind() != protoreflect.StringKind {
		return
	}
	g.variant(p, "1 MiB key", func(m protoreflect.Message, fd protoreflect.FieldDescriptor) {
		k := protoreflect.ValueOfString(strings.Repeat("k", BigString)).MapKey()
		if fd.MapValue().Kind() == protoreflect.MessageKind {
			m.Mutable(fd).Map().Mutable(k)
			return
		}
		m.Mutable(fd).Map().Set(k, zeroish(fd.MapValue()))
	})
}

// hostile is one abusive value of a field, and what it is.
type hostile struct {
	what  string
	value protoreflect.Value
}

// hostileValues are the abusive values of a scalar field whose value in
// the base is cur (invalid when none).
func hostileValues(fd protoreflect.FieldDescriptor, cur protoreflect.Value) []hostile {
	switch fd.Kind() {
	case protoreflect.StringKind:
		s := ""
		if cur.IsValid() {
			s = cur.String()
		}
		return []hostile{{"1 MiB", protoreflect.ValueOfString(pad(s))}}
	case protoreflect.BytesKind:
		var b []byte
		if cur.IsValid() {
			b = cur.Bytes()
		}
		return []hostile{{"1 MiB", protoreflect.ValueOfBytes([]byte(pad(string(b))))}}
	case protoreflect.EnumKind:
		return []hostile{{fmt.Sprintf("enum %d", BadEnum), protoreflect.ValueOfEnum(BadEnum)},
			{"enum -1", protoreflect.ValueOfEnum(-1)}}
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return []hostile{{"max int32", protoreflect.ValueOfInt32(math.MaxInt32)}, {"min int32", protoreflect.ValueOfInt32(math.MinInt32)}}
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return []hostile{{"max int64", protoreflect.ValueOfInt64(math.MaxInt64)}, {"min int64", protoreflect.ValueOfInt64(math.MinInt64)}}
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return []hostile{{"max uint32", protoreflect.ValueOfUint32(math.MaxUint32)}}
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return []hostile{{"max uint64", protoreflect.ValueOfUint64(math.MaxUint64)}}
	}
	return nil // bool, float: nothing abusive
}

// pad makes s 1 MiB long, keeping it as its start (so that a check of the
// form passes and the length is what is judged).
func pad(s string) string {
	if len(s) >= BigString {
		return s
	}
	return s + strings.Repeat("a", BigString-len(s))
}

// element returns a new element for list l of field fd: an empty message,
// or a plain value of the field's kind.
func element(l protoreflect.List, fd protoreflect.FieldDescriptor) protoreflect.Value {
	if fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind {
		return l.NewElement()
	}
	return zeroish(fd)
}

// zeroish is a plain value of fd's kind: "x" for strings, 1 for numbers
// and enums, so that it is not the default.
func zeroish(fd protoreflect.FieldDescriptor) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return protoreflect.ValueOfString("x")
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte("x"))
	case protoreflect.EnumKind:
		return protoreflect.ValueOfEnum(1)
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(1)
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(1)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(1)
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(1)
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(1)
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(1)
	}
	return fd.Default()
}

func copyValue(v protoreflect.Value, fd protoreflect.FieldDescriptor) protoreflect.Value {
	if fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind {
		return protoreflect.ValueOfMessage(proto.Clone(v.Message().Interface()).ProtoReflect())
	}
	return v
}

func mapKey(fd protoreflect.FieldDescriptor, i int) protoreflect.MapKey {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(fmt.Sprintf("k%d", i)).MapKey()
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(i%2 == 1).MapKey()
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(i)).MapKey()
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(uint32(i)).MapKey()
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(uint64(i)).MapKey()
	}
	return protoreflect.ValueOfInt64(int64(i)).MapKey()
}
