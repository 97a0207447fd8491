// Package kubeval checks the values of the kubernetes.* settings: the
// forms Kubernetes itself accepts for names, quantities, node selectors
// and tolerations. It is pure (no cluster is contacted) and small, so that
// package config can refuse a bad value naming its key without linking
// client-go; backend/kubernetes parses the same values with it.
package kubeval

import (
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/corralhq/corral/internal/lazyre"
)

// dns1123Label is RFC 1123 label syntax as Kubernetes validates it
// (apimachinery validation.IsDNS1123Label): lower-case alphanumerics and
// '-', starting and ending alphanumeric, at most 63 characters.
var dns1123Label = lazyre.New(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// dns1123Subdomain is RFC 1123 subdomain syntax (IsDNS1123Subdomain):
// labels joined by '.', at most 253 characters.
var dns1123Subdomain = lazyre.New(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

// qualifiedName is a label key's name part (IsQualifiedName): at most 63
// alphanumerics, '-', '_' or '.', starting and ending alphanumeric.
var qualifiedName = lazyre.New(`^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`)

// DNSLabel returns "" when s is a valid DNS-1123 label (namespace names),
// else the reason.
func DNSLabel(s string) string {
	if len(s) > 63 || !dns1123Label.MatchString(s) {
		return "is not a DNS-1123 label (lower-case letters, digits and '-', at most 63, starting and ending with a letter or digit)"
	}
	return ""
}

// DNSSubdomain returns "" when s is a valid DNS-1123 subdomain (the names
// of runtime classes, service accounts, PVC storage classes), else the
// reason.
func DNSSubdomain(s string) string {
	if len(s) > 253 || !dns1123Subdomain.MatchString(s) {
		return "is not a DNS-1123 subdomain (lower-case letters, digits, '-' and '.', at most 253)"
	}
	return ""
}

// LabelKey returns "" when s is a valid label key ([prefix/]name, prefix
// a DNS-1123 subdomain; Kubernetes "Labels and Selectors"), else the
// reason.
func LabelKey(s string) string {
	prefix, name, ok := strings.Cut(s, "/")
	if !ok {
		name, prefix = prefix, ""
	} else if prefix == "" || DNSSubdomain(prefix) != "" {
		return fmt.Sprintf("has a prefix %q that is not a DNS-1123 subdomain", prefix)
	}
	if len(name) > 63 || !qualifiedName.MatchString(name) {
		return fmt.Sprintf("has a name %q that is not a label name (letters, digits, '-', '_', '.', at most 63, starting and ending with a letter or digit)", name)
	}
	return ""
}

// LabelValue returns "" when s is a valid label value (empty, or a label
// name's form), else the reason.
func LabelValue(s string) string {
	if s != "" && (len(s) > 63 || !qualifiedName.MatchString(s)) {
		return "is not a label value (letters, digits, '-', '_', '.', at most 63, starting and ending with a letter or digit)"
	}
	return ""
}

// Quantity parses a resource quantity as Kubernetes writes it ("512Mi",
// "1Gi", "500m", "2") and requires it to be greater than min; it returns
// the quantity or the reason it is refused.
func Quantity(s string, min resource.Quantity) (resource.Quantity, string) {
	q, err := resource.ParseQuantity(strings.TrimSpace(s))
	if err != nil {
		return resource.Quantity{}, "is not a Kubernetes quantity such as 512Mi, 1Gi, 500m or 2"
	}
	if q.Cmp(min) < 0 {
		return resource.Quantity{}, "is below " + min.String()
	}
	return q, ""
}

// MinMemory is the smallest memory limit accepted, 8 MiB: below it the
// helpers and a shell cannot start (docker's floor, 6 MiB, rounded up).
// (Made with NewQuantity, not MustParse: nothing is parsed at package
// initialisation.)
var MinMemory = *resource.NewQuantity(8<<20, resource.BinarySI)

// MinCPU is the smallest CPU limit accepted (10 millicores).
var MinCPU = *resource.NewMilliQuantity(10, resource.DecimalSI)

// Selector parses a node_selector entry "key=value" (a node label the pod
// requires); it returns key, value and "" or the reason it is refused.
func Selector(s string) (key, value, reason string) {
	k, v, ok := strings.Cut(strings.TrimSpace(s), "=")
	if !ok {
		return "", "", "is not key=value"
	}
	if r := LabelKey(k); r != "" {
		return "", "", "key " + r
	}
	if r := LabelValue(v); r != "" {
		return "", "", "value " + r
	}
	return k, v, ""
}

// Toleration is one toleration of a pod (core/v1 Toleration's fields
// corral sets).
type Toleration struct {
	// Key is the taint's key; Operator "Equal" (Value must match) or
	// "Exists" (any value).
	Key, Operator, Value string
	// Effect is "NoSchedule", "PreferNoSchedule", "NoExecute" or "" (any).
	Effect string
}

// Effects are the taint effects a toleration may name (core/v1
// TaintEffect).
var Effects = []string{"NoSchedule", "PreferNoSchedule", "NoExecute"}

// ParseToleration parses a tolerations entry in the notation of
// `kubectl taint`: "key=value:Effect" (Equal), "key:Effect" or "key"
// (Exists), "key=value" (Equal, any effect). It returns the toleration or
// the reason it is refused.
func ParseToleration(s string) (Toleration, string) {
	s = strings.TrimSpace(s)
	kv, effect, hasEffect := strings.Cut(s, ":")
	t := Toleration{Operator: "Exists"}
	if hasEffect {
		ok := false
		for _, e := range Effects {
			ok = ok || e == effect
		}
		if !ok {
			return Toleration{}, fmt.Sprintf("has effect %q, not one of %s", effect, strings.Join(Effects, ", "))
		}
		t.Effect = effect
	}
	k, v, hasValue := strings.Cut(kv, "=")
	if r := LabelKey(k); r != "" {
		return Toleration{}, "is not key[=value][:Effect]: key " + r
	}
	t.Key = k
	if hasValue {
		if r := LabelValue(v); r != "" {
			return Toleration{}, "is not key[=value][:Effect]: value " + r
		}
		t.Operator, t.Value = "Equal", v
	}
	return t, ""
}

// ReasonRoot is RunAs's reason for uid 0: a policy refusal, not a typo.
const ReasonRoot = "would run commands as root (uid 0); pick a non-root uid such as 1000:1000"

// RunAs parses "uid:gid" for the pod's user; uid 0 is refused (the pod
// must not run as root: runAsNonRoot would stop it anyway, and root in a
// pod is root on the node's files). It returns uid, gid, or the reason.
func RunAs(s string) (uid, gid int64, reason string) {
	u, g, ok := strings.Cut(strings.TrimSpace(s), ":")
	uu, e1 := strconv.ParseInt(u, 10, 64)
	gg, e2 := strconv.ParseInt(g, 10, 64)
	if !ok || e1 != nil || e2 != nil || uu < 0 || gg < 0 || uu > 1<<31-1 || gg > 1<<31-1 {
		return 0, 0, "is not uid:gid in numbers"
	}
	if uu == 0 {
		return 0, 0, ReasonRoot
	}
	return uu, gg, ""
}

// LocalhostProfile returns "" when p is a usable seccomp profile path for
// a pod's Localhost profile (relative to the kubelet's seccomp directory,
// no "..", ending in .json), else the reason. "" itself is valid: it
// means RuntimeDefault.
func LocalhostProfile(p string) string {
	if p == "" {
		return ""
	}
	if strings.HasPrefix(p, "/") || strings.Contains("/"+p+"/", "/../") || !strings.HasSuffix(p, ".json") {
		return "is not a path relative to the kubelet's seccomp directory ending in .json (no .. or leading /)"
	}
	return ""
}
