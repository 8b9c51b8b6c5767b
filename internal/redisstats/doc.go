// Package redisstats reads what a Redis server reports about its own work: the calls of each
// command (INFO commandstats) and its CPU time (INFO cpu). The load tool and the tests that count
// round trips or measure the script's cost share it.
//
// It owns the parsing of those two INFO sections only; the functions are safe for concurrent use
// as the client they are given is. It is measurement code: the service's packages must never
// import it, and it must never import the project's own packages.
package redisstats
