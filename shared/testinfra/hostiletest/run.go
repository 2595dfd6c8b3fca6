package hostiletest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/testing/protocmp"
)

// Target is the service under test.
type Target struct {
	// Conn returns the connection to the service (after Reset, the new
	// one's).
	Conn func() grpc.ClientConnInterface
	// State returns what a refused call must leave as it was (a dump of a
	// store, the calls fakes recorded), compared with cmp and protocmp;
	// nil checks nothing.
	State func(t *testing.T) any
	// Reset puts the service in its initial state: before each method's
	// cases, and after a call changed State. Nil: never.
	Reset func(t *testing.T)
	// Timeout bounds each call; a call that takes longer is a hang.
	// Zero is 30 s.
	Timeout time.Duration
}

// Run sends every case (see Cases) of every method of sd to target, with
// bases[method name] as the valid requests to vary. A method without a
// base, or a base for no method, fails t.
func Run(t *testing.T, sd protoreflect.ServiceDescriptor, bases map[string][]proto.Message, target *Target) {
	t.Helper()
	methods := sd.Methods()
	for name := range bases {
		if methods.ByName(protoreflect.Name(name)) == nil {
			t.Errorf("a base for %s, which %s does not have", name, sd.FullName())
		}
	}
	for i := range methods.Len() {
		md := methods.Get(i)
		b := bases[string(md.Name())]
		if len(b) == 0 {
			t.Errorf("%s has no base request: give it one, so that its validation is tested", md.FullName())
			continue
		}
		t.Run(string(md.Name()), func(t *testing.T) {
			if target.Reset != nil {
				target.Reset(t)
			}
			for _, c := range Cases(md, b...) {
				runCase(t, md, c, target)
			}
		})
	}
}

func runCase(t *testing.T, md protoreflect.MethodDescriptor, c Case, target *Target) {
	t.Helper()
	var before any
	if target.State != nil {
		before = target.State(t)
	}
	err := call(target, md, c.Req)
	judge(t, c, err)
	if target.State == nil {
		return
	}
	if diff := cmp.Diff(before, target.State(t), protocmp.Transform()); diff != "" {
		if status.Code(err) != codes.OK {
			t.Errorf("%s: refused (%s) but changed the service (-before +after):\n%s", c.Name, short(err), shortText(diff, 2000))
		}
		if target.Reset != nil {
			target.Reset(t)
		}
	}
}

// call sends req to md: a unary call, or a stream opened, req sent and
// one message received.
func call(target *Target, md protoreflect.MethodDescriptor, req proto.Message) error {
	timeout := target.Timeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	method := fmt.Sprintf("/%s/%s", md.Parent().FullName(), md.Name())
	resp, err := newMessage(md.Output())
	if err != nil {
		return err
	}
	conn := target.Conn()
	var callErr error
	if !md.IsStreamingClient() && !md.IsStreamingServer() {
		callErr = conn.Invoke(ctx, method, req, resp)
	} else {
		callErr = stream(ctx, conn, md, method, req, resp)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%s hung: no answer in %v (%w)", method, timeout, callErr)
	}
	return callErr
}

func stream(ctx context.Context, conn grpc.ClientConnInterface, md protoreflect.MethodDescriptor, method string, req, resp proto.Message) error {
	s, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: md.IsStreamingServer(), ClientStreams: md.IsStreamingClient()}, method)
	if err != nil {
		return err
	}
	if err := s.SendMsg(req); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	if err := s.CloseSend(); err != nil {
		return err
	}
	return s.RecvMsg(resp)
}

func newMessage(md protoreflect.MessageDescriptor) (proto.Message, error) {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName())
	if err != nil {
		return nil, fmt.Errorf("message type %s: %w", md.FullName(), err)
	}
	return mt.New().Interface(), nil
}

// judge fails t unless err is nil or InvalidArgument naming a field of
// c.Req on the path of c.Path.
func judge(t *testing.T, c Case, err error) {
	t.Helper()
	if os.Getenv("HOSTILETEST_VERBOSE") != "" && err == nil {
		t.Logf("accepted: %s", c.Name)
	}
	if v := Verdict(c, err); v != "" {
		t.Errorf("%s: %s", c.Name, v)
	}
}

