package minigrpc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http2/hpack"
)

// streamID is the call's stream: the connection's first and only.
const streamID = 1

// The flow-control windows: HTTP/2's initial one for what the client
// sends until the server says otherwise, and the one the client gives the
// server (a whole message's worth, replenished as DATA arrives).
const (
	defaultWindow = 65535
	recvWindow    = maxMessageSize + 5
)

// maxHeaderListSize bounds a header block (the response's headers or
// trailers, CONTINUATION frames included).
const maxHeaderListSize = 1 << 20

// conn is one call's HTTP/2 connection, from the client's side.
type conn struct {
	rw       io.ReadWriter
	fr       frameReader
	dec      *hpack.Decoder
	out      []byte // frames to write at the next flush
	writeErr error  // the write that failed, after which nothing is written

	ready     bool  // the server's SETTINGS arrived
	connWin   int64 // what the client may still send, on the connection
	streamWin int64 // and on its stream
	initWin   int64 // the server's SETTINGS_INITIAL_WINDOW_SIZE
	unsent    []byte

	block          []byte // a header block awaiting its CONTINUATION
	blockEndStream bool
	headers        bool // the response's headers arrived
	httpStatus     string
	contentType    string
	body           []byte
	ended          bool
	status         *Status // set when the stream ended
}

func newConn(rw io.ReadWriter) *conn {
	c := &conn{rw: rw, fr: frameReader{r: rw}, connWin: defaultWindow, streamWin: defaultWindow, initWin: defaultWindow}
	c.dec = hpack.NewDecoder(4096, nil)
	c.dec.SetMaxStringLength(maxHeaderListSize)
	return c
}

// roundTrip sends the call and reads the server's frames until the stream
// ends. An i/o error wraps the net error (os.ErrDeadlineExceeded when the
// deadline passed); one before the server's SETTINGS also wraps
// errUnprocessed.
func (c *conn) roundTrip(method string, deadline time.Time, req []byte) ([]byte, error) {
	c.out = append(c.out, clientPreface...)
	c.out = appendSettings(c.out, [][2]uint32{{settingEnablePush, 0}, {settingInitialWindowSize, recvWindow}, {settingMaxHeaderListSize, maxHeaderListSize}})
	c.out = appendWindowUpdate(c.out, 0, recvWindow-defaultWindow)
	c.appendHeaders(method, deadline)
	c.unsent = binary.BigEndian.AppendUint32([]byte{0}, uint32(len(req)))
	c.unsent = append(c.unsent, req...)
	c.appendData()
	for {
		if err := c.flush(); err != nil {
			return nil, c.ioError("writing to", err)
		}
		if c.ended {
			return c.result()
		}
		f, err := c.fr.read()
		switch {
		case errors.Is(err, errFrameSize):
			return nil, statusf(Internal, "malformed response: %v", err)
		case err != nil:
			return nil, c.ioError("reading from", err)
		}
		if err := c.handle(f); err != nil {
			return nil, err
		}
		c.appendData()
	}
}

// ioError is the error of a call whose connection failed as the client
// was doing (reading from or writing to the server).
func (c *conn) ioError(doing string, err error) error {
	switch {
	case !c.ready:
		return fmt.Errorf("%w: %w", errUnprocessed, err)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return err // Call's: the deadline, or ctx cancelled
	case errors.Is(err, io.ErrUnexpectedEOF):
		err = io.EOF
	}
	return statusf(Unavailable, "error %s server: %v", doing, err)
}

// flush writes the frames made so far. Once the server took the call, a
// failed write stops the writes only: what the server sent before it went
// (the call's trailers, or its end) is still read.
func (c *conn) flush() error {
	if len(c.out) == 0 || c.writeErr != nil {
		c.out = c.out[:0]
		return nil
	}
	_, err := c.rw.Write(c.out)
	c.out = c.out[:0]
	if err != nil && c.ready && !errors.Is(err, os.ErrDeadlineExceeded) {
		c.writeErr = err
		return nil
	}
	return err
}

