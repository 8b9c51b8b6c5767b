package main

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestServerTLSVerifiesAgainstTheWrittenCA(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	caOut := filepath.Join(t.TempDir(), "ca-certificates.crt")
	cfg, err := serverTLS(dir, []string{"api.openai.com", "api.anthropic.com"}, caOut, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	ts.TLS = cfg
	ts.StartTLS()
	defer ts.Close()

	pemCA, err := os.ReadFile(caOut)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemCA) {
		t.Fatal("ca-out holds no certificate")
	}
	dial := func(name string) error {
		c, err := tls.Dial("tcp", ts.Listener.Addr().String(), &tls.Config{RootCAs: pool, ServerName: name})
		if err == nil {
			c.Close()
		}
		return err
	}
	if err := dial("api.anthropic.com"); err != nil {
		t.Fatalf("a named host must verify: %v", err)
	}
	if err := dial("evil.example"); err == nil {
		t.Fatal("a host the certificate does not name must not verify")
	}
	// A restart keeps the CA, so that clients that loaded the bundle keep trusting it.
	if _, err := serverTLS(dir, []string{"api.openai.com"}, "", time.Now()); err != nil {
		t.Fatal(err)
	}
	again, _ := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if string(again) != string(pemCA) {
		t.Fatal("the CA changed across restarts")
	}
}
