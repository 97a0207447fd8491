// Package secrets lets a sandboxed command use a credential it never sees
// (the secrets setting, issue 14).
//
// The pieces:
//
//   - [StandIn] makes the value the sandbox sees instead of the real one:
//     the same length and shape (a known prefix such as "ghp_" kept, every
//     other letter and digit replaced by a random one of its class), so
//     clients that check a prefix or a length still work. It is derived
//     from a key made once per corral process ([ProcessKey]), so every
//     command of a session sees the same stand-in while that process
//     lives, and a new process gives new ones.
//   - [Substitute] rewrites the headers of one request on its way to a
//     host: the stand-in of a secret that belongs to the host is replaced
//     by the real value in Authorization (Bearer, token, Basic with the
//     user or password decoded and encoded again), x-api-key and the
//     secret's declared headers; a stand-in found anywhere in the headers
//     or the URL of a request to a host it does not belong to is reported
//     as misdirected, and the proxy refuses the request. Bodies are never
//     read or changed.
//   - [CA] is corral's own certificate authority, which the egress proxy
//     uses to terminate TLS for the hosts some secret names (and for no
//     other host), so that it can see and rewrite those requests.
//   - [Resolve] reads the real values on the host (env:VAR, file:/path).
//   - [Scrubber] and [ScrubPairs] take the real values back out of what a
//     secret's host answers (issue 26): every form of [EncodedForms] (raw,
//     URL, JSON, base64 and base64url alone and inside longer data, also
//     with characters escaped one at a time as %XX, \u00XX or an HTML
//     character reference, or broken over lines) of the values of the
//     secrets that belong to that host is replaced by the stand-in's same
//     form, in a stream that is never held whole.
//   - [CredentialFiles] writes a secret's credential files (a .netrc, an
//     .npmrc, .git-credentials, Docker's config.json, .pypirc) as copies
//     that hold only the entries with a declared real value, each with its
//     stand-in in the format's encoding ([FilterCredentials], pure), for a
//     backend to bind over the originals; a file it cannot parse is
//     refused ([ErrUnparsable]).
//   - [ProtectProcess] makes corral non-dumpable before Resolve reads a
//     value: no core of it holds one.
//
// Everything but CA's files, Resolve and ProtectProcess is pure and
// table-tested. No function of the package puts a real value in an error
// message.
package secrets
