// Command mcpload puts `corral serve` under the load of many MCP clients
// over HTTP, each with its own corral session (the Corral-Session header),
// each interleaving `bash` and `read_file` calls that check the client's
// own state (a variable it exported, a file only it wrote, its cwd), and
// prints the errors, p50/p99 latency per tool, the server's peak resident
// memory (VmHWM), and, in the same run, the p50 of raw `bwrap ... true`
// with the same mounts for reference.
//
//	go build -o /tmp/corral ./cmd/corral && go run ./bench/mcpload -corral /tmp/corral [-clients 20] [-calls 30]
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	corral := flag.String("corral", "corral", "corral executable")
	clients := flag.Int("clients", 20, "concurrent MCP clients, each with its own session")
	calls := flag.Int("calls", 30, "bash calls and read_file calls per client (interleaved)")
	rawN := flag.Int("raw", 50, "runs of raw bwrap ... true for reference")
	flag.Parse()
	base, err := os.MkdirTemp("/var/tmp", "corral-mcpload-*")
	check(err)
	defer os.RemoveAll(base)
	work := filepath.Join(base, "work")
	check(os.MkdirAll(work, 0o755))

	srv := exec.Command(*corral, "serve", "--listen", "127.0.0.1:0")
	srv.Dir = work
	srv.Env = append(os.Environ(), "CORRAL_PROFILE=workspace", "CORRAL_APPROVAL=off", "CORRAL_TIMEOUT=900", "XDG_STATE_HOME="+filepath.Join(base, "state"), "CORRAL_TOKEN="+loadToken)
	stderr, err := srv.StderrPipe()
	check(err)
	check(srv.Start())
	defer func() {
		srv.Process.Signal(os.Interrupt)
		srv.Wait()
	}()
	urls := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`serving MCP at (http://\S+/mcp)`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				urls <- m[1]
			}
		}
	}()
	var url string
	select {
	case url = <-urls:
	case <-time.After(30 * time.Second):
		check(fmt.Errorf("corral serve did not start listening"))
	}

	var (
		mu               sync.Mutex
		bashLat, readLat []time.Duration
		errs             int
		firstErr         string
	)
	fail := func(format string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		errs++
		if firstErr == "" {
			firstErr = fmt.Sprintf(format, a...)
		}
	}
	sessions := make([]*mcp.ClientSession, *clients)
	for i := range sessions {
		hc := &http.Client{Transport: headerTransport{"Corral-Session", fmt.Sprintf("load-%d", i)}}
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "mcpload", Version: "1"}, nil).Connect(context.Background(),
			&mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc, MaxRetries: -1}, nil)
		check(err)
		defer cs.Close()
		sessions[i] = cs
	}
	call := func(cs *mcp.ClientSession, tool string, args map[string]any) (map[string]any, time.Duration, error) {
		t := time.Now()
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
		d := time.Since(t)
		if err != nil {
			return nil, d, err
		}
		if res.IsError {
			return nil, d, fmt.Errorf("%s: tool error %v", tool, res.Content)
		}
		m, _ := res.StructuredContent.(map[string]any)
		return m, d, nil
	}

	start := time.Now()
	var wg sync.WaitGroup
	for i := range *clients {
		wg.Go(func() {
			cs := sessions[i]
			dir := filepath.Join(work, fmt.Sprintf("c%d", i))
			val := func(j int) string { return fmt.Sprintf("client-%d-%d", i, j) }
			out, _, err := call(cs, "bash", map[string]any{"command": fmt.Sprintf("mkdir c%d && cd c%d && export MINE=%s && echo %s > own.txt && echo \"$MINE $PWD\"", i, i, val(0), val(0))})
			if err != nil || out["output"] != val(0)+" "+dir+"\n" {
				fail("client %d setup: %v %v", i, err, out["output"])
				return
			}
			for j := range *calls {
				cmd := fmt.Sprintf(`[ "$MINE" = %s ] && [ "$(cat own.txt)" = %s ] || exit 3; export MINE=%s; echo %s > own.txt; echo "$MINE $PWD"`, val(j), val(j), val(j+1), val(j+1))
				out, d, err := call(cs, "bash", map[string]any{"command": cmd})
				if err != nil || out["output"] != val(j+1)+" "+dir+"\n" {
					fail("client %d bash %d: %v %v", i, j, err, out["output"])
					return
				}
				out2, d2, err := call(cs, "read_file", map[string]any{"path": "own.txt"})
				if want := fmt.Sprintf("%6d\t%s\n", 1, val(j+1)); err != nil || out2["content"] != want {
					fail("client %d read_file %d: %v %q", i, j, err, out2["content"])
					return
				}
				mu.Lock()
				bashLat = append(bashLat, d)
				readLat = append(readLat, d2)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	hwm := vmHWM(srv.Process.Pid)

	argvOut, err := exec.Command(*corral, "run", "--dry-run", "--profile", "workspace", "--cwd", work, "--", "/bin/true").Output()
	check(err)
	argv := strings.Split(strings.TrimSpace(string(argvOut)), "\n")
	var raw []time.Duration
	for range *rawN {
		t := time.Now()
		c := exec.Command(argv[0], argv[1:]...)
		c.Env = []string{"PATH=/usr/bin:/bin"}
		check(c.Run())
		raw = append(raw, time.Since(t))
	}

	total := *clients * (2**calls + 1)
	fmt.Printf("%d clients x (%d bash + %d read_file) = %d calls in %.1f s (%.0f calls/s)\n", *clients, *calls, *calls, total, elapsed.Seconds(), float64(total)/elapsed.Seconds())
	fmt.Printf("errors (failed calls or state mix-ups)  %d\n", errs)
	if firstErr != "" {
		fmt.Printf("  first: %s\n", firstErr)
	}
	fmt.Printf("bash       p50 %8.2f ms   p99 %8.2f ms   (%d calls)\n", ms(pct(bashLat, 50)), ms(pct(bashLat, 99)), len(bashLat))
	fmt.Printf("read_file  p50 %8.2f ms   p99 %8.2f ms   (%d calls)\n", ms(pct(readLat, 50)), ms(pct(readLat, 99)), len(readLat))
	fmt.Printf("raw bwrap true, alone, after the load   p50 %8.2f ms   (%d runs)\n", ms(pct(raw, 50)), len(raw))
	fmt.Printf("corral serve peak RSS (VmHWM)  %d MiB\n", hwm>>10)
	if errs > 0 {
		os.Exit(1)
	}
}

// loadToken is the bearer token the server under load requires.
const loadToken = "mcpload-bearer-token-0123456789"

// headerTransport sends one header, and the bearer token, with every
// request.
type headerTransport struct{ k, v string }

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(h.k, h.v)
	r.Header.Set("Authorization", "Bearer "+loadToken)
	return http.DefaultTransport.RoundTrip(r)
}

// vmHWM is the peak resident set size of pid in KiB (proc(5)).
func vmHWM(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	check(err)
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			return n
		}
	}
	return 0
}

func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[(len(s)-1)*p/100]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "mcpload:", err)
		os.Exit(1)
	}
}
