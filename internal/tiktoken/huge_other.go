//go:build !linux

package tiktoken

// hugeBytes returns n zeroed bytes from the Go heap and no free function (see huge_linux.go).
func hugeBytes(n int) (b []byte, free func()) { return make([]byte, n), nil }
