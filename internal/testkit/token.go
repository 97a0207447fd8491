package testkit

import "crypto/rand"

// RandomAlnum returns n random letters and digits ([A-Za-z0-9]): the
// secrets tests make their real values with it when the test binary
// starts, so a test binary copied into a sandbox never holds one.
func RandomAlnum(n int) string {
	const chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = chars[int(b[i])%len(chars)]
	}
	return string(b)
}
