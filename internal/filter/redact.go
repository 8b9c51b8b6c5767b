package filter

import (
	"crypto/sha256"
	"encoding/hex"
)

// tenantHash is what logs carry instead of a tenant: the first 64 bits of its SHA-256, in hex.
// Tenants come from headers, principals or routes and may be secrets or personal data (an
// e-mail, an account id), so no log line ever carries one; the hash still lets an operator
// follow one tenant's lines (printf %s TENANT | sha256sum | cut -c1-16).
func tenantHash(tenant string) string {
	if tenant == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(tenant))
	return hex.EncodeToString(sum[:8])
}
