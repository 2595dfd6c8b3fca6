package cluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// pki is a throwaway certificate authority with the apiserver's serving
// certificate and the service-account signing key, as files in dir.
type pki struct {
	dir                                    string
	caCert, servingCert, servingKey, saKey string
	// kubeletClientCert and kubeletClientKey are the apiserver's client
	// certificate for the kubelets (exec, logs, port-forward).
	kubeletClientCert, kubeletClientKey string
	ca                                  *x509.Certificate
	caKey                               crypto.Signer
}

// newPKI makes the CA, the apiserver's serving certificate (for
// localhost, the kubernetes Service's names and clusterIP) and the
// service-account signing key.
func newPKI(dir string, clusterIP net.IP) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pki dir: %w", err)
	}
	p := &pki{dir: dir}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("ca key: %w", err)
	}
	ca, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: "testworld-ca"}, key)
	if err != nil {
		return nil, fmt.Errorf("ca certificate: %w", err)
	}
	p.ca, p.caKey = ca, key
	if p.caCert, err = p.writePEM("ca.crt", "CERTIFICATE", ca.Raw); err != nil {
		return nil, err
	}
	p.servingCert, p.servingKey, err = p.issue("apiserver", "kube-apiserver", nil, true,
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		[]net.IP{net.ParseIP("127.0.0.1"), clusterIP})
	if err != nil {
		return nil, err
	}
	p.kubeletClientCert, p.kubeletClientKey, err = p.issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client",
		[]string{"system:masters"}, false, nil, nil)
	if err != nil {
		return nil, err
	}
	sa, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, fmt.Errorf("service-account key: %w", err)
	}
	b, err := keyutil.MarshalPrivateKeyToPEM(sa)
	if err != nil {
		return nil, fmt.Errorf("service-account key: %w", err)
	}
	p.saKey = filepath.Join(dir, "sa.key")
	if err := os.WriteFile(p.saKey, b, 0o600); err != nil {
		return nil, fmt.Errorf("service-account key: %w", err)
	}
	return p, nil
}

// loadPKI returns the files newPKI wrote in dir earlier. The CA key is not
// kept on disk, so a loaded pki issues no certificates: the earlier run's
// certificates and kubeconfig are all a resumed control plane needs.
func loadPKI(dir string) (*pki, error) {
	p := &pki{dir: dir,
		caCert:      filepath.Join(dir, "ca.crt"),
		servingCert: filepath.Join(dir, "apiserver.crt"),
		servingKey:  filepath.Join(dir, "apiserver.key"),
		saKey:       filepath.Join(dir, "sa.key"),

		kubeletClientCert: filepath.Join(dir, "apiserver-kubelet-client.crt"),
		kubeletClientKey:  filepath.Join(dir, "apiserver-kubelet-client.key"),
	}
	for _, f := range []string{p.caCert, p.servingCert, p.servingKey, p.saKey, p.kubeletClientCert, p.kubeletClientKey} {
		if _, err := os.Stat(f); err != nil {
			return nil, fmt.Errorf("pki: %w", err)
		}
	}
	return p, nil
}

// issue signs a key pair with the CA and returns the certificate and key
// paths. Client certificates carry orgs as their groups.
func (p *pki) issue(name, cn string, orgs []string, server bool, dns []string, ips []net.IP) (string, string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", fmt.Errorf("%s key: %w", name, err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		return "", "", fmt.Errorf("%s serial: %w", name, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, key.Public(), p.caKey)
	if err != nil {
		return "", "", fmt.Errorf("%s certificate: %w", name, err)
	}
	kb, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return "", "", fmt.Errorf("%s key: %w", name, err)
	}
	keyPath := filepath.Join(p.dir, name+".key")
	if err := os.WriteFile(keyPath, kb, 0o600); err != nil {
		return "", "", fmt.Errorf("%s key: %w", name, err)
	}
	certPath, err := p.writePEM(name+".crt", "CERTIFICATE", der)
	return certPath, keyPath, err
}

func (p *pki) writePEM(name, typ string, der []byte) (string, error) {
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o644); err != nil {
		return "", fmt.Errorf("writing %s: %w", name, err)
	}
	return path, nil
}

// writeKubeconfig writes a kubeconfig for a system:masters user, with the
// files of the PKI directory.
func (p *pki) writeKubeconfig(path, user, server string) error {
	crt, key, err := p.issue("client-"+user, user, []string{"system:masters"}, false, nil, nil)
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["testworld"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: p.caCert}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificate: crt, ClientKey: key}
	cfg.Contexts["testworld"] = &clientcmdapi.Context{Cluster: "testworld", AuthInfo: user}
	cfg.CurrentContext = "testworld"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("writing kubeconfig: %w", err)
	}
	return nil
}
