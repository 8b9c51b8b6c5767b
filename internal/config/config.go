package config

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/llm-ratelimit/llm-ratelimit/internal/learn"
)

// Example is the embedded example configuration: the service's default when no file is given.
//
//go:embed example.yaml
var Example []byte

// File is the configuration file as written by the operator. Field names are the YAML keys.
type File struct {
	// Tenant says where the tenant identity of a request comes from.
	Tenant Tenant `yaml:"tenant"`
	// Priority says how a request's priority class is chosen and what floor each class has.
	Priority Priority `yaml:"priority"`
	// Pricing tunes request pricing.
	Pricing Pricing `yaml:"pricing"`
	// Failure is the decision taken while the store is unreachable.
	Failure Failure `yaml:"failure"`
	// Response tunes the answers sent to clients.
	Response Response `yaml:"response"`
	// Settlement tunes how the response path settles reservations.
	Settlement Settlement `yaml:"settlement"`
	// Shadow decides and counts every request but always allows (global dry run).
	Shadow bool `yaml:"shadow"`
	// MaxHeld bounds the requests held at once for a max_wait reservation.
	MaxHeld int `yaml:"max_held"`
	// JWT says where Envoy's jwt_authn filter puts a verified token's payload (tenant.claim,
	// priority.claim and tenant_plans.claim read it).
	JWT JWT `yaml:"jwt"`
	// Plans are named sets of limits; a rule with limits_from: plan takes each tenant's own.
	Plans map[string]PlanSpec `yaml:"plans"`
	// TenantPlans says which plan each tenant is on.
	TenantPlans TenantPlans `yaml:"tenant_plans"`
	// Credentials are the operator's own provider credentials, from which provider_feedback
	// rules accept corrections.
	Credentials Credentials `yaml:"credentials"`
	// Accounting overrides the providers' built-in accounting profiles (how each counts a
	// request) per provider and model glob; the first matching entry applies.
	Accounting []AccountingSpec `yaml:"accounting"`
	// Providers declares more providers by host, each speaking a built-in family's dialect
	// (OpenAI- and Anthropic-compatible APIs): their requests are theirs in rules, buckets,
	// metrics and logs.
	Providers []ProviderSpec `yaml:"providers"`
	// Prices extend and override the default price table (internal/price): the first entry
	// matching a request's provider and model applies, these before the defaults.
	Prices []PriceSpec `yaml:"prices"`
	// Unknown is what a request that is no known provider's API gets: allow (the rules that
	// match it decide, its raw body priced as text), requests_only (only request limits count
	// it) or deny (refused with a 403).
	Unknown string `yaml:"unknown"`
	// Rules are the limits. Every rule whose match fits a request applies to it.
	Rules []RuleSpec `yaml:"rules"`
}

// AccountingSpec overrides fields of a provider's accounting profile for the models matching a
// glob. An unset field keeps the built-in value.
type AccountingSpec struct {
	// Provider is the provider name (openai, azure, anthropic); required.
	Provider string `yaml:"provider"`
	// Model is a glob; empty matches every model.
	Model string `yaml:"model"`
	// Counting is how the tokens dimension is counted at admission: sum (prompt plus
	// max_tokens) or max_of_chars (the larger of max_tokens and the request's characters / 4).
	Counting string `yaml:"counting"`
	// UnsetOutput is what is counted as output when a request names no maximum: default
	// (pricing.default_output_tokens) or context_window (the model's context window).
	UnsetOutput string `yaml:"unset_output"`
	// OutputWeight multiplies the output tokens in every dimension that counts them (1 to 100).
	OutputWeight int64 `yaml:"output_weight"`
	// CacheReads says whether prompt-cache reads count as input: counted or free.
	CacheReads string `yaml:"cache_reads"`
	// Settles lists the dimensions settled to the actual usage when the response reports it:
	// any of tokens, input_tokens, output_tokens ([] settles none).
	Settles *[]string `yaml:"settles"`
}

