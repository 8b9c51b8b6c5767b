//go:build race

package tokens

// raceEnabled is true under the race detector, which slows pricing about tenfold.
const raceEnabled = true
