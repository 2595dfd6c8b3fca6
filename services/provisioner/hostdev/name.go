package hostdev

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// deviceName returns the name an interface is published under: the
// interface name when it is a DNS label (RFC 1123: lower-case letters,
// digits and '-', starting and ending with a letter or digit, at most 63
// bytes), as ResourceSlices require. Otherwise a label made from it: lower
// case, every other character '-', trimmed of '-' at either end, and a
// suffix of 6 hex digits of the name's SHA-256, so that names that sanitize
// alike stay apart (eth0.100 -> eth0-100-<hash>). The result is stable for a
// name.
func deviceName(ifName string) string {
	if isDNSLabel(ifName) {
		return ifName
	}
	b := []byte(strings.ToLower(ifName))
	for i, c := range b {
		if !isAlnum(c) {
			b[i] = '-'
		}
	}
	s := strings.Trim(string(b), "-")
	if s == "" {
		s = "if"
	}
	sum := sha256.Sum256([]byte(ifName))
	return s + "-" + hex.EncodeToString(sum[:3])
}

func isDNSLabel(s string) bool {
	if len(s) == 0 || len(s) > 63 || !isAlnum(s[0]) || !isAlnum(s[len(s)-1]) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isAlnum(s[i]) && s[i] != '-' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }
