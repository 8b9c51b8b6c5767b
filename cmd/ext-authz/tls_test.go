package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/llm-ratelimit/llm-ratelimit/internal/redistest"
)

// testCA issues certificates for the TLS tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a PEM certificate and key for 127.0.0.1 (server) or a client, with serial.
func (ca *testCA) issue(t *testing.T, serial int64, server bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "envoy"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func writeBytes(t *testing.T, path string, b []byte) {
	t.Helper()
	// Write then rename, as a certificate manager does, so that a reload never reads half a file.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// gRPC over mTLS to the service, and the service to a TLS-only Redis as an ACL user: only a
// client with a certificate from the client CA gets an answer; a renewed server certificate is
// served without a restart.
func TestTLSAndMTLS(t *testing.T) {
	t.Parallel()
	redis := redistest.StartServer(t, redistest.WithTLS(), redistest.WithUser("limiter", "s3cret-pass"))
	ca := newTestCA(t)
	dir := t.TempDir()
	certFile, keyFile, caFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "ca.crt")
	c, k := ca.issue(t, 100, true)
	writeBytes(t, certFile, c)
	writeBytes(t, keyFile, k)
	writeBytes(t, caFile, ca.pem)
	cfg := writeFile(t, "limits.yaml", "rules: [{name: r, tokens: {limit: 100000, period: minute}}]\n")
	p := startUnready(t, "-config", cfg, "-redis-url", redis.URL(), "-redis-ca", filepath.Join(redis.Dir(), "ca.crt"),
		"-tls-cert", certFile, "-tls-key", keyFile, "-tls-client-ca", caFile)

	cc, ck := ca.issue(t, 200, false)
	pair, err := tls.X509KeyPair(cc, ck)
	if err != nil {
		t.Fatal(err)
	}
	mtls := &tls.Config{RootCAs: ca.pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	// check returns the RPC's error, or the answer's metadata.
	check := func(creds credentials.TransportCredentials) (*structpb.Struct, error) {
		conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(creds))
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		resp, err := authv3.NewAuthorizationClient(conn).Check(ctx, chatRequest("gpt-4o", 10, nil))
		return resp.GetDynamicMetadata(), err
	}
	allowed := func(meta *structpb.Struct, err error) bool {
		return err == nil && meta.GetFields()["decision"].GetStringValue() == "allowed"
	}
	// The first decision opens the TLS connection to Redis, which on a loaded machine under the
	// race detector can outlast the 50 ms Redis timeout (a 503 "unavailable"): the store over
	// TLS and ACL must decide within the wait, not at the first call.
	waitFor(t, 10*time.Second, "an allowed decision over mTLS", func() bool {
		meta, err := check(credentials.NewTLS(mtls))
		if !allowed(meta, err) {
			t.Logf("mTLS check: %v, %v", meta, err)
			return false
		}
		return true
	})
	if _, err := check(insecure.NewCredentials()); err == nil {
		t.Error("a plaintext client got an answer")
	}
	if _, err := check(credentials.NewTLS(&tls.Config{RootCAs: ca.pool, MinVersion: tls.VersionTLS12})); err == nil {
		t.Error("a client without a certificate got an answer")
	}
	other := newTestCA(t)
	oc, ok := other.issue(t, 300, false)
	opair, _ := tls.X509KeyPair(oc, ok)
	if _, err := check(credentials.NewTLS(&tls.Config{RootCAs: ca.pool, Certificates: []tls.Certificate{opair}, MinVersion: tls.VersionTLS12})); err == nil {
		t.Error("a client with a certificate from another CA got an answer")
	}

	// Hot reload: a renewed certificate (serial 101) is served within the reload interval.
	c, k = ca.issue(t, 101, true)
	writeBytes(t, certFile, c)
	writeBytes(t, keyFile, k)
	waitFor(t, 5*time.Second, "the renewed certificate", func() bool {
		conn, err := tls.Dial("tcp", p.grpcAddr, &tls.Config{RootCAs: ca.pool, Certificates: []tls.Certificate{pair}, NextProtos: []string{"h2"}})
		if err != nil {
			return false
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64() == 101
	})
	if meta, err := check(credentials.NewTLS(mtls)); !allowed(meta, err) {
		t.Errorf("after the reload: %v, %v", meta, err)
	}
}

// The admin endpoints (metrics, health, pprof) listen on loopback unless told otherwise.
func TestAdminOnLoopbackByDefault(t *testing.T) {
	t.Parallel()
	o, _, err := parseServe(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, addr := range map[string]string{"admin": o.AdminAddr, "grpc": o.GRPCAddr} {
		host, _, err := net.SplitHostPort(addr)
		if err != nil || !net.ParseIP(host).IsLoopback() {
			t.Errorf("default %s address %q is not loopback", name, addr)
		}
	}
}