// ProviderSpec declares one provider: its name, its hosts and the dialect it speaks.
type ProviderSpec struct {
	// Name names it in rules (match.provider), accounting, per: [provider] bucket keys, metrics
	// and logs: 1 to 32 of [a-z0-9_-], no built-in provider's name.
	Name string `yaml:"name"`
	// Hosts are its host names (api.mistral.ai) and wildcards (*.example.com: any name under
	// example.com), matched ignoring case and port. No host may be another provider's.
	Hosts []string `yaml:"hosts"`
	// Dialect is openai or anthropic: how its requests are priced, its usage read and its
	// denials answered.
	Dialect string `yaml:"dialect"`
	// Encoding counts every text of its requests in o200k_base or cl100k_base. Default: the
	// dialect's (openai: the model's encoding, else pricing.fallback_encoding; anthropic:
	// cl100k_base and its estimate).
	Encoding string `yaml:"encoding"`
	// Estimate prices its prompts at their cl100k_base count times this ratio (0.1 to 10), an
	// estimate (reason declared_estimate). At most one of Encoding and Estimate.
	Estimate float64 `yaml:"estimate"`
}

// Tenant configures tenant identity.
type Tenant struct {
	// Source is one of: none, header, principal, context_extension, claim, api_key.
	Source string `yaml:"source"`
	// Header is the header name with source: header (lower case, set by the mesh).
	Header string `yaml:"header"`
	// Claim is the path of the tenant in a verified JWT's payload, with source: claim.
	Claim ClaimPath `yaml:"claim"`
	// KeySaltFile and KeySaltEnv name the secret salt (a file, or an environment variable)
	// with source: api_key: the tenant is a salted hash of the provider API key, never the key.
	KeySaltFile string `yaml:"key_salt_file"`
	KeySaltEnv  string `yaml:"key_salt_env"`
	// Missing is what a request without its identity gets: default (tenant.default) or deny
	// (401). Default: deny with source claim or api_key, default otherwise.
	Missing string `yaml:"missing"`
	// Default is the tenant of a request that carries none.
	Default string `yaml:"default"`
	// Log is how the answer's dynamic metadata (and so Envoy's access log) names the tenant:
	// hash (default: the first 64 bits of its SHA-256, in hex) or clear (the tenant itself).
	Log string `yaml:"log"`
}

// Priority configures priority classes.
type Priority struct {
	// Source is where the class comes from: header (default), claim, principal,
	// context_extension (the route's "priority" key) or tenant (priority.tenants only). With any
	// but header, the priority header is ignored.
	Source string `yaml:"source"`
	// Header carries the class name; a missing or unknown class is Default.
	Header string `yaml:"header"`
	// Claim is the path of the class in a verified JWT's payload, with source: claim.
	Claim ClaimPath `yaml:"claim"`
	// Principals give the peers matching a glob their class (first match), with source:
	// principal.
	Principals []PrincipalClass `yaml:"principals"`
	// Default is the class of a request that names none.
	Default string `yaml:"default"`
	// Classes maps a class name to its floor: the fraction of each bucket it may not take.
	Classes map[string]Class `yaml:"classes"`
	// Tenants gives tenants their class (first match wins) when the request's header names no
	// known class: the class then follows the tenant's trusted identity.
	Tenants []TenantClass `yaml:"tenants"`
}

// TenantClass is the priority class of the tenants matching a glob.
type TenantClass struct {
	Tenant string `yaml:"tenant"`
	Class  string `yaml:"class"`
}

// PrincipalClass is the priority class of the mTLS peers matching a glob.
type PrincipalClass struct {
	Principal string `yaml:"principal"`
	Class     string `yaml:"class"`
}

// Class is one priority class.
type Class struct {
	Floor float64 `yaml:"floor"`
}

// Pricing configures request pricing.
type Pricing struct {
	// DefaultOutputTokens is reserved for output when a request names no maximum.
	DefaultOutputTokens int64 `yaml:"default_output_tokens"`
	// OutputTokens overrides DefaultOutputTokens per model glob (first match wins).
	OutputTokens []ModelTokens `yaml:"output_tokens"`
	// FallbackEncoding is the tokenizer of unknown models: o200k_base or cl100k_base.
	FallbackEncoding string `yaml:"fallback_encoding"`
	// AzureDeployments maps an Azure OpenAI deployment name to its model.
	AzureDeployments map[string]string `yaml:"azure_deployments"`
	// MaxRequestBytes is Envoy's with_request_body.max_request_bytes: a body of this size that
	// came without a content-length may be cut, and is priced at its upper bound. Default
	// 1048576, the shipped envoy.yaml's.
	MaxRequestBytes int64 `yaml:"max_request_bytes"`
	// Unreadable is the policy for bodies that cannot be read in full.
	Unreadable Unreadable `yaml:"unreadable"`
	// UnseenContextTokens bounds the input a request brings without showing it (stored
	// conversations, files, URLs, MCP servers); 0: the model's context window.
	UnseenContextTokens int64 `yaml:"unseen_context_tokens"`
	// Learn prices estimated prompts at what the providers' own counts taught (internal/learn).
	Learn Learn `yaml:"learn"`
}

