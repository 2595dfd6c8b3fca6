package metrics

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/netdra/netdra/shared/testinfra/testenv"
)

// TestServe_AddressInUse: an address another socket holds is no error:
// the actor says it waits, serves once the address is free, and an
// interrupt ends it, waiting or serving.
func TestServe_AddressInUse(t *testing.T) {
	for _, freed := range []bool{true, false} {
		held, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := held.Addr().String()
		logged := &testenv.Buffer{}
		a, err := Serve(addr, NewRegistry(), slog.New(slog.NewTextHandler(logged, nil)))
		if err != nil {
			t.Fatalf("Serve on a held address: %v", err)
		}
		done := make(chan error, 1)
		go func() { done <- a.Execute() }()
		if !freed {
			a.Interrupt(nil)
			held.Close()
			if err := <-done; err != nil {
				t.Errorf("interrupted while waiting: %v", err)
			}
			continue
		}
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(logged.String(), "address is in use") {
			if time.Now().After(deadline) {
				t.Fatalf("log %q: want the wait", logged.String())
			}
			time.Sleep(5 * time.Millisecond)
		}
		held.Close()
		for {
			resp, err := http.Get("http://" + addr + "/metrics")
			if err == nil {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK && strings.Contains(string(body), "go_goroutines") {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("not served after the address was freed: %v", err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		a.Interrupt(nil)
		if err := <-done; err != nil {
			t.Errorf("after the interrupt: %v", err)
		}
	}
}
