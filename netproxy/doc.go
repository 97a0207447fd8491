// Package netproxy is corral's egress filter for sandboxes whose network
// namespace is empty.
//
// The pieces, from the host to the command:
//
//	host:    [Start] -> Server: HTTP proxy on Dir/http.sock,
//	                            SOCKS5 proxy on Dir/socks.sock
//	           (each request's host is put to the Policy;
//	            refusals are logged as network.denied)
//	            | the two sockets are bind-mounted into the sandbox
//	sandbox: corral ForwarderArg --http 127.0.0.1:3128=/run/corral-net/http.sock
//	                             --socks 127.0.0.1:1080=/run/corral-net/socks.sock -- CMD...
//	           = [ForwarderMain]: loopback TCP -> Unix socket relays ([Forwarder]),
//	             then /proc/self/exe TrampolineArg -- CMD...
//	           = [TrampolineMain]: applies the caller's restrictions
//	             (a seccomp filter against new AF_UNIX sockets), then execve(CMD)
//	CMD runs with [ProxyEnv] in its environment.
//
// [Policy] is pure and decides by host name only: deny entries first, then
// allow entries, refusing the rest; "*.example.com" matches strict
// subdomains; raw IP addresses only when listed exactly. An allowed name
// is then resolved on the host, and the default dialer refuses it (as a
// policy refusal, [ErrLocalTarget]) when the address it is about to
// connect to is loopback, link-local, unspecified, multicast or assigned
// to one of the host's own interfaces (such as its LAN or docker0
// address), checked at connect time so that DNS rebinding cannot get past
// it; other private addresses are reached. An allowed host that cannot be
// reached gets a 502 naming it and a short reason (no such host,
// connection refused, timed out, ...), never the error text, which can
// name the host's resolver; the error is logged as
// network.upstream_failed.
//
// Secrets (issue 14, [Options.Secrets]): a CONNECT to a host that a
// declared secret names is terminated with a certificate from corral's
// own CA (only when the TLS server name equals the CONNECT host), and each
// request inside is forwarded over a new TLS connection, verified against
// the system roots, with the secret's stand-in replaced by the real value
// in Authorization, x-api-key and declared headers (package secrets). A
// stand-in on its way to another host (another secret's terminated host,
// or any plain-HTTP request) is refused with a 403 and logged as
// secret.misdirected; each use is logged as secret.used. Other hosts keep
// their blind tunnel, where a stand-in cannot be seen (it is worthless
// there).
//
// What a secret's host answers (issue 26, scrub.go) is scrubbed of the
// real values of the secrets that belong to it (secrets.ScrubPairs)
// before the client sees it: header fields, 1xx answers, trailers and the
// body as a stream, and the server side of a WebSocket connection, a
// message at a time across its frames (wsscrub.go, RFC 6455). Those
// requests ask for the identity coding; a gzip, deflate or br body is
// decoded (decode.go), any other coding refused (502,
// secret.response_refused). TRACE, TRACK, a CONNECT inside a terminated
// connection and upgrades other than WebSocket are refused
// (secret.request_refused); a WebSocket frame of the server that breaks
// RFC 6455 where it could hide a value ends the connection
// (secret.websocket_refused); replacements are logged as secret.scrubbed.
// A SOCKS5 CONNECT to a secret's host is refused (secret.socks_refused):
// its blind tunnel could bring back a value the host keeps.
//
// What the filter does not do: it cannot see inside TLS, so a client that
// tunnels to an allowed host can reach whatever that host serves (domain
// fronting through a CDN included); it handles TCP only (no UDP, so no
// QUIC, and no DNS: clients must let the proxy resolve names, which
// socks5h:// and HTTP proxies do); and tools that ignore proxy settings get
// no network at all.
package netproxy