// Learn configures the learned estimate ratios: for each provider, model and reason of an
// estimated prompt, the ratio of the provider's count to the static estimate is learned from
// settlements and shared by every replica; admission prices at its Quantile, clamped to
// [MinFactor, MaxFactor] times the static estimate, once MinSamples (decayed) were seen.
type Learn struct {
	// Enabled turns learning on (default false: the static estimate prices every request).
	Enabled bool `yaml:"enabled"`
	// Quantile of the learned ratio priced at, in (0, 1]; default 0.99.
	Quantile float64 `yaml:"quantile"`
	// MinSamples is the decayed sample count below which the static estimate stands; default 50.
	MinSamples float64 `yaml:"min_samples"`
	// MinFactor and MaxFactor clamp the learned price to this range times the static one;
	// defaults 0.5 and 1.5.
	MinFactor float64 `yaml:"min_factor"`
	MaxFactor float64 `yaml:"max_factor"`
	// HalfLife is how fast old samples lose weight; default 1m.
	HalfLife Duration `yaml:"half_life"`
}

// Unreadable is the pricing policy for a body that cannot be read in full.
type Unreadable struct {
	// Policy is bound (priced at its upper bound, the default) or refuse (413).
	Policy string `yaml:"policy"`
	// OutputTokens is the output reserved when its model is not in the pricer's table and no
	// max_tokens can be trusted; 0: the provider's largest maximum output.
	OutputTokens int64 `yaml:"output_tokens"`
}

// ModelTokens is a default output reservation for the models matching a glob.
type ModelTokens struct {
	Model  string `yaml:"model"`
	Tokens int64  `yaml:"tokens"`
}

// Failure configures the decision while the store is unreachable.
type Failure struct {
	// Mode is deny (503, the default), allow, or local (each replica enforces limit / Replicas in
	// memory).
	Mode string `yaml:"mode"`
	// Replicas is the number of replicas sharing the limit in local mode.
	Replicas int `yaml:"replicas"`
}

// Response tunes the answers sent to clients.
type Response struct {
	// RetryJitter adds up to this fraction (0 to 1) of the wait to the advertised Retry-After, so
	// that denied clients do not all come back at once.
	RetryJitter float64 `yaml:"retry_jitter"`
}

// Settlement tunes how the response path (ext_proc) settles a request's reservation.
type Settlement struct {
	// KeepOnClientError is the part (0 to 1) of a refundable reservation (refund: true) kept
	// when the provider answers 4xx, 429 included. Default 0.25: a client that sends requests the
	// provider refuses at once (a huge max_tokens on an invalid body) then pays a quarter of what
	// it held, so it can hold a shared bucket's capacity at most four times per refill of it
	// instead of forever and for free; an honest client's bad request costs a quarter of its
	// reservation. OpenAI and Azure count unsuccessful requests against their limits; 1 mirrors
	// them. A 5xx gives a refundable reservation back whole; a rule without refund keeps its
	// reservation on every error.
	KeepOnClientError float64 `yaml:"keep_on_client_error"`
	// UsageFactor bounds a reported usage at this many times the reservation (prompt plus
	// reserved output); 0: no bound from the reservation. Default 8.
	UsageFactor float64 `yaml:"usage_factor"`
	// MaxUsageTokens bounds a reported usage whatever the reservation: above any model's context
	// window plus its largest output. Default 2,000,000.
	MaxUsageTokens int64 `yaml:"max_usage_tokens"`
	// Decode lists the content-codings decoded to read a reply's usage: gzip (and x-gzip),
	// deflate, br, zstd. Default all four; [] decodes none (compressed replies keep their
	// reservation).
	Decode []string `yaml:"decode"`
}

