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
	var buf [16]byte
	return string(appendTenantHash(buf[:0], tenant))
}

// TenantHash is tenantHash for the other rooms' logs (the admin API's): the same 16 hex digits
// the decisions' lines carry as tenant_hash, "" for "".
func TenantHash(tenant string) string { return tenantHash(tenant) }

// appendTenantHash appends tenantHash(tenant) to b, without allocating for a short tenant.
func appendTenantHash(b []byte, tenant string) []byte {
	if tenant == "" {
		return b
	}
	sum := sha256.Sum256([]byte(tenant))
	var hx [16]byte
	hex.Encode(hx[:], sum[:8])
	return append(b, hx[:]...)
}