// appendHeaders appends the request's HEADERS (and CONTINUATION) frames.
// Every field is a literal never indexed: the encoder's dynamic table
// stays empty, whatever the server's SETTINGS_HEADER_TABLE_SIZE.
func (c *conn) appendHeaders(method string, deadline time.Time) {
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	fields := []hpack.HeaderField{
		{Name: ":method", Value: "POST"},
		{Name: ":scheme", Value: "http"},
		{Name: ":path", Value: method},
		{Name: ":authority", Value: "localhost"},
		{Name: "content-type", Value: "application/grpc"},
		{Name: "te", Value: "trailers"},
		{Name: "user-agent", Value: "netdra-minigrpc"},
	}
	if !deadline.IsZero() {
		fields = append(fields, hpack.HeaderField{Name: "grpc-timeout", Value: encodeTimeout(time.Until(deadline))})
	}
	for _, f := range fields {
		f.Sensitive = true
		_ = enc.WriteField(f) // a bytes.Buffer does not fail
	}
	b := block.Bytes()
	typ := uint8(frameHeaders)
	for {
		n := min(len(b), maxFrameSize)
		var flags uint8
		if n == len(b) {
			flags = flagEndHeaders
		}
		c.out = appendFrame(c.out, typ, flags, streamID, b[:n])
		b, typ = b[n:], frameContinuation
		if len(b) == 0 {
			return
		}
	}
}

// appendData appends as much of the request message as the windows let
// the client send, the last frame with END_STREAM.
func (c *conn) appendData() {
	for len(c.unsent) > 0 && !c.ended {
		n := min(int64(len(c.unsent)), maxFrameSize, c.connWin, c.streamWin)
		if n <= 0 {
			return
		}
		var flags uint8
		if int(n) == len(c.unsent) {
			flags = flagEndStream
		}
		c.out = appendFrame(c.out, frameData, flags, streamID, c.unsent[:n])
		c.unsent = c.unsent[n:]
		c.connWin -= n
		c.streamWin -= n
	}
}

// protocolError is a response that breaks HTTP/2 or gRPC.
func protocolError(format string, args ...any) error {
	return statusf(Internal, "malformed response: "+format, args...)
}

// handle takes one frame from the server.
func (c *conn) handle(f frame) error {
	if c.block != nil && (f.typ != frameContinuation || f.stream != streamID) {
		return protocolError("frame type %d in the middle of a header block", f.typ)
	}
	switch f.typ {
	case frameSettings:
		return c.settings(f)
	case framePing:
		if len(f.payload) != 8 || f.stream != 0 {
			return protocolError("PING of %d bytes on stream %d", len(f.payload), f.stream)
		}
		if f.flags&flagAck == 0 {
			c.out = appendFrame(c.out, framePing, flagAck, 0, f.payload)
		}
	case frameWindowUpdate:
		return c.windowUpdate(f)
	case frameGoAway:
		if len(f.payload) < 8 || f.stream != 0 {
			return protocolError("GOAWAY of %d bytes", len(f.payload))
		}
		if last := binary.BigEndian.Uint32(f.payload) & (1<<31 - 1); last < streamID {
			return fmt.Errorf("%w: GOAWAY (last stream %d)", errUnprocessed, last)
		}
		// The stream was taken: it ends, or the connection does.
	case frameRSTStream:
		if len(f.payload) != 4 || f.stream == 0 {
			return protocolError("RST_STREAM of %d bytes on stream %d", len(f.payload), f.stream)
		}
		if f.stream == streamID {
			code := binary.BigEndian.Uint32(f.payload)
			if code == 0x7 { // REFUSED_STREAM: not taken
				return fmt.Errorf("%w: REFUSED_STREAM", errUnprocessed)
			}
			c.end(statusf(rstStreamCode(code), "stream terminated by RST_STREAM with error code: %s", rstStreamName(code)))
		}
	case frameHeaders:
		if f.stream != streamID {
			return protocolError("HEADERS on stream %d", f.stream)
		}
		frag, err := headerBlockFragment(f)
		if err != nil {
			return protocolError("%v", err)
		}
		c.block = append(make([]byte, 0, len(frag)), frag...)
		c.blockEndStream = f.flags&flagEndStream != 0
		if f.flags&flagEndHeaders != 0 {
			return c.endBlock()
		}
	case frameContinuation:
		if c.block == nil {
			return protocolError("CONTINUATION without HEADERS")
		}
		if len(c.block)+len(f.payload) > maxHeaderListSize {
			return protocolError("header block over %d bytes", maxHeaderListSize)
		}
		c.block = append(c.block, f.payload...)
		if f.flags&flagEndHeaders != 0 {
			return c.endBlock()
		}
	case frameData:
		return c.data(f)
	case framePushPromise:
		return protocolError("PUSH_PROMISE, which the client disabled")
	}
	return nil // PRIORITY and unknown frame types are ignored
}