// RuleSpec is one limit as written in the file.
type RuleSpec struct {
	// Name identifies the rule in buckets, metrics, headers and logs. Changing it starts new buckets.
	Name string `yaml:"name"`
	// Match selects the requests the rule applies to; empty fields match everything.
	Match Match `yaml:"match"`
	// Per lists what the rule's buckets are kept per: any of provider, model, tenant, priority.
	// Empty means one bucket for all matching requests.
	Per []string `yaml:"per"`
	// Tokens limits the tokens of the matching requests: input plus (weighted) output, counted
	// as the provider's accounting profile says (accounting).
	Tokens Amounts `yaml:"tokens"`
	// InputTokens limits the input tokens the provider counts (Anthropic's ITPM: cache reads
	// free for most models).
	InputTokens Amounts `yaml:"input_tokens"`
	// OutputTokens limits the (weighted) output tokens (Anthropic's OTPM: reserved from
	// max_tokens, settled to the actual output).
	OutputTokens Amounts `yaml:"output_tokens"`
	// Requests limits the number of matching requests.
	Requests Amounts `yaml:"requests"`
	// Cost limits the money the matching requests spend, at the price table's prices: the most
	// a request can cost is reserved at admission, its usage's cost settled from the response.
	Cost *CostSpec `yaml:"cost"`
	// ReserveOutput is what the rule's tokens and output_tokens buckets reserve for output:
	// max_tokens (the default: the request's maximum, else the configured default) or learned
	// (a high quantile of the completions observed of the model, never above the request's
	// maximum; settled to the actual output). learned is refused where the provider counts the
	// output maximum itself at admission (a provider_feedback rule of OpenAI, Azure, Anthropic,
	// Bedrock).
	ReserveOutput string `yaml:"reserve_output"`
	// MaxWait holds a request up to this long for the budget instead of denying it.
	MaxWait Duration `yaml:"max_wait"`
	// MaxConcurrent caps the matching requests in flight at once across every replica (one bucket
	// per the rule's scope); 0 means no cap. A request holds its slot until its response ends.
	MaxConcurrent int64 `yaml:"max_concurrent"`
	// LeaseTTL frees a slot of MaxConcurrent whose release never came (a lost response path).
	// Keep it at the route's timeout. Default 10m (envoy.yaml's route timeout, 600s).
	LeaseTTL Duration `yaml:"lease_ttl"`
	// ProviderFeedback marks the rule's token bucket as a mirror of the provider's own limit: the
	// provider's rate-limit headers lower it and a provider 429 pauses it.
	ProviderFeedback bool `yaml:"provider_feedback"`
	// Refund gives the unused part of a token reservation back when the response reports its
	// usage (the response path, ext_proc). Only for a provider that bills actual usage (Anthropic
	// adjusts output tokens at the end of a request); a provider that counts max_tokens up front
	// (OpenAI describes its limit so) would then admit less than the limiter. Overage is charged
	// whatever this says. Default false: the reservation stands, as the provider counted it.
	Refund bool `yaml:"refund"`
	// LimitsFrom: plan takes the rule's limits from each tenant's plan (plans, tenant_plans)
	// instead of tokens, input_tokens, output_tokens and requests. Needs per: [tenant].
	LimitsFrom string `yaml:"limits_from"`
	// Shadow decides and counts but always allows (per-rule dry run).
	Shadow bool `yaml:"shadow"`
}

// Match selects requests. Globs take * (any run of characters) and ? (one character).
type Match struct {
	Provider string `yaml:"provider"`
	// Host is a glob over the request's host name: lower case, without its port and final dot.
	Host     string `yaml:"host"`
	Model    string `yaml:"model"`
	Path     string `yaml:"path"`
	Tenant   string `yaml:"tenant"`
	Priority string `yaml:"priority"`
}

// Amounts are the windows of one dimension: one amount, or a list of them that all apply (600
// per minute and 10 per second). In the file either a mapping or a sequence of mappings.
type Amounts []Amount

// UnmarshalYAML reads one amount or a sequence of them.
func (a *Amounts) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.SequenceNode {
		var list []Amount
		if err := n.Decode(&list); err != nil {
			return err
		}
		*a = list
		return nil
	}
	var one Amount
	if err := n.Decode(&one); err != nil {
		return err
	}
	*a = Amounts{one}
	return nil
}

