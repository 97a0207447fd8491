package bwrap

import "github.com/corralhq/corral/hostview"

// The home rules' lists are package hostview's, shared with the docker
// backend's bind policy (hostview.DecideBind); see there for what each
// holds.
var (
	homeAllow        = hostview.DefaultHomeAllow
	nestedAllow      = hostview.DefaultNestedAllow
	credentialStores = hostview.CredentialStores
	credentialFiles  = hostview.CredentialFiles
)

// caBundleVars name a CA bundle (a file, or a directory for SSL_CERT_DIR).
// A bundle that lies in a hidden path is bound back read-only so TLS keeps
// working.
var caBundleVars = []string{
	"SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
	"NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO", "PIP_CERT",
}

// dockerSockets are replaced by an empty file inside the sandbox
// (hostview.EngineSockets).
var dockerSockets = hostview.EngineSockets

// within reports whether p is base or lies below it (hostview.Within).
func within(p, base string) bool { return hostview.Within(p, base) }

// isCredentialRel reports whether rel (relative to home) is a credential
// store or lies inside one (hostview.IsCredentialRel).
func isCredentialRel(rel string) bool { return hostview.IsCredentialRel(rel) }

// relToHome returns p relative to home, or ok=false when p is not inside
// home (or is home itself) (hostview.RelToHome).
func relToHome(p, home string) (string, bool) { return hostview.RelToHome(p, home) }

// isNestedDir reports whether rel is one of .config, .local, .local/share.
func isNestedDir(rel string) bool { return hostview.IsNestedHomeDir(rel) }
