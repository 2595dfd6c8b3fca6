package api_test

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/tools/txtar"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/services/state/api"
	"github.com/netdra/netdra/services/state/store"
	"github.com/netdra/netdra/shared/rpc"
)

// TestScenarios runs testdata/*.txtar: one lifecycle of the state service
// per file, driven over its real unix socket. The comment section is a
// script, one command a line:
//
//	call <Method> <json request>          the call succeeds
//	fail <Code> <Method> <json request>   the call fails with that code
//	error-has <text>                      the last failure's message holds text
//	dump <file>                           both tables, rendered, equal <file>
//	list <file> <json request>            ListAllocations, rendered, equals <file>
//	restart                               stop the service and start it on the same file
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txtar")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txtar"), func(t *testing.T) {
			ar, err := txtar.ParseFile(file)
			if err != nil {
				t.Fatal(err)
			}
			runScenario(t, ar)
		})
	}
}

func runScenario(t *testing.T, ar *txtar.Archive) {
	files := map[string]string{}
	for _, f := range ar.Files {
		files[f.Name] = string(f.Data)
	}
	svc := startService(t, filepath.Join(t.TempDir(), "state.db"))
	var lastErr error
	sc := bufio.NewScanner(strings.NewReader(string(ar.Comment)))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cmd, rest, _ := strings.Cut(line, " ")
		fail := func(format string, args ...any) {
			t.Fatalf("line %d: %s: %s", n, line, fmt.Sprintf(format, args...))
		}
		switch cmd {
		case "call":
			method, body, _ := strings.Cut(rest, " ")
			if _, err := svc.invoke(method, body); err != nil {
				fail("%v", err)
			}
		case "fail":
			code, call, _ := strings.Cut(rest, " ")
			method, body, _ := strings.Cut(call, " ")
			_, lastErr = svc.invoke(method, body)
			if got := status.Code(lastErr); got.String() != code {
				fail("got %v (%v), want %s", got, lastErr, code)
			}
		case "error-has":
			if lastErr == nil || !strings.Contains(status.Convert(lastErr).Message(), rest) {
				fail("last error %v does not hold %q", lastErr, rest)
			}
		case "dump":
			resp, err := svc.invoke("Dump", "{}")
			if err != nil {
				fail("%v", err)
			}
			d := resp.(*statev1.DumpResponse)
			got := renderDevices(d) + renderAllocations(d.GetAllocations())
			if diff := cmp.Diff(files[rest], got); diff != "" {
				fail("tables (-want +got):\n%s", diff)
			}
		case "list":
			name, body, _ := strings.Cut(rest, " ")
			resp, err := svc.invoke("ListAllocations", body)
			if err != nil {
				fail("%v", err)
			}
			got := renderAllocations(resp.(*statev1.ListAllocationsResponse).GetAllocations())
			if diff := cmp.Diff(files[name], got); diff != "" {
				fail("allocations (-want +got):\n%s", diff)
			}
		case "restart":
			svc.stop()
			svc = startService(t, svc.dbPath)
		default:
			fail("unknown command")
		}
	}
}

type service struct {
	t      *testing.T
	dbPath string
	st     *store.Store
	srv    *rpc.Server
	conn   *grpc.ClientConn
	done   chan error
}

func startService(t *testing.T, dbPath string) *service {
	t.Helper()
	log := slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	st, err := store.Open(dbPath, log)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "st")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "s.sock")
	srv := rpc.NewServer(rpc.ServerConfig{SocketPath: sock, Logger: log})
	statev1.RegisterStateServiceServer(srv.GRPC(), api.New(st))
	s := &service{t: t, dbPath: dbPath, st: st, srv: srv, done: make(chan error, 1)}
	go func() { s.done <- srv.Serve() }()
	if s.conn, err = rpc.Dial(sock); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.stop)
	return s
}

func (s *service) stop() {
	if s.conn == nil {
		return
	}
	s.conn.Close()
	s.conn = nil
	s.srv.Stop()
	if err := <-s.done; err != nil {
		s.t.Errorf("serve: %v", err)
	}
	if err := s.st.Close(); err != nil {
		s.t.Errorf("closing store: %v", err)
	}
}

// invoke calls a StateService method with a JSON request, the way grpcurl
// does.
func (s *service) invoke(method, body string) (proto.Message, error) {
	md := statev1.File_netdra_state_v1_state_proto.Services().ByName("StateService").Methods().ByName(protoreflect.Name(method))
	if md == nil {
		s.t.Fatalf("no method %q", method)
	}
	in, out := newMessage(s.t, md.Input()), newMessage(s.t, md.Output())
	if err := protojson.Unmarshal([]byte(body), in); err != nil {
		s.t.Fatalf("%s request %s: %v", method, body, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := s.conn.Invoke(ctx, "/"+string(md.Parent().FullName())+"/"+method, in, out)
	return out, err
}

func newMessage(t testing.TB, d protoreflect.MessageDescriptor) proto.Message {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(d.FullName())
	if err != nil {
		t.Fatal(err)
	}
	return mt.New().Interface()
}

func renderDevices(d *statev1.DumpResponse) string {
	var b strings.Builder
	for _, dev := range d.GetDevices() {
		fmt.Fprintf(&b, "device %s manager=%s if=%s\n", dev.GetName(),
			strings.TrimPrefix(dev.GetManager().String(), "DEVICE_MANAGER_"), dev.GetKernelIfName())
	}
	return b.String()
}

func renderAllocations(allocs []*statev1.Allocation) string {
	var b strings.Builder
	for _, a := range allocs {
		fmt.Fprintf(&b, "alloc %s/%s claim=%s pod=%s phase=%s", a.GetPool(), a.GetDeviceName(),
			a.GetClaimUid(), a.GetPodUid(), strings.TrimPrefix(a.GetPhase().String(), "PHASE_"))
		if pd := a.GetPreparedDevice(); pd != nil {
			fmt.Fprintf(&b, " prepared=%s", pd.GetDevice().GetKernelIfName())
		}
		if a.GetNetnsPath() != "" {
			fmt.Fprintf(&b, " netns=%s", a.GetNetnsPath())
		}
		if a.GetAttempts() != 0 || a.GetLastError() != "" {
			fmt.Fprintf(&b, " attempts=%d error=%q", a.GetAttempts(), a.GetLastError())
		}
		b.WriteString("\n")
	}
	return b.String()
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
