package api_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/services/state/api"
	"github.com/netdra/netdra/services/state/store"
	"github.com/netdra/netdra/shared/testinfra/hostiletest"
)

// fuzzStore is the service a fuzz worker calls in-process: a seeded
// store, opened afresh after a call changed it.
type fuzzStore struct {
	tb  testing.TB
	dir string
	n   int
	st  *store.Store
	srv *api.Server
}

func (f *fuzzStore) reset() {
	if f.st != nil {
		_ = f.st.Close()
	}
	f.n++
	st, err := store.Open(filepath.Join(f.dir, fmt.Sprintf("state-%d.db", f.n)), slog.New(slog.DiscardHandler))
	if err != nil {
		f.tb.Fatal(err)
	}
	f.st, f.srv = st, api.New(st)
	sd := statev1.File_netdra_state_v1_state_proto.Services().ByName("StateService")
	for _, s := range hostileSeed {
		req := newMessage(f.tb, sd.Methods().ByName(protoreflect.Name(s.method)).Input())
		if err := protojson.Unmarshal([]byte(s.body), req); err != nil {
			f.tb.Fatal(err)
		}
		if _, err := f.call(s.method, req); err != nil {
			f.tb.Fatalf("seeding: %s: %v", s.method, err)
		}
	}
}

// call runs a unary method's handler on req, as the gRPC server would.
func (f *fuzzStore) call(method string, req proto.Message) (any, error) {
	for _, m := range statev1.StateService_ServiceDesc.Methods {
		if m.MethodName == method {
			return m.Handler(f.srv, context.Background(), func(v any) error {
				proto.Merge(v.(proto.Message), req)
				return nil
			}, nil)
		}
	}
	return nil, fmt.Errorf("no unary method %s", method)
}

func (f *fuzzStore) dump() *statev1.DumpResponse { return f.st.Dump() }

// stateCodes are the codes the state service answers by design; any other
// (Internal: an error it did not expect; Unknown) is a bug.
var stateCodes = map[codes.Code]bool{codes.OK: true, codes.InvalidArgument: true, codes.NotFound: true,
	codes.AlreadyExists: true, codes.FailedPrecondition: true, codes.ResourceExhausted: true}

// FuzzRequest feeds each unary StateService method (picked by the first
// argument) any request (the second, in the wire format) on a seeded
// store. The answer is a code the service means; a refused request
// changes nothing (Dump, revision included); an InvalidArgument names,
// in its message and its field violation, a field the request has, and
// is the same when the request is sent again.
func FuzzRequest(f *testing.F) {
	methods := statev1.StateService_ServiceDesc.Methods
	sd := statev1.File_netdra_state_v1_state_proto.Services().ByName("StateService")
	bases := requests(f, sd, hostileBases)
	for i, m := range methods {
		for _, b := range bases[m.MethodName] {
			wire, err := proto.Marshal(b)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(uint8(i), wire)
			f.Add(uint8(i), []byte{})
		}
	}
	fs := &fuzzStore{tb: f, dir: fastDir(f)}
	fs.reset()
	f.Cleanup(func() { _ = fs.st.Close() })
	f.Fuzz(func(t *testing.T, which uint8, wire []byte) {
		m := methods[int(which)%len(methods)]
		req := newMessage(t, sd.Methods().ByName(protoreflect.Name(m.MethodName)).Input())
		if proto.Unmarshal(wire, req) != nil {
			return
		}
		before := fs.dump()
		_, err := fs.call(m.MethodName, req)
		after := fs.dump()
		changed := !proto.Equal(before, after)
		code := status.Code(err)
		switch {
		case !stateCodes[code]:
			t.Fatalf("%s %v: %v, a code the service does not mean", m.MethodName, req, err)
		case err != nil && changed:
			t.Fatalf("%s %v: refused (%v) but the store changed", m.MethodName, req, err)
		case code == codes.InvalidArgument:
			if v := hostiletest.Verdict(hostiletest.Case{Req: req}, err); v != "" {
				t.Fatalf("%s %v: %s", m.MethodName, req, v)
			}
			if _, again := fs.call(m.MethodName, req); status.Convert(again).Message() != status.Convert(err).Message() {
				t.Fatalf("%s %v: %v, then %v", m.MethodName, req, err, again)
			}
		}
		if changed {
			fs.reset()
		}
	})
}
