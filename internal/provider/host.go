package provider

import "strings"

// HostName is an authority without its port (host:port) and final dot, as the rooms compare it
// with their API hosts, so that every spelling Envoy's virtual hosts route to a provider is that
// provider's. An IPv6 literal ([::1]:443) keeps its brackets: it is no provider's host. It
// allocates nothing.
func HostName(h string) string {
	if i := strings.LastIndexByte(h, ':'); i >= 0 && strings.IndexByte(h, ']') < i && allDigits(h[i+1:]) {
		h = h[:i]
	}
	return strings.TrimSuffix(h, ".")
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// IsHost reports whether h (a HostName) is host, ignoring ASCII case.
func IsHost(h, host string) bool { return len(h) == len(host) && strings.EqualFold(h, host) }