func (c *conn) settings(f frame) error {
	if f.stream != 0 || len(f.payload)%6 != 0 {
		return protocolError("SETTINGS of %d bytes on stream %d", len(f.payload), f.stream)
	}
	if f.flags&flagAck != 0 {
		return nil
	}
	for p := f.payload; len(p) > 0; p = p[6:] {
		id, v := binary.BigEndian.Uint16(p), binary.BigEndian.Uint32(p[2:])
		if id == settingInitialWindowSize {
			if v > 1<<31-1 {
				return protocolError("SETTINGS_INITIAL_WINDOW_SIZE %d", v)
			}
			c.streamWin += int64(v) - c.initWin
			c.initWin = int64(v)
		}
		// The others do not bind this client: it sends frames of the
		// default maximum size, indexes no header, takes no push.
	}
	c.out = appendFrame(c.out, frameSettings, flagAck, 0, nil)
	c.ready = true
	return nil
}

func (c *conn) windowUpdate(f frame) error {
	if len(f.payload) != 4 {
		return protocolError("WINDOW_UPDATE of %d bytes", len(f.payload))
	}
	incr := int64(binary.BigEndian.Uint32(f.payload) & (1<<31 - 1))
	switch f.stream {
	case 0:
		c.connWin += incr
	case streamID:
		c.streamWin += incr
	}
	if c.connWin > 1<<31-1 || c.streamWin > 1<<31-1 {
		return protocolError("flow-control window over 2^31-1")
	}
	return nil
}

func (c *conn) data(f frame) error {
	if f.stream != streamID {
		return protocolError("DATA on stream %d", f.stream)
	}
	if !c.headers {
		return protocolError("DATA before the response's headers")
	}
	p, err := dataPayload(f)
	if err != nil {
		return protocolError("%v", err)
	}
	if len(c.body)+len(p) > recvWindow {
		return statusf(ResourceExhausted, "grpc: received message larger than max (%d vs. %d)", len(c.body)+len(p)-5, maxMessageSize)
	}
	c.body = append(c.body, p...)
	if n := uint32(len(f.payload)); n > 0 { // give the window back
		c.out = appendWindowUpdate(c.out, 0, n)
		if f.flags&flagEndStream == 0 {
			c.out = appendWindowUpdate(c.out, streamID, n)
		}
	}
	if f.flags&flagEndStream != 0 {
		c.end(statusf(Internal, "server closed the stream without sending trailers"))
	}
	return nil
}

// endBlock decodes a whole header block: the response's headers, its
// trailers, or both at once (trailers-only).
func (c *conn) endBlock() error {
	fields, err := c.dec.DecodeFull(c.block)
	c.block = nil
	if err != nil {
		return protocolError("header block: %v", err)
	}
	first := !c.headers
	c.headers = true
	if !c.blockEndStream {
		if !first {
			return protocolError("trailers without END_STREAM")
		}
		for _, f := range fields {
			switch f.Name {
			case ":status":
				c.httpStatus = f.Value
			case "content-type":
				c.contentType = f.Value
			}
		}
		if c.httpStatus == "200" && !isGRPCContentType(c.contentType) {
			return statusf(Unknown, "malformed header: missing HTTP content-type %q", c.contentType)
		}
		return nil
	}
	c.end(c.trailerStatus(fields, first))
	return nil
}