// Verdict says what is wrong with err as the answer to c, or "": it must be
// nil, or InvalidArgument with a BadRequest field violation naming, in
// the message too, a field of c.Req (see Resolve) on the path of c.Scope.
func Verdict(c Case, err error) string {
	st := status.Convert(err)
	switch st.Code() {
	case codes.OK:
		return ""
	case codes.InvalidArgument:
	default:
		return short(err) + "; want success or InvalidArgument naming the field"
	}
	field, ok := violation(st)
	switch {
	case !ok:
		return short(err) + " has no BadRequest field violation"
	case !strings.Contains(st.Message(), field):
		return fmt.Sprintf("%s does not name its field %q in the message", short(err), field)
	}
	if bad := Resolve(c.Req, field); bad != "" {
		return fmt.Sprintf("%s names %q, which the request does not have: %s", short(err), field, bad)
	}
	if c.Scope != "" && !onPath(field, c.Scope) {
		return fmt.Sprintf("%s names %q, not the field changed (%s) or one on its path", short(err), field, c.Scope)
	}
	return ""
}

func violation(st *status.Status) (string, bool) {
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok && len(br.GetFieldViolations()) > 0 {
			return br.GetFieldViolations()[0].GetField(), true
		}
	}
	return "", false
}

// short is err's text, cut to a size a test log takes.
func short(err error) string {
	st := status.Convert(err)
	return st.Code().String() + ": " + shortText(st.Message(), 300)
}

func shortText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return fmt.Sprintf("%s... (%d bytes)", s[:n], len(s))
}

// pathStep is one element of a field path as errors write it: a name and
// what is in brackets after it ("" when nothing).
type pathStep struct{ name, sub string }

var pathElem = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)(?:\[([^\]]*)\])?$`)

func parsePath(path string) ([]pathStep, bool) {
	var out []pathStep
	for _, e := range strings.Split(path, ".") {
		m := pathElem.FindStringSubmatch(e)
		if m == nil {
			return nil, false
		}
		out = append(out, pathStep{name: m[1], sub: m[2]})
	}
	return out, true
}

// Resolve follows a field path of an error ("allocations[0].config.vlanQoS")
// through m by JSON names, case aside (claim configs spell some names
// their own way), and says what does not resolve, or "". An index must
// be inside its list; a message the request leaves unset is followed by
// its type.
func Resolve(m proto.Message, path string) string {
	steps, ok := parsePath(path)
	if !ok {
		return fmt.Sprintf("%q is not a field path", path)
	}
	md := m.ProtoReflect().Descriptor()
	cur := m.ProtoReflect()
	for _, s := range steps {
		if md == nil {
			return fmt.Sprintf("%q is under a field that is no message", s.name)
		}
		fd := fieldByJSONName(md, s.name)
		if fd == nil {
			return fmt.Sprintf("%s has no field %q", md.FullName(), s.name)
		}
		var v protoreflect.Value
		if cur != nil && cur.Has(fd) {
			v = cur.Get(fd)
		}
		md, cur = fd.Message(), nil
		switch {
		case s.sub == "":
			if v.IsValid() && md != nil && !fd.IsList() && !fd.IsMap() {
				cur = v.Message()
			}
		case fd.IsList():
			i, err := strconv.Atoi(s.sub)
			if err != nil || i < 0 || !v.IsValid() || i >= v.List().Len() {
				return fmt.Sprintf("%s[%s] is not an item of the list", s.name, s.sub)
			}
			if md != nil {
				cur = v.List().Get(i).Message()
			}
		case fd.IsMap():
			md = fd.MapValue().Message()
		default:
			return fmt.Sprintf("%s[%s]: %s is not a list", s.name, s.sub, s.name)
		}
	}
	return ""
}

func fieldByJSONName(md protoreflect.MessageDescriptor, name string) protoreflect.FieldDescriptor {
	fields := md.Fields()
	for i := range fields.Len() {
		if strings.EqualFold(fields.Get(i).JSONName(), name) {
			return fields.Get(i)
		}
	}
	return nil
}

// onPath reports whether field is path, above it or below it: the one
// ends the other, step by step (case aside; a step without an index
// matches any index).
func onPath(field, path string) bool {
	a, ok1 := parsePath(field)
	b, ok2 := parsePath(path)
	if !ok1 || !ok2 {
		return false
	}
	for i := range min(len(a), len(b)) {
		if !strings.EqualFold(a[i].name, b[i].name) || (a[i].sub != "" && b[i].sub != "" && a[i].sub != b[i].sub) {
			return false
		}
	}
	return true
}
