package netproxy_test

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/corralhq/corral/netproxy"
)

// The host side starts one Server per sandbox, binds its two sockets into
// the sandbox, and runs the command under the forwarder with the proxy
// variables set.
func Example() {
	policy := netproxy.Policy{
		Allow: []string{"github.com", "*.github.com", "proxy.golang.org"},
		Deny:  []string{"gist.github.com"},
	}
	dir, err := os.MkdirTemp("", "corral-net")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	srv, err := netproxy.Start(netproxy.Options{
		Policy:  policy,
		Dir:     dir,
		Logger:  slog.Default(),
		Session: "example",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()

	// What the sandbox runs (bind srv.HTTPSocket() at
	// /run/corral-net/http.sock and srv.SOCKSSocket() at
	// /run/corral-net/socks.sock):
	argv := []string{"/usr/local/bin/corral", netproxy.ForwarderArg,
		"--http", "127.0.0.1:3128=/run/corral-net/http.sock",
		"--socks", "127.0.0.1:1080=/run/corral-net/socks.sock",
		"--", "bash", "-c", "curl -s https://github.com/"}
	env := netproxy.ProxyEnv(3128, 1080, "/dev/.corral/nodeshim.cjs")
	fmt.Println(filepath.Base(srv.HTTPSocket()), filepath.Base(srv.SOCKSSocket()))
	fmt.Println(argv[1], env[0])

	ok, reason := policy.Decide("gist.github.com")
	fmt.Println(ok, reason)
	// Output:
	// http.sock socks.sock
	// __corral-net-forward http_proxy=http://127.0.0.1:3128
	// false denied by "gist.github.com"
}