// trailerStatus is the call's status from its trailers (first: a
// trailers-only response, which carries :status too).
func (c *conn) trailerStatus(fields []hpack.HeaderField, first bool) *Status {
	var st *Status
	var msg string
	for _, f := range fields {
		switch f.Name {
		case ":status":
			if first {
				c.httpStatus = f.Value
			}
		case "grpc-status":
			code, err := strconv.ParseUint(f.Value, 10, 32)
			if err != nil {
				return statusf(Internal, "transport: malformed grpc-status: %v", err)
			}
			st = &Status{Code: Code(code)}
		case "grpc-message":
			msg = decodeMessage(f.Value)
		}
	}
	if st != nil {
		st.Message = msg
		return st
	}
	if c.httpStatus != "200" {
		code, _ := strconv.Atoi(c.httpStatus)
		return statusf(httpStatusCode(code), "unexpected HTTP status code received from server: %d", code)
	}
	return statusf(Internal, "server closed the stream without sending trailers")
}

func (c *conn) end(st *Status) {
	c.ended, c.status = true, st
}

// result is the call's outcome once its stream ended.
func (c *conn) result() ([]byte, error) {
	if c.status.Code != OK {
		return nil, c.status
	}
	b := c.body
	if len(b) < 5 {
		return nil, statusf(Internal, "cardinality violation: received no response message from server")
	}
	if b[0] != 0 {
		return nil, statusf(Internal, "grpc: compressed flag set with identity or empty encoding")
	}
	if n := binary.BigEndian.Uint32(b[1:5]); int64(n) != int64(len(b)-5) {
		return nil, statusf(Internal, "cardinality violation: a response message of %d bytes in %d", n, len(b)-5)
	}
	return b[5:], nil
}

func isGRPCContentType(ct string) bool {
	rest, ok := strings.CutPrefix(ct, "application/grpc")
	return ok && (rest == "" || rest[0] == '+' || rest[0] == ';')
}

func appendSettings(b []byte, settings [][2]uint32) []byte {
	var p []byte
	for _, s := range settings {
		p = binary.BigEndian.AppendUint16(p, uint16(s[0]))
		p = binary.BigEndian.AppendUint32(p, s[1])
	}
	return appendFrame(b, frameSettings, 0, 0, p)
}

func appendWindowUpdate(b []byte, stream, incr uint32) []byte {
	return appendFrame(b, frameWindowUpdate, 0, stream, binary.BigEndian.AppendUint32(nil, incr))
}

// encodeTimeout is grpc-timeout's value for d: the smallest unit whose
// count fits in 8 digits, rounded up.
func encodeTimeout(d time.Duration) string {
	if d <= 0 {
		return "0n"
	}
	for _, u := range []struct {
		d    time.Duration
		unit string
	}{{time.Nanosecond, "n"}, {time.Microsecond, "u"}, {time.Millisecond, "m"}, {time.Second, "S"}, {time.Minute, "M"}} {
		if v := (d + u.d - 1) / u.d; v <= 99999999 {
			return strconv.FormatInt(int64(v), 10) + u.unit
		}
	}
	return strconv.FormatInt(int64((d+time.Hour-1)/time.Hour), 10) + "H"
}

var rstStreamNames = [...]string{"NO_ERROR", "PROTOCOL_ERROR", "INTERNAL_ERROR", "FLOW_CONTROL_ERROR", "SETTINGS_TIMEOUT",
	"STREAM_CLOSED", "FRAME_SIZE_ERROR", "REFUSED_STREAM", "CANCEL", "COMPRESSION_ERROR", "CONNECT_ERROR",
	"ENHANCE_YOUR_CALM", "INADEQUATE_SECURITY", "HTTP_1_1_REQUIRED"}

func rstStreamName(code uint32) string {
	if int(code) < len(rstStreamNames) {
		return rstStreamNames[code]
	}
	return fmt.Sprintf("unknown error code 0x%x", code)
}
