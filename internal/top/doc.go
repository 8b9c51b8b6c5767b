// Package top is the view of `ext-authz top`: it reads a running service's admin ports (GET
// /metrics of each replica given, GET /v1/buckets for each scope asked for from the first that
// answers), turns two scrapes of the metrics into rates summed over the replicas, and renders a
// frame to a string for a given width, so that the view is testable without a terminal. The
// terminal itself (input, resize, redraw) is bubbletea's.
//
// Contract: it only reads; it sends no token and shows only what the admin API returns, the
// tenants as the operator named them. It must never import the service's packages (filter,
// bucket, server): it is a client of the admin API's JSON and the Prometheus text format only.
package top
