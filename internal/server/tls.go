package server

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"go.uber.org/zap"
)

// certReloadEvery bounds how often the certificate files are checked for changes.
const certReloadEvery = time.Second

// certReloader serves the gRPC port's TLS configuration from files and reloads it when they
// change (a renewed certificate or CA bundle needs no restart): every handshake checks the files'
// modification times at most once per certReloadEvery. A file that fails to load leaves the
// previous configuration in force. Safe for concurrent use.
type certReloader struct {
	cert, key, clientCA string
	log                 *zap.Logger

	mu      sync.Mutex
	checked time.Time
	stamp   string
	conf    *tls.Config
}

// newCertReloader loads the files once; an error fails start-up.
func newCertReloader(cert, key, clientCA string, log *zap.Logger) (*certReloader, error) {
	if cert == "" || key == "" {
		return nil, errors.New("tls: both a certificate and a key file are required")
	}
	r := &certReloader{cert: cert, key: key, clientCA: clientCA, log: log}
	stamp, err := r.stampNow()
	if err != nil {
		return nil, err
	}
	conf, err := r.load()
	if err != nil {
		return nil, err
	}
	r.stamp, r.conf, r.checked = stamp, conf, time.Now()
	return r, nil
}

// ServerConfig is the tls.Config to give the gRPC server.
func (r *certReloader) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return r.current(), nil
		},
	}
}

func (r *certReloader) current() *tls.Config {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.checked) < certReloadEvery {
		return r.conf
	}
	r.checked = time.Now()
	stamp, err := r.stampNow()
	if err != nil || stamp == r.stamp {
		return r.conf
	}
	conf, err := r.load()
	if err != nil {
		r.log.Error("tls: reload rejected; the previous certificate stays", zap.Error(err))
		return r.conf
	}
	r.stamp, r.conf = stamp, conf
	r.log.Info("tls: certificate reloaded", zap.Bool("client_auth", r.clientCA != ""))
	return conf
}

// stampNow is the files' sizes and modification times.
func (r *certReloader) stampNow() (string, error) {
	s := ""
	for _, f := range []string{r.cert, r.key, r.clientCA} {
		if f == "" {
			continue
		}
		st, err := os.Stat(f)
		if err != nil {
			return "", fmt.Errorf("tls: %w", err)
		}
		s += fmt.Sprintf("%s:%d:%d;", f, st.Size(), st.ModTime().UnixNano())
	}
	return s, nil
}

func (r *certReloader) load() (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(r.cert, r.key)
	if err != nil {
		return nil, fmt.Errorf("tls: %s, %s: %w", r.cert, r.key, err)
	}
	conf := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}}
	if r.clientCA != "" {
		pool, err := loadPool(r.clientCA)
		if err != nil {
			return nil, err
		}
		conf.ClientCAs = pool
		conf.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return conf, nil
}

// loadPool reads a PEM bundle of CA certificates.
func loadPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("tls: %s: no PEM certificate", path)
	}
	return pool, nil
}
