package config

import (
	"fmt"
	"strings"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/dialects"
)

// Declared providers (the providers section): each is compiled to a provider.Declared, and all
// their hosts into one provider.Hosts, which the pricer reads on every request (a map look-up) and
// a reload replaces with the rest of the configuration.

// maxRatio bounds providers[].estimate: a ratio over cl100k_base counts.
const maxRatio = 10

// builtinSamples are host names of the built-in providers that a wildcard must not cover: one
// per host rule of the rooms (internal/provider/dialects.Builtin decides the rest).
var builtinSamples = [...]string{
	"api.openai.com", "x.openai.azure.com", "x.cognitiveservices.azure.com", "api.anthropic.com",
	"bedrock-runtime.us-east-1.amazonaws.com", "bedrock-runtime-fips.us-gov-west-1.amazonaws.com",
	"bedrock-runtime.cn-north-1.amazonaws.com.cn", "generativelanguage.googleapis.com",
	"aiplatform.googleapis.com", "us-central1-aiplatform.googleapis.com",
}

// IsProvider reports whether name is a provider a rule or an accounting entry may name: a
// built-in one or one the file declares.
func (c *Config) IsProvider(name string) bool {
	return provider.Parse(name) != provider.Unknown || c.declared[name] != nil
}

// Declared is the provider the file declares under name, nil when none.
func (c *Config) Declared(name string) *provider.Declared { return c.declared[name] }

// providerNames names the providers a rule may match, for messages.
func (c *Config) providerNames() string {
	if len(c.declaredNames) == 0 {
		return builtinProviders
	}
	return builtinProviders + ", " + strings.Join(c.declaredNames, ", ")
}

// compileProviders compiles the providers section into c.Hosts and c.declared.
func (f *File) compileProviders(c *Config, bad func(key, format string, args ...any)) {
	c.Hosts = &provider.Hosts{}
	c.declared = map[string]*provider.Declared{}
	owner := map[string]string{} // host -> the key that declared it
	for i := range f.Providers {
		s := &f.Providers[i]
		key := fmt.Sprintf("providers[%d]", i)
		d := &provider.Declared{Name: s.Name}
		switch {
		case !validProviderName(s.Name):
			bad(key+".name", "%q must be 1 to 32 of [a-z0-9_-]", s.Name)
		case provider.Parse(s.Name) != provider.Unknown || s.Name == provider.Unknown.String():
			bad(key+".name", "%q is a built-in provider's name (%s)", s.Name, builtinProviders)
		case c.declared[s.Name] != nil:
			bad(key+".name", "%q is declared twice", s.Name)
		default:
			c.declared[s.Name] = d
			c.declaredNames = append(c.declaredNames, s.Name)
		}
		switch s.Dialect {
		case "openai":
			d.Family = provider.OpenAI
		case "anthropic":
			d.Family = provider.Anthropic
		case "":
			bad(key+".dialect", "required: openai or anthropic")
		default:
			bad(key+".dialect", "%q is not openai or anthropic", s.Dialect)
		}
		switch s.Encoding {
		case "", "o200k_base", "cl100k_base":
			d.Encoding = s.Encoding
		default:
			bad(key+".encoding", "%q is not o200k_base or cl100k_base", s.Encoding)
		}
		switch {
		case s.Estimate == 0:
		case s.Encoding != "":
			bad(key+".estimate", "give encoding or estimate, not both")
		case !(s.Estimate >= 0.1 && s.Estimate <= maxRatio):
			bad(key+".estimate", "%v is not in [0.1, %d] (a ratio over cl100k_base counts)", s.Estimate, maxRatio)
		default:
			d.Ratio = s.Estimate
		}
		if len(s.Hosts) == 0 {
			bad(key+".hosts", "needs at least one host")
		}
		for j, h := range s.Hosts {
			hk := fmt.Sprintf("%s.hosts[%d]", key, j)
			h = strings.ToLower(h)
			if msg := checkHost(h); msg != "" {
				bad(hk, "%q %s", s.Hosts[j], msg)
				continue
			}
			if id := builtinUnder(h); id != provider.Unknown {
				bad(hk, "%q is (or covers) a host of the built-in provider %s", s.Hosts[j], id)
				continue
			}
			if k, dup := owner[h]; dup {
				bad(hk, "%q is already declared by %s", s.Hosts[j], k)
				continue
			}
			owner[h] = hk
			c.Hosts.Add(h, d)
		}
	}
}

// validProviderName reports whether s is 1 to 32 of [a-z0-9_-].
func validProviderName(s string) bool {
	return s != "" && len(s) <= 32 && !strings.ContainsFunc(s, func(c rune) bool {
		return !(c == '-' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z')
	})
}

// checkHost says what is wrong with h, a lower-case host or *. wildcard ("" when nothing): DNS
// labels of [a-z0-9-] (and _), no port, no empty label, a wildcard only as the whole first label
// and above a name of two labels at least (*.com is too wide).
func checkHost(h string) string {
	name, wild := strings.CutPrefix(h, "*.")
	switch {
	case h == "":
		return "is empty"
	case strings.Contains(h, ":"):
		return "has a port: name the host alone (ports are ignored)"
	case strings.Contains(name, "*"):
		return "has a * that is not its whole first label (*.example.com)"
	case len(name) > provider.MaxHostLen-2:
		return "is too long"
	case wild && !strings.Contains(name, "."):
		return "is too wide: a wildcard needs a name of two labels under it (*.example.com)"
	}
	for _, l := range strings.Split(name, ".") {
		if l == "" || strings.ContainsFunc(l, func(c rune) bool {
			return !(c == '-' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z')
		}) {
			return "is not a host name (labels of a-z, 0-9, - and _, joined by dots)"
		}
	}
	return ""
}

// builtinUnder is the built-in provider whose host h is or, as a wildcard, covers.
func builtinUnder(h string) provider.ID {
	suffix, wild := strings.CutPrefix(h, "*")
	if !wild {
		return dialects.Builtin(h)
	}
	// The first labels of the built-in hosts, under the wildcard's suffix: *.eu-west-1.amazonaws.com
	// covers bedrock-runtime.eu-west-1.amazonaws.com.
	for _, label := range [...]string{"x", "api", "bedrock-runtime", "bedrock-runtime-fips", "generativelanguage", "aiplatform", "us-central1-aiplatform"} {
		if id := dialects.Builtin(label + suffix); id != provider.Unknown {
			return id
		}
	}
	for _, b := range builtinSamples {
		if strings.HasSuffix(b, suffix) {
			return dialects.Builtin(b)
		}
	}
	return provider.Unknown
}
