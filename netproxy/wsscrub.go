package netproxy

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"

	"github.com/corralhq/corral/secrets"
)

// This file scrubs what a WebSocket server (RFC 6455) sends through an
// upgraded connection of a secret's host. Scrubbing the connection as a
// plain byte stream is not enough: a server may cut a message into
// fragments (section 5.4) and put control frames between them (section
// 5.5), and the frame headers between the pieces of a real value then
// break the match. So the frames are parsed, the payloads of each data
// message are scrubbed as one stream, whatever frames carry them, and
// the message is framed again by the proxy.

// wsChunk is the most of a frame's payload that is read (and scrubbed,
// and framed again) at once: a message of any length passes in bounded
// memory.
const wsChunk = 32 << 10

// wsMaxHeader is the longest header of a frame the proxy writes: 2
// bytes, and 8 of extended payload length (RFC 6455 section 5.2; no
// masking key, as a server's frames are not masked, section 5.1).
const wsMaxHeader = 10

// The opcodes of RFC 6455 section 5.2 (11.8 is their registry).
const (
	wsContinuation = 0x0
	wsText         = 0x1
	wsBinary       = 0x2
	wsClose        = 0x8
	wsPing         = 0x9
	wsPong         = 0xA
)

// wsFrameError is a frame of the server that breaks RFC 6455 in a way
// that could hide what it carries from the scrubber: the connection is
// ended rather than anything of the frame passed on.
type wsFrameError struct{ why string }

func (e *wsFrameError) Error() string {
	return "corral proxy: the WebSocket server sent a frame that cannot be scrubbed: " + e.why
}

// wsScrubReader reads the frames a WebSocket server sends from src and
// yields them rewritten, the real values of sc's secrets replaced in
// every data message and control frame:
//
//   - a data message (text or binary, continued by continuation frames,
//     section 5.4) is scrubbed as one stream (a secrets.Stream) across
//     its frames and across the control frames between them, and framed
//     again as it goes: each read of a payload gives a frame of what the
//     stream made final (the first with the message's opcode, the later
//     ones with continuation), the last one, with FIN, ends with what
//     the stream held. At most the scrubber's MaxHold bytes of a
//     message are held, and a read of at most wsChunk bytes.
//   - a control frame (close, ping, pong; section 5.5) is passed on
//     whole at once, between two frames of the message, its payload
//     scrubbed as a whole (a close frame's status code, its first 2
//     bytes, section 5.5.1, is kept). It is not kept back until the
//     message ends (a server may wait for the pong of its ping), so the
//     bytes the message's stream holds go out after it: section 5.4 lets
//     control frames come between fragments, and the message's bytes keep
//     their order.
//
// The frames it writes are unmasked (section 5.1) with the minimal
// payload length (section 5.2). A frame that is masked, has an RSV bit
// set (no extension was negotiated: corral does not offer them), a
// reserved opcode, a control frame that is fragmented or longer than
// 125 bytes, a 64-bit length with its top bit set, a continuation with
// no message begun or a new message before the last one ended (section
// 5.4), or a close frame with a 1-byte payload, is an error
// (*wsFrameError), and nothing of it is passed on. An end of src inside
// a frame or a message is io.ErrUnexpectedEOF, and what the stream held
// is dropped.
type wsScrubReader struct {
	src *bufio.Reader
	sc  *secrets.Scrubber
	// done, when not nil, is called once when src ends or fails, with
	// the replacements made and the error.
	done func(secrets.Hits, error)

	out []byte // out[off:] is what the next reads give
	off int
	err error // returned once out is drained

	in        []byte          // a chunk of payload, as read
	st        *secrets.Stream // of the message being read; nil between messages
	msgOp     byte            // the message's opcode
	started   bool            // a frame of the message was written
	fin       bool            // the frame being read ends the message
	remaining uint64          // of the payload of the data frame being read
	hits      secrets.Hits
}

