package pricing

// ModelLimits are the most a model takes in and gives out in one request, as its provider
// documents them: the upper bounds a request the pricer cannot read in full is priced at
// (internal/tokens/bound.go). A plain value.
type ModelLimits struct {
	// Model is a path.Match glob over the model name.
	Model string
	// Context is the context window in tokens: no request the provider accepts has more input
	// (prompt, stored conversation, files and tool results together).
	Context int64
	// Output is the largest max_tokens (max_completion_tokens, max_output_tokens) the provider
	// accepts for the model, beta headers that raise it included.
	Output int64
}
