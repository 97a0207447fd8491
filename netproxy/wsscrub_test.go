package netproxy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/secrets"
)

const (
	wsValue   = "ghp_REALsecretVALUE0123456789"
	wsStandIn = "ghp_STNDstandinSTND9876543210"
)

func wsScrubber(t testing.TB) *secrets.Scrubber {
	t.Helper()
	sc, err := secrets.NewScrubber(secrets.EncodedForms("GH_TOKEN", wsValue, wsStandIn))
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// wsFrame is a frame as a server writes it (RFC 6455 section 5.2),
// unmasked, with the minimal length, or with long, the 64-bit one.
func wsFrame(fin bool, op byte, payload string, long bool) []byte {
	b0 := op
	if fin {
		b0 |= 0x80
	}
	n := len(payload)
	var h []byte
	switch {
	case long:
		h = binary.BigEndian.AppendUint64([]byte{b0, 127}, uint64(n))
	case n <= 125:
		h = []byte{b0, byte(n)}
	case n <= 0xFFFF:
		h = binary.BigEndian.AppendUint16([]byte{b0, 126}, uint16(n))
	default:
		h = binary.BigEndian.AppendUint64([]byte{b0, 127}, uint64(n))
	}
	return append(h, payload...)
}

// wsMsg is a message (or a control frame) as a client puts it together.
type wsMsg struct {
	op      byte
	payload string
}

func (m wsMsg) String() string { return fmt.Sprintf("op=%d %q", m.op, m.payload) }

// parseWS reads the frames the proxy wrote strictly, as a client does
// (RFC 6455 sections 5.1 to 5.5, and the minimal length), and returns
// the messages and control frames in the order they ended.
func parseWS(b []byte) ([]wsMsg, error) {
	var out []wsMsg
	var cur *wsMsg
	for len(b) > 0 {
		if len(b) < 2 {
			return out, errors.New("short header")
		}
		b0, b1 := b[0], b[1]
		if b0&0x70 != 0 || b1&0x80 != 0 {
			return out, errors.New("RSV or mask set")
		}
		n, hl := uint64(b1&0x7F), 2
		switch n {
		case 126:
			if len(b) < 4 {
				return out, errors.New("short header")
			}
			n, hl = uint64(binary.BigEndian.Uint16(b[2:])), 4
			if n <= 125 {
				return out, errors.New("16-bit length not minimal")
			}
		case 127:
			if len(b) < 10 {
				return out, errors.New("short header")
			}
			n, hl = binary.BigEndian.Uint64(b[2:]), 10
			if n <= 0xFFFF {
				return out, errors.New("64-bit length not minimal")
			}
		}
		if uint64(len(b)-hl) < n {
			return out, errors.New("short payload")
		}
		p := string(b[hl : hl+int(n)])
		b = b[hl+int(n):]
		fin, op := b0&0x80 != 0, b0&0x0F
		switch {
		case op >= 8:
			if !fin || n > 125 {
				return out, errors.New("bad control frame")
			}
			out = append(out, wsMsg{op, p})
			continue
		case op == 0:
			if cur == nil {
				return out, errors.New("continuation with no message")
			}
			cur.payload += p
		default:
			if cur != nil {
				return out, errors.New("new message inside a message")
			}
			cur = &wsMsg{op, p}
		}
		if fin {
			out = append(out, *cur)
			cur = nil
		}
	}
	if cur != nil {
		return out, errors.New("unfinished message")
	}
	return out, nil
}

// readWS reads all of r, size bytes at a time.
func readWS(r io.Reader, size int) ([]byte, error) {
	var out []byte
	p := make([]byte, size)
	for {
		n, err := r.Read(p)
		out = append(out, p[:n]...)
		if err != nil {
			return out, err
		}
	}
}

// wsCase is a server's frames and the messages a client must get.
type wsCase struct {
	name string
	in   []byte
	want []wsMsg
}

func wsCat(frames ...[]byte) []byte { return bytes.Join(frames, nil) }

func wsCases() []wsCase {
	v, s := wsValue, wsStandIn
	long := strings.Repeat("x", 70000)
	cases := []wsCase{
		{"one frame", wsFrame(true, wsText, "token="+v+" end", false), []wsMsg{{1, "token=" + s + " end"}}},
		{"value alone", wsFrame(true, wsText, v, false), []wsMsg{{1, s}}},
		{"2 fragments", wsCat(wsFrame(false, wsText, "token="+v[:10], false), wsFrame(true, 0, v[10:]+" end", false)), []wsMsg{{1, "token=" + s + " end"}}},
		{"3 fragments and a ping between", wsCat(
			wsFrame(false, wsText, "a "+v[:5], false), wsFrame(true, wsPing, "hi", false),
			wsFrame(false, 0, v[5:17], false), wsFrame(true, wsPong, "", false),
			wsFrame(true, 0, v[17:]+" z", false)),
			[]wsMsg{{9, "hi"}, {0xA, ""}, {1, "a " + s + " z"}}},
		{"empty fragments", wsCat(wsFrame(false, wsText, "", false), wsFrame(false, 0, v[:3], false), wsFrame(false, 0, "", false), wsFrame(true, 0, v[3:], false)), []wsMsg{{1, s}}},
		{"empty message", wsFrame(true, wsBinary, "", false), []wsMsg{{2, ""}}},
		{"binary", wsCat(wsFrame(false, wsBinary, "\x00\xff"+v[:20], false), wsFrame(true, 0, v[20:]+"\x00", false)), []wsMsg{{2, "\x00\xff" + s + "\x00"}}},
		{"json escape across fragments", wsCat(wsFrame(false, wsText, `{"t":"\u00`, false), wsFrame(true, 0, fmt.Sprintf("%x%s\"}", v[0], v[1:]), false)), []wsMsg{{1, fmt.Sprintf(`{"t":"\u00%x%s"}`, s[0], s[1:])}}},
		{"close reason", wsFrame(true, wsClose, "\x03\xe8bye "+v, false), []wsMsg{{8, "\x03\xe8bye " + s}}},
		{"close status only", wsFrame(true, wsClose, "\x03\xe8", false), []wsMsg{{8, "\x03\xe8"}}},
		{"ping payload", wsFrame(true, wsPing, v, false), []wsMsg{{9, s}}},
		{"pong payload", wsFrame(true, wsPong, "p="+v, false), []wsMsg{{0xA, "p=" + s}}},
		{"16-bit length", wsFrame(true, wsText, strings.Repeat("y", 200)+v+strings.Repeat("y", 200), false), []wsMsg{{1, strings.Repeat("y", 200) + s + strings.Repeat("y", 200)}}},
		{"64-bit length", wsFrame(true, wsText, long+v+long, false), []wsMsg{{1, long + s + long}}},
		{"64-bit length, short payload", wsFrame(true, wsText, "t="+v, true), []wsMsg{{1, "t=" + s}}},
		{"two messages", wsCat(wsFrame(true, wsText, v[:9], false), wsFrame(true, wsText, v[9:], false)), []wsMsg{{1, s[:9]}, {1, v[9:]}}}, // a start of at least secrets.MinPartialTail bytes that ends a message is replaced (see secrets.Scrubber.Bytes); a message is scrubbed on its own
	}
	// The value cut at every byte of a message of 2 fragments.
	for i := 0; i <= len(v); i++ {
		cases = append(cases, wsCase{fmt.Sprintf("split at %d", i),
			wsCat(wsFrame(false, wsText, "k="+v[:i], false), wsFrame(true, 0, v[i:]+";", false)),
			[]wsMsg{{1, "k=" + s + ";"}}})
	}
	return cases
}

// TestWSScrubReader: a value in a message, whatever frames cut it and
// whatever control frames come between them, and in a control frame,
// reaches the client as the stand-in, in frames that parse, read in
// pieces of any size.
func TestWSScrubReader(t *testing.T) {
	sc := wsScrubber(t)
	for _, c := range wsCases() {
		for _, size := range []int{1, 2, 3, 7, 64, 4096, 1 << 20} {
			var hits secrets.Hits
			var doneErr error
			calls := 0
			r := newWSScrubReader(bytes.NewReader(c.in), sc, func(h secrets.Hits, err error) { hits, doneErr = h, err; calls++ })
			out, err := readWS(r, size)
			if err != io.EOF {
				t.Fatalf("%s, reads of %d: error %v, want io.EOF", c.name, size, err)
			}
			if calls != 1 || doneErr != io.EOF {
				t.Errorf("%s: done called %d times with %v", c.name, calls, doneErr)
			}
			if bytes.Contains(out, []byte(wsValue)) {
				t.Errorf("%s, reads of %d: the value reached the client: %q", c.name, size, out)
			}
			got, err := parseWS(out)
			if err != nil {
				t.Fatalf("%s, reads of %d: the frames do not parse: %v\n%q", c.name, size, err, out)
			}
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Errorf("%s, reads of %d:\n got %v\nwant %v", c.name, size, got, c.want)
			}
			if strings.Contains(fmt.Sprint(c.want), wsStandIn) && hits["GH_TOKEN"] == 0 {
				t.Errorf("%s: no hits reported", c.name)
			}
		}
	}
}

