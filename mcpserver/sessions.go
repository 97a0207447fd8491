package mcpserver

import (
	"fmt"
	"path/filepath"
	"unicode"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// SessionHeader is the HTTP request header by which a client names the
// corral session its calls run in, for example "Corral-Session: tg:12345"
// (one sandbox session per chat). It wins over the MCP session id. It
// exists because the 2026-07-28 revision of MCP is stateless: its
// requests carry no Mcp-Session-Id, so nothing else tells one client's
// calls from another's. Its value must pass [ValidSessionName]; a bad one
// is refused with 400 Bad Request.
const SessionHeader = "Corral-Session"

// mcpSessionPrefix starts the name of the corral session of an MCP session
// id (streamable HTTP before 2026-07-28: the Mcp-Session-Id header,
// MCP specification 2025-11-25, basic/transports, "Session Management").
const mcpSessionPrefix = "mcp:"

// maxSessionName bounds a session name, in bytes.
const maxSessionName = 256

// ValidSessionName returns an error when name cannot name a session: empty,
// longer than 256 bytes, not UTF-8, or holding control characters.
func ValidSessionName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("empty session name")
	case len(name) > maxSessionName:
		return fmt.Errorf("session name of %d bytes; at most %d", len(name), maxSessionName)
	case !utf8.ValidString(name):
		return fmt.Errorf("session name %q is not UTF-8", name)
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return fmt.Errorf("session name %q holds a control character", name)
		}
	}
	return nil
}

// DirSessionName returns the default session name of a working directory:
// "dir:" followed by the cleaned absolute path, so that an agent started
// in the same project finds its cwd and variables again. A path too long
// for a session name is cut at the front, keeping its end.
func DirSessionName(dir string) string {
	name := "dir:" + filepath.Clean(dir)
	if len(name) > maxSessionName {
		cut := name[len(name)-(maxSessionName-len("dir:…")):]
		for !utf8.ValidString(cut) {
			cut = cut[1:]
		}
		name = "dir:…" + cut
	}
	return name
}

// DefaultSessionName returns the session name rule [New] uses when
// Options.SessionName is not set. A call runs in
//
//  1. the session named by the Corral-Session header ([SessionHeader]) of
//     the HTTP request that carried it;
//  2. else, for an MCP session with an id (streamable HTTP before the
//     2026-07-28 revision), a session of its own called "mcp:" + id;
//  3. else fallback (stdio, and stateless HTTP requests without the
//     header).
func DefaultSessionName(fallback string) func(*mcp.CallToolRequest) (string, error) {
	return func(req *mcp.CallToolRequest) (string, error) {
		if req.Extra != nil && req.Extra.Header != nil {
			if h := req.Extra.Header.Get(SessionHeader); h != "" {
				if err := ValidSessionName(h); err != nil {
					return "", fmt.Errorf("the %s header does not name a session: %v", SessionHeader, err)
				}
				return h, nil
			}
		}
		if req.Session != nil {
			if id := req.Session.ID(); id != "" {
				return mcpSessionPrefix + id, nil
			}
		}
		if fallback == "" {
			return "", fmt.Errorf("no session: send the %s header to name one", SessionHeader)
		}
		return fallback, nil
	}
}
