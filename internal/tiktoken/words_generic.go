//go:build !amd64 || purego

package tiktoken

// haveSSE: words has no assembly here.
const haveSSE = false

func wordsSSE(t []byte, i int, w *wordTable) (next, count int) { return i, 0 }