// TestWSScrubReaderSlowSource: a server that writes a byte at a time.
func TestWSScrubReaderSlowSource(t *testing.T) {
	sc := wsScrubber(t)
	for _, c := range wsCases() {
		r := newWSScrubReader(&oneByteReader{bytes.NewReader(c.in)}, sc, nil)
		out, err := readWS(r, 4096)
		if err != io.EOF {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got, err := parseWS(out); err != nil || fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: got %v (%v), want %v", c.name, got, err, c.want)
		}
	}
}

type oneByteReader struct{ r io.Reader }

func (o *oneByteReader) Read(p []byte) (int, error) {
	if len(p) > 1 {
		p = p[:1]
	}
	return o.r.Read(p)
}

// TestWSScrubReaderMalformed: a frame that breaks RFC 6455 where it
// could hide what it carries ends the stream with a *wsFrameError, and
// nothing of it is passed on; the messages before it are.
func TestWSScrubReaderMalformed(t *testing.T) {
	sc := wsScrubber(t)
	v := wsValue
	before := wsFrame(true, wsText, "ok", false)
	masked := wsFrame(true, wsText, v, false)
	masked[1] |= 0x80
	masked = append(masked[:2], append([]byte{0, 0, 0, 0}, masked[2:]...)...)
	rsv := func(bit byte) []byte { f := wsFrame(true, wsText, v, false); f[0] |= bit; return f }
	topBit := append([]byte{0x81, 127, 0x80, 0, 0, 0, 0, 0, 0, byte(len(v))}, v...)
	for _, c := range []struct {
		name string
		bad  []byte
		pass []byte // what of the frames before bad is passed on
	}{
		{"masked", masked, nil},
		{"RSV1", rsv(0x40), nil},
		{"RSV2", rsv(0x20), nil},
		{"RSV3", rsv(0x10), nil},
		{"opcode 3", wsFrame(true, 3, v, false), nil},
		{"opcode 7", wsFrame(true, 7, v, false), nil},
		{"opcode 0xB", wsFrame(true, 0xB, v, false), nil},
		{"opcode 0xF", wsFrame(true, 0xF, v, false), nil},
		{"ping of 126 bytes", wsFrame(true, wsPing, v+strings.Repeat("p", 126-len(v)), false), nil},
		{"close of 200 bytes", wsFrame(true, wsClose, "\x03\xe8"+v+strings.Repeat("p", 198-len(v)), false), nil},
		{"fragmented ping", wsFrame(false, wsPing, v, false), nil},
		{"close of 1 byte", wsFrame(true, wsClose, "x", false), nil},
		{"64-bit length with the top bit", topBit, nil},
		{"continuation with no message", wsFrame(true, 0, v, false), nil},
		{"new message inside one", wsCat(wsFrame(false, wsText, "a", false), wsFrame(true, wsText, v, false)), []byte("\x01\x01a")},
	} {
		r := newWSScrubReader(bytes.NewReader(wsCat(before, c.bad, wsFrame(true, wsText, "after", false))), sc, nil)
		out, err := readWS(r, 4096)
		var fe *wsFrameError
		if !errors.As(err, &fe) {
			t.Errorf("%s: error %v, want a *wsFrameError", c.name, err)
		}
		if want := wsCat(before, c.pass); !bytes.Equal(out, want) {
			t.Errorf("%s: the client got %q, want only the frames before %q", c.name, out, want)
		}
		if _, err2 := r.Read(make([]byte, 10)); err2 != err {
			t.Errorf("%s: a later read gave %v, want %v again", c.name, err2, err)
		}
	}
}

