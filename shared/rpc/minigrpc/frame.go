package minigrpc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// HTTP/2 frame types (RFC 9113, section 6).
const (
	frameData         = 0x0
	frameHeaders      = 0x1
	framePriority     = 0x2
	frameRSTStream    = 0x3
	frameSettings     = 0x4
	framePushPromise  = 0x5
	framePing         = 0x6
	frameGoAway       = 0x7
	frameWindowUpdate = 0x8
	frameContinuation = 0x9
)

// HTTP/2 frame flags.
const (
	flagEndStream  = 0x1
	flagAck        = 0x1 // SETTINGS, PING
	flagEndHeaders = 0x4
	flagPadded     = 0x8
	flagPriority   = 0x20
)

// HTTP/2 settings.
const (
	settingHeaderTableSize   = 0x1
	settingEnablePush        = 0x2
	settingInitialWindowSize = 0x4
	settingMaxFrameSize      = 0x5
	settingMaxHeaderListSize = 0x6
)

// maxFrameSize is the largest frame payload this client accepts: HTTP/2's
// default SETTINGS_MAX_FRAME_SIZE, which it never raises.
const maxFrameSize = 16384

// clientPreface opens every HTTP/2 connection.
const clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// frame is one HTTP/2 frame; its payload is valid until the next read.
type frame struct {
	typ     uint8
	flags   uint8
	stream  uint32
	payload []byte
}

var errFrameSize = errors.New("frame larger than SETTINGS_MAX_FRAME_SIZE")

// frameReader reads frames into a buffer of its own.
type frameReader struct {
	r   io.Reader
	hdr [9]byte
	buf []byte
}

// read reads the next frame. A frame over maxFrameSize is an error: the
// connection is then unusable.
func (fr *frameReader) read() (frame, error) {
	if _, err := io.ReadFull(fr.r, fr.hdr[:]); err != nil {
		return frame{}, err
	}
	n := uint32(fr.hdr[0])<<16 | uint32(fr.hdr[1])<<8 | uint32(fr.hdr[2])
	if n > maxFrameSize {
		return frame{}, fmt.Errorf("%w: %d bytes", errFrameSize, n)
	}
	if cap(fr.buf) < int(n) {
		fr.buf = make([]byte, maxFrameSize)
	}
	f := frame{typ: fr.hdr[3], flags: fr.hdr[4], stream: binary.BigEndian.Uint32(fr.hdr[5:]) & (1<<31 - 1), payload: fr.buf[:n]}
	if _, err := io.ReadFull(fr.r, f.payload); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return frame{}, err
	}
	return f, nil
}

// appendFrame appends a frame to b.
func appendFrame(b []byte, typ, flags uint8, stream uint32, payload []byte) []byte {
	n := len(payload)
	b = append(b, byte(n>>16), byte(n>>8), byte(n), typ, flags)
	b = binary.BigEndian.AppendUint32(b, stream)
	return append(b, payload...)
}

// headerBlockFragment strips a HEADERS frame's padding and priority.
func headerBlockFragment(f frame) ([]byte, error) {
	p := f.payload
	pad := 0
	if f.flags&flagPadded != 0 {
		if len(p) < 1 {
			return nil, errors.New("HEADERS frame too short for its padding")
		}
		pad, p = int(p[0]), p[1:]
	}
	if f.flags&flagPriority != 0 {
		if len(p) < 5 {
			return nil, errors.New("HEADERS frame too short for its priority")
		}
		p = p[5:]
	}
	if pad > len(p) {
		return nil, errors.New("HEADERS frame padding longer than its payload")
	}
	return p[:len(p)-pad], nil
}

// dataPayload strips a DATA frame's padding.
func dataPayload(f frame) ([]byte, error) {
	p := f.payload
	if f.flags&flagPadded == 0 {
		return p, nil
	}
	if len(p) < 1 || int(p[0]) > len(p)-1 {
		return nil, errors.New("DATA frame padding longer than its payload")
	}
	return p[1 : len(p)-int(p[0])], nil
}
