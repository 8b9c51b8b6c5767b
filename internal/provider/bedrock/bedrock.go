package bedrock

import (
	"encoding/json"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
)

// Dialect is the Bedrock runtime as a provider.Dialect. Its zero value is ready to use.
type Dialect struct{}

var _ provider.Dialect = Dialect{}

// HeaderErrorType is the header that names an error's type in the AWS REST-JSON protocol:
// Bedrock's runtime sends "x-amzn-ErrorType: ThrottlingException" with its 429s, and botocore's
// RestJSONParser reads the code from it (the part before any ':'), the body's "message" for the
// text (botocore/parsers.py, BaseRestParser._parse_error_from_http_status and
// RestJSONParser._inject_error_code).
const HeaderErrorType = "x-amzn-errortype"

// errorType is the error type Bedrock's runtime names for each class of answer (the "Errors" of
// API_runtime_Converse.html and API_runtime_InvokeModel.html). ThrottlingException (429) is one
// of the codes botocore retries as throttling, with backoff, in every retry mode
// (botocore/retries/standard.py ThrottledRetryableChecker._THROTTLED_ERROR_CODES; legacy mode:
// botocore/data/_retry.json "throttling_exception" and "too_many_requests"); the AWS SDKs for
// Java, Go and JavaScript list it among their throttling codes too. ValidationException (a
// request too large for the limits, or malformed) is never retried; ServiceUnavailableException
// (503) and InternalServerException (500) are retried as transient.
func errorType(c provider.Class) string {
	switch c {
	case provider.RateLimited:
		return "ThrottlingException"
	case provider.QuotaExhausted:
		// Not among botocore's throttling codes: a spent budget is not retried as throttling.
		return "ServiceQuotaExceededException"
	case provider.TooLarge, provider.InvalidRequest:
		return "ValidationException"
	case provider.Unavailable:
		return "ServiceUnavailableException"
	}
	return "InternalServerException"
}

// ErrorHeader is the header that tells an AWS SDK what kind of error an answer of class c is:
// x-amzn-ErrorType, which it reads before the body. It allocates nothing.
func (Dialect) ErrorHeader(_ provider.API, c provider.Class) (name, value string, ok bool) {
	return HeaderErrorType, errorType(c), true
}

// errorBody is the body of Bedrock's runtime errors, {"message": "..."} (the error shapes of the
// API reference: ThrottlingException has one member, message).
type errorBody struct {
	Message string `json:"message"`
}

// AppendError appends e in Bedrock's error format, whatever the API: every runtime operation
// answers errors the same way, its stream operations too when the error comes before the
// stream starts.
func (Dialect) AppendError(b []byte, _ provider.API, e provider.Error) []byte {
	out, _ := json.Marshal(errorBody{Message: e.Message}) // cannot fail: a string
	if b == nil {
		return out
	}
	return append(b, out...)
}

// Budgets reads nothing: the Bedrock runtime sends no rate-limit headers (its quotas are read in
// Service Quotas and CloudWatch, not in responses).
func (Dialect) Budgets(func(string) (string, bool)) provider.Budgets { return provider.Budgets{} }

// RateHeaders names none: no AWS SDK reads rate-limit headers from Bedrock.
func (Dialect) RateHeaders(provider.API, provider.Dimension) (provider.RateHeaders, bool) {
	return provider.RateHeaders{}, false
}

// Profile is how the Bedrock runtime counts a request against its tokens-per-minute quota,
// "How tokens are counted in Amazon Bedrock" (docs.aws.amazon.com/bedrock/latest/userguide/
// quotas-token-burndown.html):
//   - TPM counts "both input and output" tokens, one quota per model, on demand or cross-Region;
//   - "The burndown rate for the following models is 5x for output tokens (1 output token
//     consumes 5 tokens from your quotas)": Claude Opus 4, Sonnet 4 and their successors
//     (Opus 4.1, 4.5, Sonnet 4.5, Haiku 4.5, ...), 1x for every other model: OutputWeight 5 for the
//     Claude 4-era names (claude4Era), and for an id that names no model (an application
//     inference profile's or a provisioned model's ARN), whose model cannot be checked: a weight
//     too high over-reserves output, one too low draws the provider's 429s;
//   - at the start a request reserves InputTokenCount + CacheReadInputTokens +
//     CacheWriteInputTokens + max_tokens (the model's maximum output when unset: Price reserves
//     it), and at its end the quota is adjusted to InputTokenCount + CacheWriteInputTokens +
//     OutputTokenCount x the burndown rate: the tokens dimension settles, and cache reads,
//     reserved at admission (the room records no prompt-cache breakpoint, so that admission
//     expects no read), are given back at settlement (CacheReadsFree).
//
// An operator whose account counts otherwise sets it in the limits file (accounting).
func (Dialect) Profile(_ provider.ID, model string) provider.Profile {
	p := provider.Profile{CacheReadsFree: true, Settles: provider.DimensionSet(0).With(provider.Tokens)}
	if burnsFive(model) {
		p.OutputWeight = 5
	}
	return p
}

// burnsFive reports whether model's output burns 5 quota tokens each (Profile).
func burnsFive(model string) bool {
	if name := Claude(model); name != "" {
		return claude4Era(name)
	}
	return !namesModel(model)
}