// TestWSScrubReaderTruncated: a server that ends inside a frame or a
// message gives io.ErrUnexpectedEOF, and the held bytes of the message
// are not passed on whole.
func TestWSScrubReaderTruncated(t *testing.T) {
	sc := wsScrubber(t)
	full := wsFrame(true, wsText, "t="+wsValue, false)
	for _, in := range [][]byte{full[:1], full[:5], full[:len(full)-1], wsFrame(false, wsText, "t="+wsValue, false), wsFrame(true, wsPing, wsValue, false)[:10]} {
		out, err := readWS(newWSScrubReader(bytes.NewReader(in), sc, nil), 4096)
		if err != io.ErrUnexpectedEOF {
			t.Errorf("%q: error %v, want io.ErrUnexpectedEOF", in, err)
		}
		if bytes.Contains(out, []byte(wsValue)) || bytes.Contains(out, []byte(wsValue[:len(wsValue)-1])) {
			t.Errorf("%q: the client got %q", in, out)
		}
	}
}

// wsBigSource is a server's one text message of n bytes of payload in
// frames of frame bytes, made as it is read, with the value at the cut
// of each two frames.
type wsBigSource struct {
	n, frame, sent int
	pending        []byte
}

func (s *wsBigSource) Read(p []byte) (int, error) {
	if len(s.pending) == 0 {
		if s.sent >= s.n {
			return 0, io.EOF
		}
		size := min(s.frame, s.n-s.sent)
		payload := bytes.Repeat([]byte{'z'}, size)
		copy(payload[size-10:], wsValue[:10])
		copy(payload, wsValue[10:])
		op := byte(wsText)
		if s.sent > 0 {
			op = 0
		}
		s.sent += size
		s.pending = wsFrame(s.sent >= s.n, op, string(payload), false)
	}
	n := copy(p, s.pending)
	s.pending = s.pending[n:]
	return n, nil
}

