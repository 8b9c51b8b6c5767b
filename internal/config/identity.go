package config

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
)

// JWTNamespace is the dynamic metadata namespace of Envoy's jwt_authn filter: ext_authz forwards
// it with metadata_context_namespaces, and only a token the filter verified writes there.
const JWTNamespace = "envoy.filters.http.jwt_authn"

// JWT says where a verified token's payload is found in the CheckRequest.
type JWT struct {
	// PayloadInMetadata is the jwt_authn provider's payload_in_metadata: the field of the
	// envoy.filters.http.jwt_authn namespace that holds the payload. Default jwt_payload.
	PayloadInMetadata string `yaml:"payload_in_metadata"`
}

// ClaimPath is the path of a claim in a JWT payload: the keys from the payload down, each whole
// (a key may hold dots and slashes: "https://example.com/tenant" is one key). In the file, a
// string is a path of one key; a list is the keys in order ([org, id] is {"org": {"id": ...}}).
type ClaimPath []string

// UnmarshalYAML reads one key or a sequence of them.
func (p *ClaimPath) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.SequenceNode {
		var keys []string
		if err := n.Decode(&keys); err != nil {
			return err
		}
		*p = keys
		return nil
	}
	var one string
	if err := n.Decode(&one); err != nil {
		return err
	}
	*p = ClaimPath{one}
	return nil
}

// String writes the path as the file does, for messages.
func (p ClaimPath) String() string {
	q := make([]string, len(p))
	for i, k := range p {
		q[i] = fmt.Sprintf("%q", k)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// validClaim reports a problem of path p under key.
func validClaim(p ClaimPath, key string, bad func(key, format string, args ...any)) {
	if len(p) == 0 {
		bad(key, "required: the claim's path, a key or a list of keys (e.g. org_id, or [org, id])")
		return
	}
	if len(p) > 8 {
		bad(key, "%d keys: at most 8", len(p))
	}
	for i, k := range p {
		if k == "" {
			bad(fmt.Sprintf("%s[%d]", key, i), "must not be empty")
		}
	}
}

// PrioritySource is where a request's priority class comes from (priority.source).
type PrioritySource uint8

const (
	PriorityFromHeader           PrioritySource = iota // priority.header, else priority.tenants
	PriorityFromClaim                                  // a claim of the verified JWT
	PriorityFromPrincipal                              // priority.principals over the mTLS peer
	PriorityFromContextExtension                       // the route's "priority" key
	PriorityFromTenant                                 // priority.tenants only
)

var prioritySources = map[string]PrioritySource{
	"header": PriorityFromHeader, "claim": PriorityFromClaim, "principal": PriorityFromPrincipal,
	"context_extension": PriorityFromContextExtension, "tenant": PriorityFromTenant,
}

// PrincipalClassRule gives the peers matching Principal the class Class, whose floor is Floor.
type PrincipalClassRule struct {
	Principal Glob
	Class     string
	Floor     float64
}

// KeyTenantPrefix starts every tenant derived from an API key (tenant.source: api_key).
const KeyTenantPrefix = "key:"

// KeyTenant is the tenant of a provider API key: "key:" and the first 128 bits of
// HMAC-SHA256(salt, key) in hex. The key is not kept. Safe for concurrent use.
func (c *Config) KeyTenant(key string) string {
	m := hmac.New(sha256.New, c.keySalt)
	m.Write([]byte(key))
	var sum [sha256.Size]byte
	var out [len(KeyTenantPrefix) + 32]byte
	copy(out[:], KeyTenantPrefix)
	hex.Encode(out[len(KeyTenantPrefix):], m.Sum(sum[:0])[:16])
	return string(out[:])
}

// compileIdentity compiles tenant (beyond source and header), priority.source and jwt into c.
func (f *File) compileIdentity(c *Config, bad func(key, format string, args ...any)) {
	t := &f.Tenant
	c.JWTPayload = f.JWT.PayloadInMetadata
	if c.JWTPayload == "" {
		bad("jwt.payload_in_metadata", "must not be empty")
	}
	switch c.TenantSource {
	case TenantFromClaim:
		validClaim(t.Claim, "tenant.claim", bad)
		c.TenantClaim = t.Claim
	case TenantFromAPIKey:
		c.keySalt = loadSalt(t, bad)
	}
	if c.TenantSource != TenantFromClaim && len(t.Claim) > 0 {
		bad("tenant.claim", "applies with tenant.source: claim only")
	}
	if c.TenantSource != TenantFromAPIKey && (t.KeySaltFile != "" || t.KeySaltEnv != "") {
		bad("tenant.key_salt_file", "applies with tenant.source: api_key only")
	}
	switch t.Missing {
	case "":
		c.DenyUnidentified = c.TenantSource == TenantFromClaim || c.TenantSource == TenantFromAPIKey
	case "deny":
		c.DenyUnidentified = true
		if c.TenantSource == TenantNone {
			bad("tenant.missing", "deny needs a tenant.source: with none, every request would be denied")
		}
	case "default":
	default:
		bad("tenant.missing", "%q is not default or deny", t.Missing)
	}

	p := &f.Priority
	src, ok := prioritySources[p.Source]
	if !ok {
		bad("priority.source", "%q is not one of header, claim, principal, context_extension, tenant", p.Source)
	}
	c.PrioritySource = src
	if src == PriorityFromClaim {
		validClaim(p.Claim, "priority.claim", bad)
		c.PriorityClaim = p.Claim
	} else if len(p.Claim) > 0 {
		bad("priority.claim", "applies with priority.source: claim only")
	}
	if src != PriorityFromPrincipal && len(p.Principals) > 0 {
		bad("priority.principals", "applies with priority.source: principal only")
	}
	for i, pc := range p.Principals {
		key := fmt.Sprintf("priority.principals[%d]", i)
		if pc.Principal == "" {
			bad(key+".principal", "must not be empty")
		}
		fl, ok := c.Classes[pc.Class]
		if !ok {
			bad(key+".class", "%q is not a class under priority.classes", pc.Class)
		}
		c.PrincipalClasses = append(c.PrincipalClasses, PrincipalClassRule{Principal: NewGlob(pc.Principal), Class: pc.Class, Floor: fl})
	}
	if src != PriorityFromHeader {
		// The header is not trusted: it is not even read.
		p.Header = ""
	}
}

// loadSalt reads tenant.source: api_key's salt. Its value never appears in a message.
func loadSalt(t *Tenant, bad func(key, format string, args ...any)) []byte {
	var salt []byte
	key := "tenant.key_salt_file"
	switch {
	case t.KeySaltFile != "" && t.KeySaltEnv != "":
		bad("tenant.key_salt_file", "set key_salt_file or key_salt_env, not both")
		return nil
	case t.KeySaltFile != "":
		data, err := os.ReadFile(t.KeySaltFile)
		if err != nil {
			bad("tenant.key_salt_file", "%v", err)
			return nil
		}
		salt = []byte(strings.TrimSpace(string(data)))
		clear(data)
	case t.KeySaltEnv != "":
		key = "tenant.key_salt_env"
		salt = []byte(strings.TrimSpace(os.Getenv(t.KeySaltEnv)))
		if len(salt) == 0 {
			bad("tenant.key_salt_env", "the environment variable %s is unset or empty", t.KeySaltEnv)
			return nil
		}
	default:
		bad("tenant.key_salt_file", "tenant.source: api_key needs a secret salt: key_salt_file or key_salt_env")
		return nil
	}
	if len(salt) < 16 {
		bad(key, "the salt has %d bytes: at least 16, so that the tenants cannot be reversed by trying keys", len(salt))
	}
	return salt
}
