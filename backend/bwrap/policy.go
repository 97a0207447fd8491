package bwrap

import "github.com/corralhq/corral/sandbox"

// The home rules' lists are the sandbox package's, shared with the docker
// backend's bind policy (sandbox.DecideBind); see there for what each
// holds.
var (
	homeAllow        = sandbox.DefaultHomeAllow
	nestedAllow      = sandbox.DefaultNestedAllow
	credentialStores = sandbox.CredentialStores
	credentialFiles  = sandbox.CredentialFiles
)

// caBundleVars name a CA bundle (a file, or a directory for SSL_CERT_DIR).
// A bundle that lies in a hidden path is bound back read-only so TLS keeps
// working.
var caBundleVars = []string{
	"SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
	"NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO", "PIP_CERT",
}

// dockerSockets are replaced by an empty file inside the sandbox
// (sandbox.EngineSockets).
var dockerSockets = sandbox.EngineSockets

// within reports whether p is base or lies below it (sandbox.Within).
func within(p, base string) bool { return sandbox.Within(p, base) }

// isCredentialRel reports whether rel (relative to home) is a credential
// store or lies inside one (sandbox.IsCredentialRel).
func isCredentialRel(rel string) bool { return sandbox.IsCredentialRel(rel) }

// relToHome returns p relative to home, or ok=false when p is not inside
// home (or is home itself) (sandbox.RelToHome).
func relToHome(p, home string) (string, bool) { return sandbox.RelToHome(p, home) }

// isNestedDir reports whether rel is one of .config, .local, .local/share.
func isNestedDir(rel string) bool { return sandbox.IsNestedHomeDir(rel) }