// newWSScrubReader returns a reader of src's frames scrubbed by sc (see
// wsScrubReader).
func newWSScrubReader(src io.Reader, sc *secrets.Scrubber, done func(secrets.Hits, error)) *wsScrubReader {
	return &wsScrubReader{src: bufio.NewReaderSize(src, 4<<10), sc: sc, done: done}
}

// Read implements io.Reader.
func (r *wsScrubReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for r.off == len(r.out) {
		if r.err != nil {
			return 0, r.err
		}
		r.out, r.off = r.out[:0], 0
		if err := r.step(); err != nil {
			r.err = err
			if r.st != nil {
				r.addHits(r.st.Hits())
				r.st = nil
			}
			if r.done != nil {
				r.done(r.hits, err)
			}
		}
	}
	n := copy(p, r.out[r.off:])
	r.off += n
	return n, nil
}

// addHits adds h to the reader's count.
func (r *wsScrubReader) addHits(h secrets.Hits) {
	for k, n := range h {
		if r.hits == nil {
			r.hits = secrets.Hits{}
		}
		r.hits[k] += n
	}
}

// step reads the next frame header, or a chunk of the payload of the
// data frame being read, and puts what it makes of it in r.out (maybe
// nothing). On an error nothing of the frame is put there.
func (r *wsScrubReader) step() error {
	if r.remaining > 0 {
		return r.payload()
	}
	b0, length, err := r.header()
	if err != nil {
		return err
	}
	fin, op := b0&0x80 != 0, b0&0x0F
	switch op {
	case wsClose, wsPing, wsPong:
		// Section 5.5: a control frame is never fragmented and has at
		// most 125 bytes of payload (its length fits the 7 bits).
		if !fin || length > 125 {
			return &wsFrameError{"a control frame that is fragmented or longer than 125 bytes (RFC 6455 section 5.5)"}
		}
		if op == wsClose && length == 1 {
			return &wsFrameError{"a close frame of 1 byte (RFC 6455 section 5.5.1)"}
		}
		return r.control(b0, length)
	case wsText, wsBinary:
		if r.st != nil {
			return &wsFrameError{"a new message before the last one ended (RFC 6455 section 5.4)"}
		}
		// A message is scrubbed by a stream of its own: a value is not
		// looked for across two messages, which the receiver never
		// joins either.
		r.st, r.msgOp, r.started = r.sc.Stream(), op, false
	case wsContinuation:
		if r.st == nil {
			return &wsFrameError{"a continuation frame with no message begun (RFC 6455 section 5.4)"}
		}
	default:
		return &wsFrameError{"a frame with a reserved opcode (RFC 6455 section 5.2)"}
	}
	r.fin, r.remaining = fin, length
	if length == 0 && fin {
		r.emitData(nil, true)
	}
	return nil
}

// header reads a frame's header (RFC 6455 section 5.2) and checks what
// does not depend on the opcode: no RSV bit set (section 5.2: no
// extension was negotiated), no mask (section 5.1: a client closes the
// connection on a masked frame of the server), and a 64-bit length with
// its top bit clear. A clean end of src before a header is io.EOF,
// outside a message.
func (r *wsScrubReader) header() (b0 byte, length uint64, err error) {
	var h [8]byte
	if _, err := io.ReadFull(r.src, h[:2]); err != nil {
		if err == io.EOF && r.st != nil {
			err = io.ErrUnexpectedEOF
		}
		return 0, 0, err
	}
	b0, b1 := h[0], h[1]
	switch {
	case b0&0x70 != 0:
		return 0, 0, &wsFrameError{"a frame with an RSV bit set, and no extension negotiated (RFC 6455 section 5.2)"}
	case b1&0x80 != 0:
		return 0, 0, &wsFrameError{"a masked frame from the server (RFC 6455 section 5.1)"}
	}
	switch length = uint64(b1 & 0x7F); length {
	case 126:
		if _, err := io.ReadFull(r.src, h[:2]); err != nil {
			return 0, 0, unexpected(err)
		}
		length = uint64(binary.BigEndian.Uint16(h[:2]))
	case 127:
		if _, err := io.ReadFull(r.src, h[:8]); err != nil {
			return 0, 0, unexpected(err)
		}
		if length = binary.BigEndian.Uint64(h[:8]); length>>63 != 0 {
			return 0, 0, &wsFrameError{"a 64-bit payload length with its most significant bit set (RFC 6455 section 5.2)"}
		}
	}
	return b0, length, nil
}

