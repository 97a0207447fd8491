package portfwd

import (
	"encoding/binary"
	"net/netip"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/corralhq/corral/reexec"
)

// TestMain lets the test binary serve as the relay helper. The runtime's
// poller is made first (a pipe), as any package's init may make it in
// corral's executable: the relay must keep the poller's descriptors when
// it drops the ones nsenter left it (TestForwardNetworkNamespace).
func TestMain(m *testing.M) {
	if r, w, err := os.Pipe(); err == nil {
		r.Close()
		w.Close()
	}
	reexec.Init()
	os.Exit(m.Run())
}

// word prints a 4-byte address word the way the kernel does (%08X of the
// word read in the host's byte order), so the table holds the same text
// on any machine.
func word(b ...byte) string {
	const hexd = "0123456789ABCDEF"
	v := binary.NativeEndian.Uint32(b)
	var out [8]byte
	for i := 7; i >= 0; i-- {
		out[i] = hexd[v&0xF]
		v >>= 4
	}
	return string(out[:])
}

const heading = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"

func TestParseProcNetTCP(t *testing.T) {
	lo := word(127, 0, 0, 1)
	any4 := word(0, 0, 0, 0)
	v6lo := word(0, 0, 0, 0) + word(0, 0, 0, 0) + word(0, 0, 0, 0) + word(0, 0, 0, 1)
	v6any := strings.Repeat("0", 32)
	mapped := word(0, 0, 0, 0) + word(0, 0, 0, 0) + word(0, 0, 0xff, 0xff) + word(10, 1, 2, 3)
	for _, tc := range []struct {
		name    string
		in      string
		want    []Listener
		wantErr string
	}{
		{name: "empty", in: heading, want: nil},
		{name: "loopback listener", in: heading + "   0: " + lo + ":1F40 " + any4 + ":0000 0A 00000000:00000000 00:00000000 00000000  1000        0 12345 1 0000000000000000 100 0 0 10 0\n",
			want: []Listener{{netip.MustParseAddr("127.0.0.1"), 8000}}},
		{name: "established skipped", in: heading + "   0: " + lo + ":1F40 " + lo + ":D431 01 00000000:00000000 00:00000000 00000000  1000        0 1 1\n" +
			"   1: " + any4 + ":0BB8 " + any4 + ":0000 0A 00000000:00000000 00:00000000 00000000  1000        0 2 1\n",
			want: []Listener{{netip.MustParseAddr("0.0.0.0"), 3000}}},
		{name: "ipv6", in: heading + "   0: " + v6lo + ":1F90 " + v6any + ":0000 0A 0\n   1: " + v6any + ":0050 " + v6any + ":0000 0A 0\n",
			want: []Listener{{netip.IPv6Loopback(), 8080}, {netip.IPv6Unspecified(), 80}}},
		{name: "v4-mapped unmapped", in: heading + "   0: " + mapped + ":0016 " + v6any + ":0000 0A 0\n",
			want: []Listener{{netip.MustParseAddr("10.1.2.3"), 22}}},
		{name: "tcp then tcp6", in: heading + "   0: " + lo + ":1F40 " + any4 + ":0000 0A 0\n" + heading + "   0: " + v6any + ":0050 " + v6any + ":0000 0A 0\n",
			want: []Listener{{netip.MustParseAddr("127.0.0.1"), 8000}, {netip.IPv6Unspecified(), 80}}},
		{name: "no port", in: heading + "   0: " + lo + " x 0A\n", wantErr: "has no port"},
		{name: "bad address", in: heading + "   0: 12345:0050 x 0A\n", wantErr: "not 8 or 32 hex digits"},
		{name: "bad port", in: heading + "   0: " + lo + ":XYZ x 0A\n", wantErr: "local port"},
		{name: "short line", in: heading + "   0: " + lo + ":0050\n", wantErr: "fewer than 4 fields"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseProcNetTCP([]byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestListenersOfSelf reads this process's own namespace after listening,
// so the parser meets the kernel's real text.
func TestListenersOfSelf(t *testing.T) {
	ln, port := listenLocal(t)
	defer ln.Close()
	ls, err := ListenersOf(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if a, ok := DialTarget(ls, port); !ok || a.String() != "127.0.0.1:"+itoa(port) {
		t.Errorf("DialTarget(%v, %d) = %v, %v", ls, port, a, ok)
	}
}

func TestDialTarget(t *testing.T) {
	l := func(a string, p uint16) Listener { return Listener{netip.MustParseAddr(a), p} }
	for _, tc := range []struct {
		name string
		ls   []Listener
		port uint16
		want string
	}{
		{"none", nil, 80, ""},
		{"other port", []Listener{l("127.0.0.1", 81)}, 80, ""},
		{"loopback", []Listener{l("127.0.0.1", 80)}, 80, "127.0.0.1:80"},
		{"any4", []Listener{l("0.0.0.0", 80)}, 80, "127.0.0.1:80"},
		{"any6", []Listener{l("::", 80)}, 80, "[::1]:80"},
		{"v6 loopback", []Listener{l("::1", 80)}, 80, "[::1]:80"},
		{"v4 wins over v6", []Listener{l("::1", 80), l("0.0.0.0", 80)}, 80, "127.0.0.1:80"},
		{"other address", []Listener{l("10.0.0.2", 80)}, 80, "10.0.0.2:80"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, ok := DialTarget(tc.ls, tc.port)
			got := ""
			if ok {
				got = a.String()
			}
			if got != tc.want {
				t.Errorf("DialTarget = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestNotListening(t *testing.T) {
	l := func(a string, p uint16) Listener { return Listener{netip.MustParseAddr(a), p} }
	for _, tc := range []struct {
		name  string
		cands []Candidate
		want  []string
	}{
		{"no process", nil, []string{`session "s"`, "port 3000", "no running background process", "background: true", "corral exec"}},
		{"lists listeners", []Candidate{{ID: "bg-1", Command: "npm run dev", Listeners: []Listener{l("127.0.0.1", 5173), l("::", 24678)}}},
			[]string{"port 3000", "bg-1 (npm run dev): listens on 127.0.0.1:5173, [::]:24678"}},
		{"nothing", []Candidate{{ID: "bg-2", Command: "sleep 9"}}, []string{"bg-2 (sleep 9): listens on no TCP port"}},
		{"host network", []Candidate{{ID: "bg-3", HostNetwork: true}}, []string{"bg-3: shares the host's network"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			i, _, err := Pick("s", 3000, tc.cands)
			if i != -1 || err == nil {
				t.Fatalf("Pick = %d, %v", i, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q does not say %q", err, w)
				}
			}
		})
	}
	// The first candidate listening wins; host-network ones are skipped.
	cands := []Candidate{{ID: "bg-1", HostNetwork: true, Listeners: []Listener{l("0.0.0.0", 3000)}}, {ID: "bg-2", Listeners: []Listener{l("::", 3000)}}}
	if i, a, err := Pick("s", 3000, cands); i != 1 || a.String() != "[::1]:3000" || err != nil {
		t.Errorf("Pick = %d %v %v", i, a, err)
	}
}
