// Package faultproxy is a TCP proxy for fault-injection tests: it sits between a client and a
// real server on loopback and can add latency, refuse or drop connections, or blackhole them
// (accept and read, never answer), while counting the connections it holds, so that tests can
// check that a client neither stalls nor leaks connections across a fault.
//
// It owns nothing of the product and must never be imported by non-test code.
package faultproxy