// unexpected is err, io.ErrUnexpectedEOF for io.EOF: src ended inside a
// frame.
func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// control reads the payload of a control frame (length at most 125,
// checked by step), scrubs it as a whole and puts the frame in r.out.
func (r *wsScrubReader) control(b0 byte, length uint64) error {
	var buf [wsMaxHeader + 125]byte
	payload := buf[2 : 2+length]
	if _, err := io.ReadFull(r.src, payload); err != nil {
		return unexpected(err)
	}
	scrub := payload
	if b0&0x0F == wsClose && len(scrub) >= 2 {
		// Section 5.5.1: the status code, then a reason.
		scrub = scrub[2:]
	}
	r.addHits(r.sc.Bytes(scrub))
	buf[0], buf[1] = b0, byte(length)
	r.out = append(r.out[:0], buf[:2+length]...)
	return nil
}

// payload reads a chunk of the data frame being read, scrubs it as the
// next bytes of its message, and frames what is final; at the end of
// the message's last frame, with what the stream held too.
func (r *wsScrubReader) payload() error {
	if r.in == nil {
		r.in = make([]byte, wsChunk)
	}
	n, err := r.src.Read(r.in[:min(r.remaining, uint64(len(r.in)))])
	r.remaining -= uint64(n)
	if n > 0 {
		r.emitData(r.st.Scrub(r.in[:n]), r.remaining == 0 && r.fin)
	}
	if err != nil && r.remaining > 0 {
		return unexpected(err)
	}
	return nil
}

// emitData puts a frame of the message holding payload in r.out; with
// last, the message's last frame, with what the stream held.
func (r *wsScrubReader) emitData(payload []byte, last bool) {
	if cap(r.out) < wsMaxHeader {
		r.out = make([]byte, 0, wsMaxHeader+wsChunk)
	}
	// Room for the header in front (see frame).
	r.out = append(r.out[:wsMaxHeader], payload...)
	if last {
		r.out = append(r.out, r.st.End()...)
	}
	r.frame(last)
}

// frame makes r.out[wsMaxHeader:] a frame of the message: it writes the
// header just before it and points r.off at it (RFC 6455 section 5.2:
// the message's opcode on its first frame and continuation on the later
// ones, section 5.4; FIN on the last; no mask, section 5.1; the minimal
// length). An empty frame that does not end the message is not
// written. At the last frame the message's stream is let go.
func (r *wsScrubReader) frame(last bool) {
	n := len(r.out) - wsMaxHeader
	if n == 0 && !last {
		r.out, r.off = r.out[:0], 0
		return
	}
	op := byte(wsContinuation)
	if !r.started {
		op, r.started = r.msgOp, true
	}
	if last {
		op |= 0x80
		r.addHits(r.st.Hits())
		r.st = nil
	}
	var h [wsMaxHeader]byte
	h[0] = op
	hl := 2
	switch {
	case n <= 125:
		h[1] = byte(n)
	case n <= 0xFFFF:
		h[1] = 126
		binary.BigEndian.PutUint16(h[2:], uint16(n))
		hl = 4
	default:
		h[1] = 127
		binary.BigEndian.PutUint64(h[2:], uint64(n))
		hl = 10
	}
	r.off = wsMaxHeader - hl
	copy(r.out[r.off:], h[:hl])
}
