// Package gatehook is nri's gate protocol: how netdra-hook, the OCI
// createRuntime hook runc runs as it creates a container, asks nri whether
// the devices of the container's pod are attached, on nri's gate socket.
// It holds both sides: [Ask], the hook's, and [Serve], nri's. It links the
// standard library alone, so that the hook starts in about the time of an
// empty Go program.
//
// # The contract
//
// One unix stream connection per question; nothing else is sent on it.
// Each message is a frame: its length as a 4-byte big-endian unsigned
// integer, then that many bytes of a JSON object; a frame is at most
// [MaxFrame] bytes.
//
//  1. The hook sends one [Request] frame: the pod's UID, its sandbox's
//     network namespace path when the hook knows it ("" lets nri take its
//     running sandbox's), and how long the hook waits for the answer.
//  2. nri answers with one [Answer] frame, within the request's wait:
//     Attached true when every prepared device of the pod is in the pod's
//     network namespace (the pod's attach has ended, and the devices were
//     found in place); otherwise Reason, the refusal the runtime reports
//     as the container's creation error (a device that could not be
//     attached, an attach that has not ended in time, no such sandbox).
//  3. nri closes the connection. A hook that closes it first (the runtime
//     killed it) ends nri's wait for that question.
//
// Anything else is a refusal on the hook's side: no socket or nobody
// listening (nri is not running), a connection closed or a frame cut
// before the answer, a frame that is not the contract's. The hook then
// fails (fail-closed): no container starts on the word of an nri that
// did not give it.
package gatehook

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

// HookTimeout is the OCI timeout of the hooks that wait on the gate, in
// seconds: the runtime kills a hook after it, and the container's
// creation fails. A hook's own wait ends a second before, with the reason.
// It is long enough for a burst of pods started at once: the kernel moves
// their links one at a time (RTNL), so the last pod's devices come in
// well after its container is created; the wait holds only that
// container's creation.
const HookTimeout = 30

// MaxFrame bounds a frame's JSON, either way.
const MaxFrame = 64 << 10

// Request is the hook's question.
type Request struct {
	// PodUID is the pod's UID.
	PodUID string `json:"podUID"`
	// Netns is the network namespace path of the pod's sandbox as the
	// runtime named it; empty: the one of the pod's running sandbox.
	Netns string `json:"netns,omitempty"`
	// WaitMillis is how long the hook waits for the answer: nri answers
	// within it, with a refusal if the attach has not ended.
	WaitMillis int64 `json:"waitMillis"`
}

// Answer is nri's answer.
type Answer struct {
	// Attached is true when every prepared device of the pod is in its
	// network namespace.
	Attached bool `json:"attached"`
	// Reason says why the container is refused, when Attached is false.
	Reason string `json:"reason,omitempty"`
}

// Ask asks nri on socket whether the pod's devices are attached, waiting
// at most wait for the answer. nil means they are; the error otherwise is
// the refusal, worded for the runtime to report as the container's
// creation error: nri's reason, or why nri gave none.
func Ask(ctx context.Context, socket string, req Request, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	// nri's wait ends a little before the hook's, so that its reason
	// arrives while the hook still listens.
	req.WaitMillis = (wait - min(wait/10, answerMargin)).Milliseconds()
	ans, err := ask(ctx, socket, req)
	switch {
	case err != nil && (ctx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded)):
		return fmt.Errorf("netdra: the container is not started without its pod's devices: netdra's nri plugin (%s) did not say they are attached within %s", socket, wait)
	case err != nil:
		return fmt.Errorf("netdra: the container is not started without its pod's devices: %w", err)
	case !ans.Attached && ans.Reason == "":
		return fmt.Errorf("netdra: the container is not started without its pod's devices: netdra's nri plugin (%s) refused it without a reason", socket)
	case !ans.Attached:
		return errors.New(ans.Reason)
	}
	return nil
}

// answerMargin is the most that nri's wait is shorter than the hook's.
const answerMargin = 500 * time.Millisecond

// ErrNotRunning is the error of a question nri was not there to hear: no
// socket, or nobody listening on it.
var ErrNotRunning = errors.New("netdra's nri plugin is not running")

func ask(ctx context.Context, socket string, req Request) (Answer, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		if ctx.Err() != nil {
			return Answer{}, err
		}
		return Answer{}, fmt.Errorf("%w (its gate socket: %w)", ErrNotRunning, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if err := writeFrame(conn, req); err != nil {
		return Answer{}, fmt.Errorf("asking netdra's nri plugin (%s): %w", socket, err)
	}
	var ans Answer
	if err := readFrame(conn, &ans); err != nil {
		return Answer{}, fmt.Errorf("netdra's nri plugin (%s) gave no answer: %w", socket, err)
	}
	return ans, nil
}

// writeFrame writes v as one frame.
func writeFrame(w io.Writer, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(body) > MaxFrame {
		return fmt.Errorf("a frame of %d bytes, over %d", len(body), MaxFrame)
	}
	buf := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(body)), uint32(len(body)))
	_, err = w.Write(append(buf, body...))
	return err
}

// readFrame reads one frame into v. A connection closed before the whole
// frame is io.ErrUnexpectedEOF (io.EOF before its first byte).
func readFrame(r io.Reader, v any) error {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > MaxFrame {
		return fmt.Errorf("a frame of %d bytes, over %d", size, MaxFrame)
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(r, body); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("a frame that is not the gate's JSON: %w", err)
	}
	return nil
}
