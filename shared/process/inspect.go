package process

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/netdra/netdra/shared/rpc"
)

// Inspector is a process's read-only call over its own socket for
// `<process> inspect`: what it holds now (the state service's tables,
// dra's or nri's status). It must change nothing.
type Inspector func(ctx context.Context, conn *grpc.ClientConn) (proto.Message, error)

// Report is what `<process> inspect` prints: one JSON object. It is the
// contract between the node processes and `kubectl netdra`, which runs the
// subcommand in each container and parses this.
type Report struct {
	// Process is the process's name (state, dra, nri, provisioner).
	Process string `json:"process"`
	// Version is the binary's version (Version).
	Version string `json:"version"`
	// Socket is the socket asked.
	Socket string `json:"socket"`
	// Healthy says the socket's health service answered SERVING;
	// HealthError says why not.
	Healthy     bool   `json:"healthy"`
	HealthError string `json:"healthError,omitempty"`
	// Status is the Inspector's reply as protojson (field names in
	// lowerCamelCase); absent for a process without one or when the call
	// failed, StatusError then says why.
	Status      json.RawMessage `json:"status,omitempty"`
	StatusError string          `json:"statusError,omitempty"`
}

// inspect writes the socket's Report, with the binary's version, to w as
// JSON. The exit code is 0 when the process is healthy and its status was
// read, 1 otherwise; the report is written either way.
func inspect(ctx context.Context, name, socket string, in Inspector, w io.Writer) int {
	r := Inspect(ctx, name, socket, in)
	r.Version = Version()
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil || !r.Healthy || r.StatusError != "" {
		return 1
	}
	return 0
}

// Inspect asks the socket's health and, with in and when healthy, the
// process's status. What it could not read is in the report's HealthError
// or StatusError. Version is left empty: the process's binary alone knows
// it (the inspect subcommand sets it).
func Inspect(ctx context.Context, name, socket string, in Inspector) Report {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	r := Report{Process: name, Socket: socket}
	if err := rpc.CheckHealth(ctx, socket, ""); err != nil {
		r.HealthError = err.Error()
		return r
	}
	r.Healthy = true
	if in != nil {
		if err := inspectStatus(ctx, socket, in, &r); err != nil {
			r.StatusError = err.Error()
		}
	}
	return r
}

func inspectStatus(ctx context.Context, socket string, in Inspector, r *Report) error {
	cc, err := rpc.Dial(socket)
	if err != nil {
		return err
	}
	defer cc.Close()
	msg, err := in(ctx, cc)
	if err != nil {
		return fmt.Errorf("status of %s: %w", socket, err)
	}
	b, err := protojson.MarshalOptions{EmitUnpopulated: false}.Marshal(msg)
	if err != nil {
		return fmt.Errorf("encoding the status: %w", err)
	}
	r.Status = b
	return nil
}
