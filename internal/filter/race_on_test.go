//go:build race

package filter

// raceEnabled: the race detector slows the tokenizer tenfold or more; time bounds scale with it.
const raceEnabled = true
