package mcpserver

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// StatelessProtocolVersion is the first MCP revision without sessions
// (2026-07-28, SEP-2575): its requests carry the protocol version in the
// Mcp-Protocol-Version header and no Mcp-Session-Id.
const StatelessProtocolVersion = "2026-07-28"

// DefaultMaxRequestBytes bounds one request, 64 MiB: an HTTP body, and one
// line of stdio (the default [StdioTransport.MaxMessageBytes]), so that an
// oversized argument (write_file takes 10 MB) is answered by the tool with
// a message saying so over both transports. Past it, HTTP answers 413, and
// stdio answers a JSON-RPC error and ends the connection.
const DefaultMaxRequestBytes = 64 << 20

// HTTPOptions configure [Server.HTTPHandler].
type HTTPOptions struct {
	// Token, when set, is the bearer token every request must carry
	// (Authorization: Bearer TOKEN, RFC 6750); it is compared in constant
	// time. Requests without it get 401 Unauthorized.
	Token string
	// TokenHint, when set, ends the body of every 401 answer: where the
	// person finds the token (the file corral serve keeps it in), never
	// the token itself.
	TokenHint string
	// SessionTimeout closes an MCP session (protocol revisions before
	// 2026-07-28) that has sent no request for this long, and with it the
	// background processes of its corral session. Zero means never.
	SessionTimeout time.Duration
	// MaxRequestBytes bounds a request body; zero means
	// DefaultMaxRequestBytes.
	MaxRequestBytes int64
}

// HTTPHandler returns an http.Handler that serves MCP's streamable HTTP
// transport (MCP specification 2025-11-25, basic/transports, "Streamable
// HTTP"), in both the current and the previous protocol revision:
//
//   - requests whose Mcp-Protocol-Version header is 2026-07-28 or later go
//     to a stateless handler: each request stands alone, and closing the
//     HTTP request cancels the call (and ends the command's process tree);
//   - every other request goes to a stateful handler: initialize creates
//     an MCP session with an Mcp-Session-Id, and calls of that session run
//     in the corral session "mcp:" + id unless the Corral-Session header
//     names another.
//
// Requests are checked, in order, for cross-origin browser requests (403),
// the bearer token when o.Token is set (401), and a well-formed
// Corral-Session header (400). The SDK also refuses requests that reach a
// loopback listener with a non-loopback Host header (DNS rebinding, 403).
func (s *Server) HTTPHandler(o HTTPOptions) http.Handler {
	if o.MaxRequestBytes == 0 {
		o.MaxRequestBytes = DefaultMaxRequestBytes
	}
	sdkLog := s.log.With("component", "mcp-sdk")
	stateful := mcp.NewStreamableHTTPHandler(s.serverFor, &mcp.StreamableHTTPOptions{
		SessionTimeout:      o.SessionTimeout,
		MaxRequestBodyBytes: o.MaxRequestBytes,
		Logger:              sdkLog,
	})
	stateless := mcp.NewStreamableHTTPHandler(s.serverFor, &mcp.StreamableHTTPOptions{
		Stateless:                    true,
		PropagateRequestCancellation: true,
		MaxRequestBodyBytes:          o.MaxRequestBytes,
		Logger:                       sdkLog,
	})
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if name := r.Header.Get(SessionHeader); name != "" {
			if err := ValidSessionName(name); err != nil {
				s.log.Info("mcp.http.bad_session", "remote", r.RemoteAddr, "error", err)
				http.Error(w, fmt.Sprintf("Bad Request: the %s header must name a session: %v", SessionHeader, err), http.StatusBadRequest)
				return
			}
		}
		if statelessRequest(r) {
			stateless.ServeHTTP(w, r)
			return
		}
		stateful.ServeHTTP(w, r)
	})
	if o.Token != "" {
		h = s.requireToken(o.Token, o.TokenHint, h)
	}
	return http.NewCrossOriginProtection().Handler(h)
}

