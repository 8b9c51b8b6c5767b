// Package provider is the contract between the provider rooms and the packages that consume them.
// It names the providers and the APIs a request can call (ID, API), declares what one API family
// must tell the limiter (Dialect: its denial bodies, the usage its responses report, the
// rate-limit headers it sends back) and the values that cross that seam (Error, Usage, Budget).
//
// Each family lives in its own package below this one (internal/provider/openai: OpenAI and its
// Azure dialect; internal/provider/anthropic: the Messages API and Anthropic's OpenAI-compatible
// endpoint), each with the hosts and paths that recognise its requests and the rules that price
// their bodies. They price with internal/provider/pricing, the toolkit they share with
// internal/tokens (the parsed body, counting, image sizes, output defaults, Estimate and Reason),
// and internal/provider/dialects is the one place that maps an ID to its Dialect, a request to
// its ID and a parsed request to its room's pricing. Adding a family is adding its package, with
// its fixtures, an ID here and its lines there.
//
// A provider the limits file declares (Declared: an OpenAI- or Anthropic-compatible API on hosts
// of its own) has no ID of its own: its requests carry its family's ID, whose dialect they speak,
// and its name beside it; Hosts is the table, built once per configuration, that finds it by host.
//
// Everything here is a plain value or a stateless method, safe for concurrent use. It must never
// import another package of this module: every other one may import it.
package provider
