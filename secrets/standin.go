package secrets

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"strings"
	"sync"
)

// knownPrefixes are the fixed prefixes of well-known token formats, kept
// as they are in a stand-in so that clients and servers that check them
// (git credential helpers, SDKs) accept it. Longest first, so that
// "sk-ant-" wins over "sk-" and "github_pat_" over "gh". Sources: GitHub
// "About authentication" (ghp_, gho_, ghu_, ghs_, ghr_, github_pat_),
// GitLab token prefixes (glpat-), Slack token types (xoxb-, xoxp-, xapp-),
// AWS access key ID prefixes (AKIA, ASIA), OpenAI (sk-proj-, sk-) and
// Anthropic (sk-ant-) API keys, npm (npm_), PyPI (pypi-), Hugging Face
// (hf_).
var knownPrefixes = []string{
	"github_pat_", "sk-ant-api03-", "sk-ant-", "sk-proj-",
	"ghp_", "gho_", "ghu_", "ghs_", "ghr_", "glpat-",
	"xoxb-", "xoxp-", "xoxa-", "xapp-", "AKIA", "ASIA",
	"npm_", "pypi-", "hf_", "sk-",
}

// MinValueLen is the shortest real value a secret may have, in bytes: a
// shorter one would give a stand-in short enough to occur by chance in
// other headers (and a real credential is never that short).
const MinValueLen = 8

// Prefix returns the known prefix value starts with, or "".
func Prefix(value string) string {
	for _, p := range knownPrefixes {
		if strings.HasPrefix(value, p) && len(value) > len(p) {
			return p
		}
	}
	return ""
}

// StandIn returns the stand-in of the secret called name whose real value
// is value, under key (at least 16 bytes; see [ProcessKey]). It has the
// length and shape of value: the known prefix (see [Prefix]) is kept, each
// ASCII lower-case letter, upper-case letter and digit after it is replaced
// by a pseudo-random one of the same class, and every other byte ('_', '-',
// '.', '/', non-ASCII) is kept. The choice is HMAC-SHA256(key, name, value)
// in counter mode, so it is stable for one key and unpredictable without
// it. If the result equals value (only possible when value has almost no
// letters or digits) the ok result is false and the caller must refuse the
// secret.
func StandIn(key []byte, name, value string) (standIn string, ok bool) {
	prefix := Prefix(value)
	out := []byte(value)
	stream := keystream(key, name, value)
	for i := len(prefix); i < len(out); i++ {
		c := out[i]
		switch {
		case c >= 'a' && c <= 'z':
			out[i] = 'a' + stream.next(26)
		case c >= 'A' && c <= 'Z':
			out[i] = 'A' + stream.next(26)
		case c >= '0' && c <= '9':
			out[i] = '0' + stream.next(10)
		}
	}
	s := string(out)
	return s, s != value
}

// keystream yields uniform small numbers from HMAC-SHA256 blocks.
type keyStream struct {
	key   []byte
	msg   []byte
	block []byte
	ctr   uint64
}

func keystream(key []byte, name, value string) *keyStream {
	msg := make([]byte, 0, len(name)+1+len(value)+8)
	msg = append(msg, name...)
	msg = append(msg, 0)
	msg = append(msg, value...)
	return &keyStream{key: key, msg: msg}
}

// next returns a number in [0, n) without modulo bias (rejection sampling
// on bytes).
func (k *keyStream) next(n byte) byte {
	limit := 256 - 256%int(n)
	for {
		if len(k.block) == 0 {
			m := hmac.New(sha256.New, k.key)
			m.Write(k.msg)
			var ctr [8]byte
			binary.BigEndian.PutUint64(ctr[:], k.ctr)
			k.ctr++
			m.Write(ctr[:])
			k.block = m.Sum(nil)
		}
		b := k.block[0]
		k.block = k.block[1:]
		if int(b) < limit {
			return b % n
		}
	}
}

// ProcessKey returns the stand-in key of this process: 32 random bytes
// made at first use and kept in memory only, so stand-ins are stable for
// the process's life (a session's commands agree) and differ between
// processes. It panics if the system's random source fails, as
// crypto/rand does.
var ProcessKey = sync.OnceValue(func() []byte {
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	return k
})