// requireToken serves only requests that carry the bearer token want
// (Authorization: Bearer TOKEN, RFC 6750 section 2.1), compared in constant
// time: the digests have equal lengths whatever the token's length. Others
// get 401 Unauthorized with a WWW-Authenticate challenge (RFC 6750 section
// 3).
func (s *Server) requireToken(want, hint string, next http.Handler) http.Handler {
	sum := sha256.Sum256([]byte(want))
	if hint != "" {
		hint = " (" + hint + ")"
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme, token, ok := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			s.log.Warn("mcp.http.unauthorized", "remote", r.RemoteAddr, "reason", "no bearer token")
			w.Header().Set("WWW-Authenticate", `Bearer realm="corral"`)
			http.Error(w, "Unauthorized: send the token as \"Authorization: Bearer TOKEN\""+hint, http.StatusUnauthorized)
			return
		}
		got := sha256.Sum256([]byte(strings.TrimSpace(token)))
		if subtle.ConstantTimeCompare(got[:], sum[:]) != 1 {
			s.log.Warn("mcp.http.unauthorized", "remote", r.RemoteAddr, "reason", "wrong token")
			w.Header().Set("WWW-Authenticate", `Bearer realm="corral", error="invalid_token"`)
			http.Error(w, "Unauthorized: wrong bearer token"+hint, http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// RequireToken returns next behind the bearer token check /mcp has (see
// HTTPOptions.Token): requests without token get 401 Unauthorized with a
// WWW-Authenticate challenge (RFC 6750 section 3), hint ending the body
// when set. An empty token serves every request. corral serve puts
// /metrics behind it.
func (s *Server) RequireToken(token, hint string, next http.Handler) http.Handler {
	if token == "" {
		return next
	}
	return s.requireToken(token, hint, next)
}

// HasToken reports whether r carries the bearer token want
// (Authorization: Bearer TOKEN), compared in constant time; true when want
// is empty (no token is required).
func HasToken(r *http.Request, want string) bool {
	if want == "" {
		return true
	}
	scheme, token, ok := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	got, sum := sha256.Sum256([]byte(strings.TrimSpace(token))), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(got[:], sum[:]) == 1
}

// statelessRequest reports whether r speaks the 2026-07-28 revision or a
// later one (protocol versions are dates, so they compare as strings).
func statelessRequest(r *http.Request) bool {
	return r.Header.Get("Mcp-Protocol-Version") >= StatelessProtocolVersion
}

// serverFor returns the mcp.Server for an HTTP request: one whose
// instructions describe the session the request's calls will run in.
func (s *Server) serverFor(r *http.Request) *mcp.Server {
	name := r.Header.Get(SessionHeader)
	switch {
	case name != "":
	case statelessRequest(r) || s.opts.DefaultSession == "":
		name = s.opts.DefaultSession
	default:
		name = mcpSessionPrefix + "<MCP session id>"
	}
	return s.MCPServer(name)
}

// IsLoopback reports whether the listen address addr (host:port) only
// accepts connections from this machine: its host is "localhost" or a
// loopback IP address (127.0.0.0/8, ::1). An empty host (":8765") listens
// on every interface and is not loopback; a host name other than
// localhost is resolved and counts as loopback only when every address it
// has is.
func IsLoopback(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, fmt.Errorf("listen address %q is not host:port: %w", addr, err)
	}
	if host == "" {
		return false, nil
	}
	if strings.EqualFold(host, "localhost") {
		return true, nil
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback(), nil
	}
	ips, err := net.LookupIP(host)
	if err != nil {
		return false, fmt.Errorf("listen address %q: %w", addr, err)
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return false, nil
		}
	}
	return len(ips) > 0, nil
}

// CheckListen refuses to serve beyond loopback without a bearer token:
// anyone who can reach the port could otherwise run commands. It returns
// nil when addr is loopback or token is set.
func CheckListen(addr, token string) error {
	lo, err := IsLoopback(addr)
	if err != nil {
		return err
	}
	if !lo && token == "" {
		return fmt.Errorf("refusing to listen on %s without a bearer token: anyone who can reach it could run commands here. "+
			"Set one (CORRAL_TOKEN=$(openssl rand -hex 32), or `corral config set token ...`) and give it to your clients as \"Authorization: Bearer TOKEN\", "+
			"or listen on loopback (127.0.0.1:8765)", addr)
	}
	return nil
}
