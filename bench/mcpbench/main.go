// Command mcpbench measures tool-call latency through corral's MCP server
// over stdio, against the raw tools, in one run: `bash` running `true`
// against raw `bwrap ... true`, and `read_file` of a 10 KB file (target:
// at most 5 ms median) against reading it directly.
//
//	go build -o /tmp/corral ./cmd/corral && go run ./bench/mcpbench -corral /tmp/corral [-n 100]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	corral := flag.String("corral", "corral", "corral executable")
	n := flag.Int("n", 100, "calls of each kind")
	flag.Parse()
	base, err := os.MkdirTemp("/var/tmp", "corral-mcpbench-*")
	check(err)
	defer os.RemoveAll(base)
	work := filepath.Join(base, "work")
	check(os.MkdirAll(work, 0o755))
	ten := filepath.Join(work, "ten.txt")
	check(os.WriteFile(ten, []byte(strings.Repeat("0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz\n", 140)), 0o644))

	cmd := exec.Command(*corral, "mcp", "--session", "bench")
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "CORRAL_PROFILE=workspace", "CORRAL_APPROVAL=off", "XDG_STATE_HOME="+filepath.Join(base, "state"))
	ctx := context.Background()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "mcpbench", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	check(err)
	defer cs.Close()
	callTool := func(name string, args map[string]any) {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		check(err)
		if res.IsError {
			check(fmt.Errorf("%s: %v", name, res.Content))
		}
	}
	// Warm up: the session's first command and the file server's start.
	callTool("bash", map[string]any{"command": "true"})
	callTool("read_file", map[string]any{"path": "ten.txt"})

	argvOut, err := exec.Command(*corral, "run", "--dry-run", "--profile", "workspace", "--cwd", work, "--", "/bin/true").Output()
	check(err)
	argv := strings.Split(strings.TrimSpace(string(argvOut)), "\n")

	bashArgv := append(append([]string{}, argv[:len(argv)-1]...), "/bin/bash", "--noprofile", "--norc", "-c", "true")
	var bash, raw, rawBash, read, direct []time.Duration
	for i := 0; i < *n; i++ {
		t := time.Now()
		callTool("bash", map[string]any{"command": "true"})
		bash = append(bash, time.Since(t))
		t = time.Now()
		c := exec.Command(argv[0], argv[1:]...)
		c.Env = []string{"PATH=/usr/bin:/bin"}
		check(c.Run())
		raw = append(raw, time.Since(t))
		t = time.Now()
		c = exec.Command(bashArgv[0], bashArgv[1:]...)
		c.Env = []string{"PATH=/usr/bin:/bin"}
		check(c.Run())
		rawBash = append(rawBash, time.Since(t))
		t = time.Now()
		callTool("read_file", map[string]any{"path": "ten.txt"})
		read = append(read, time.Since(t))
		t = time.Now()
		_, err := os.ReadFile(ten)
		check(err)
		direct = append(direct, time.Since(t))
	}
	fmt.Printf("raw bwrap true            %8.2f ms\n", ms(median(raw)))
	fmt.Printf("raw bwrap bash -c true    %8.2f ms   (a shell: the floor of a session command)\n", ms(median(rawBash)))
	fmt.Printf("bash true through MCP     %8.2f ms   ratio %.2f (target <= 1.40), %.2f to raw bash\n", ms(median(bash)), float64(median(bash))/float64(median(raw)), float64(median(bash))/float64(median(rawBash)))
	fmt.Printf("read 10 KB directly       %8.3f ms\n", ms(median(direct)))
	fmt.Printf("read_file 10 KB via MCP   %8.2f ms   (target <= 2 ms)\n", ms(median(read)))
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "mcpbench:", err)
		os.Exit(1)
	}
}
