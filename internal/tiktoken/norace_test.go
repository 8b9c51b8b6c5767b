//go:build !race

package tiktoken

const raceEnabled = false
