//go:build race

package main

// raceEnabled: the race detector keeps shadow memory that grows with what the heap churned
// through, so a process under it grows in RSS without leaking.
const raceEnabled = true
