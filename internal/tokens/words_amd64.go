//go:build !purego

package tokens

// haveSSE: words runs wordsSSE where 16 bytes are left (SSE2 is part of every amd64).
const haveSSE = true

// wordsSSE is the loop of words over 16-byte windows, each classified by SSE2 compares: the
// same pieces, decided by the same rules (TestWordsSSE checks that both give the same run),
// for about half the instructions a piece. It stops where fewer than 16 bytes are left, or at
// the first piece that it cannot decide or that is not one token.
//
//go:noescape
func wordsSSE(t []byte, i int, w *wordTable) (next, count int)
