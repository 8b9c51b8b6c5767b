//go:build race

package tiktoken

// raceEnabled is true under the race detector, which slows the merge about tenfold.
const raceEnabled = true
