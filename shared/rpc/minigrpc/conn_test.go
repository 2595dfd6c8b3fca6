package minigrpc

import (
	"bytes"
	"encoding/binary"
	"io"
	"testing"
	"time"

	"golang.org/x/net/http2/hpack"
)

func TestDecodeMessage(t *testing.T) {
	for in, want := range map[string]string{
		"":                  "",
		"plain":             "plain",
		"100%25 %C3%BC":     "100% ü",
		"bad %zz and %4":    "bad %zz and %4",
		"%":                 "%",
		"end %41":           "end A",
		"%E2%89%A0%0A%09ok": "≠\n\tok",
	} {
		if got := decodeMessage(in); got != want {
			t.Errorf("decodeMessage(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestEncodeTimeout(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-time.Second:           "0n",
		50 * time.Millisecond:  "50000000n",
		29 * time.Second:       "29000000u",
		1000 * time.Second:     "1000000m",
		200 * time.Hour:        "720000S",
		99999999 * time.Minute: "99999999M",
	} {
		if got := encodeTimeout(d); got != want {
			t.Errorf("encodeTimeout(%v) = %q, want %q", d, got, want)
		}
	}
}

// serverBytes is what a server sends for a call: its SETTINGS, then the
// response's header blocks (nil: none) and DATA.
func serverBytes(headers []hpack.HeaderField, data []byte, trailers []hpack.HeaderField) []byte {
	block := func(fields []hpack.HeaderField) []byte {
		var buf bytes.Buffer
		enc := hpack.NewEncoder(&buf)
		for _, f := range fields {
			_ = enc.WriteField(f)
		}
		return buf.Bytes()
	}
	b := appendSettings(nil, [][2]uint32{{settingMaxFrameSize, 16384}})
	b = appendFrame(b, framePing, 0, 0, make([]byte, 8))
	if headers != nil {
		flags := uint8(flagEndHeaders)
		if trailers == nil {
			flags |= flagEndStream
		}
		b = appendFrame(b, frameHeaders, flags, streamID, block(headers))
	}
	if data != nil {
		b = appendFrame(b, frameData, 0, streamID, binary.BigEndian.AppendUint32([]byte{0}, uint32(len(data))))
		b = appendFrame(b, frameData, 0, streamID, data)
	}
	if trailers != nil {
		b = appendFrame(b, frameHeaders, flagEndHeaders|flagEndStream, streamID, block(trailers))
	}
	return b
}

type fakeConn struct {
	io.Reader
	io.Writer
}

// FuzzRoundTrip feeds a call's connection whatever bytes a server might
// send: the call ends (the input runs out) without a panic, and an OK
// call's response message fits the limit.
func FuzzRoundTrip(f *testing.F) {
	ok := []hpack.HeaderField{{Name: ":status", Value: "200"}, {Name: "content-type", Value: "application/grpc"}}
	f.Add(serverBytes(ok, []byte{}, []hpack.HeaderField{{Name: "grpc-status", Value: "0"}}))
	f.Add(serverBytes(ok, []byte("\x0a\x01u"), []hpack.HeaderField{{Name: "grpc-status", Value: "0"}}))
	f.Add(serverBytes(append(ok, hpack.HeaderField{Name: "grpc-status", Value: "9"}, hpack.HeaderField{Name: "grpc-message", Value: "no %C3%BC"}), nil, nil))
	f.Add(appendFrame(serverBytes(nil, nil, nil), frameGoAway, 0, 0, make([]byte, 8)))
	f.Add(appendFrame(serverBytes(nil, nil, nil), frameRSTStream, 0, streamID, []byte{0, 0, 0, 8}))
	f.Fuzz(func(t *testing.T, in []byte) {
		c := newConn(fakeConn{bytes.NewReader(in), io.Discard})
		resp, err := c.roundTrip("/a.B/C", time.Now().Add(time.Second), []byte("\x0a\x01u"))
		if err == nil && len(resp) > maxMessageSize {
			t.Fatalf("a response of %d bytes", len(resp))
		}
	})
}

// TestRoundTrip_Seeds: the fuzz seeds read as they should.
func TestRoundTrip_Seeds(t *testing.T) {
	ok := []hpack.HeaderField{{Name: ":status", Value: "200"}, {Name: "content-type", Value: "application/grpc"}}
	for _, tc := range []struct {
		name    string
		in      []byte
		resp    string
		wantErr string
	}{
		{name: "ok", in: serverBytes(ok, []byte("\x0a\x01u"), []hpack.HeaderField{{Name: "grpc-status", Value: "0"}}), resp: "\x0a\x01u"},
		{name: "trailers-only", in: serverBytes(append(ok, hpack.HeaderField{Name: "grpc-status", Value: "9"}, hpack.HeaderField{Name: "grpc-message", Value: "no %C3%BC"}), nil, nil),
			wantErr: "rpc error: code = FailedPrecondition desc = no ü"},
		{name: "RST_STREAM", in: appendFrame(serverBytes(nil, nil, nil), frameRSTStream, 0, streamID, []byte{0, 0, 0, 8}),
			wantErr: "rpc error: code = Canceled desc = stream terminated by RST_STREAM with error code: CANCEL"},
		{name: "no grpc-status", in: serverBytes(ok, nil, nil), wantErr: "rpc error: code = Internal desc = server closed the stream without sending trailers"},
		{name: "not a gRPC server", in: serverBytes([]hpack.HeaderField{{Name: ":status", Value: "404"}}, nil, nil),
			wantErr: "rpc error: code = Unimplemented desc = unexpected HTTP status code received from server: 404"},
		{name: "no SETTINGS", in: nil, wantErr: "the server did not take the call: EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := newConn(fakeConn{bytes.NewReader(tc.in), io.Discard}).roundTrip("/a.B/C", time.Time{}, nil)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("roundTrip: %v, want %s", err, tc.wantErr)
				}
				return
			}
			if err != nil || string(resp) != tc.resp {
				t.Fatalf("roundTrip: %q, %v, want %q", resp, err, tc.resp)
			}
		})
	}
}