// TestWSScrubReaderStreams: a 64 MiB message passes while the reader
// holds no more than a chunk, a header and MaxHold bytes at any time,
// and the client gets frames as it goes.
func TestWSScrubReaderStreams(t *testing.T) {
	sc := wsScrubber(t)
	const total = 64 << 20
	r := newWSScrubReader(&wsBigSource{n: total, frame: 1 << 20}, sc, nil)
	p := make([]byte, 64<<10)
	var got, frames int
	var b0 byte
	for {
		n, err := r.Read(p)
		got += n
		if n > 0 && frames == 0 {
			b0 = p[0]
		}
		frames++
		if r.st != nil && r.st.Held() > sc.MaxHold() {
			t.Fatalf("the message's stream holds %d bytes, more than MaxHold %d", r.st.Held(), sc.MaxHold())
		}
		if c := cap(r.out); c > wsMaxHeader+wsChunk+2*sc.MaxHold() {
			t.Fatalf("the output buffer grew to %d bytes", c)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if b0 != wsText {
		t.Errorf("first frame starts %#x, want a text frame without FIN", b0)
	}
	if got < total || got > total+total/100 {
		t.Errorf("the client got %d bytes for %d of payload", got, total)
	}
	if r.hits["GH_TOKEN"] < total/(1<<20)-1 {
		t.Errorf("hits %v, want at least %d", r.hits, total/(1<<20)-1)
	}
}

// waitForAttr polls r for a record with message msg whose attribute key
// is val (see waitFor).
func (r *recorder) waitForAttr(t *testing.T, msg, key, val string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		r.mu.Lock()
		found := false
		for _, rec := range r.records {
			rec.Attrs(func(a slog.Attr) bool {
				found = found || rec.Message == msg && a.Key == key && a.Value.String() == val
				return !found
			})
		}
		r.mu.Unlock()
		if found {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s record with %s=%q", msg, key, val)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