// Amount is one budget: Limit per Period.
type Amount struct {
	Limit int64 `yaml:"limit"`
	// Period is second, minute, hour, day, month (calendar, quota only) or a duration like 90s.
	Period string `yaml:"period"`
	// Burst is the token bucket's capacity; 0 means Limit.
	Burst int64 `yaml:"burst"`
	// Algorithm is token_bucket (default), sliding_window or quota.
	Algorithm string `yaml:"algorithm"`
	// Timezone is the IANA time zone whose midnights a quota's days and months start at
	// ("America/Los_Angeles": the Gemini API's requests per day "reset at midnight Pacific
	// time"); empty is UTC. Daylight saving is followed: such a day may last 23 or 25 hours.
	Timezone string `yaml:"timezone"`
}

// Duration is a time.Duration written as a Go duration string ("1.5s", "250ms").
type Duration time.Duration

// UnmarshalYAML parses a duration string; an error is reported with the line of the value.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil || v < 0 {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %q is not a non-negative duration (like 500ms or 2s)", n.Line, n.Value)}}
	}
	*d = Duration(v)
	return nil
}

// Load reads, decodes and validates the file at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(data, path)
}

// Parse decodes and validates a configuration; name is used in error messages. Every problem is
// reported at once.
func Parse(data []byte, name string) (*Config, error) {
	f := Defaults()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var errs []error
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			for _, e := range te.Errors {
				errs = append(errs, errors.New(e))
			}
		} else {
			return nil, fmt.Errorf("config %s: %w", name, err)
		}
	}
	c, err := f.compile(filepath.Dir(name))
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, &Error{Name: name, Problems: flatten(errs)}
	}
	sum := sha256.Sum256(data)
	c.Source, c.SHA256 = name, hex.EncodeToString(sum[:])
	return c, nil
}

// Default returns the compiled embedded example configuration.
func Default() (*Config, error) { return Parse(Example, "embedded example") }

// Defaults returns a File holding every default value.
func Defaults() File {
	return File{
		Tenant:      Tenant{Source: "none", Default: "default", Log: "hash"},
		JWT:         JWT{PayloadInMetadata: "jwt_payload"},
		TenantPlans: TenantPlans{Source: "table", Claim: ClaimPath{"plan"}},
		Priority:    Priority{Source: "header", Default: "default", Classes: map[string]Class{"default": {Floor: 0}}},
		Pricing: Pricing{DefaultOutputTokens: 4096, FallbackEncoding: "cl100k_base", MaxRequestBytes: 1 << 20,
			Unreadable: Unreadable{Policy: "bound"},
			Learn: Learn{Quantile: learn.DefaultPolicy.Quantile, MinSamples: learn.DefaultPolicy.MinSamples,
				MinFactor: learn.DefaultPolicy.Min, MaxFactor: learn.DefaultPolicy.Max, HalfLife: Duration(learn.DefaultPolicy.HalfLife)}},
		Failure: Failure{Mode: "deny", Replicas: 1},
		Settlement: Settlement{KeepOnClientError: 0.25, UsageFactor: 8, MaxUsageTokens: 2_000_000,
			Decode: []string{"gzip", "deflate", "br", "zstd"}},
		MaxHeld: 1024,
		Unknown: "allow",
	}
}

// Error lists every problem of a configuration.
type Error struct {
	Name     string
	Problems []string
}

func (e *Error) Error() string {
	return fmt.Sprintf("config %s: %d problem(s):\n  %s", e.Name, len(e.Problems), strings.Join(e.Problems, "\n  "))
}

func flatten(errs []error) []string {
	var out []string
	for _, err := range errs {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			out = append(out, flatten(j.Unwrap())...)
			continue
		}
		out = append(out, err.Error())
	}
	return out
}

// DefaultMaxRecvBytes is the service's default gRPC receive limit: the largest CheckRequest it
// accepts. Envoy's with_request_body.max_request_bytes (plus the request headers) must stay below
// it; 8 MiB leaves room above any body cap up to Envoy's 1 MiB default buffer and well beyond.
const DefaultMaxRecvBytes = 8 << 20
