package tokens

// ReasonDeadline: the text was not counted, because exact counting would not fit the check's
// deadline or the replica's capacity for expensive counts (Pricer.Bound). Every text costs its
// length in bytes, the most a byte-level BPE can give it; the rest of the price (overheads,
// images, output, n, the Anthropic factor) is computed as by Estimate.
const ReasonDeadline Reason = "deadline"

// Bound prices in like Estimate, at an upper bound of Estimate's price, without counting any
// text: each text Estimate would count costs its length in bytes instead. cl100k_base and
// o200k_base are byte-level BPEs whose every token is at least one byte, so no text of n bytes
// has more than n tokens, and Bound's PromptTokens is never below Estimate's; the output
// reserved is Estimate's, read from the same parse. Its cost is that of parsing the body (the
// tape parser, about 2 GB/s) rather than tokenizing it, whatever the text: a replica can answer
// with it when it has no time or no capacity left for an exact count. The estimate's Reason is
// ReasonDeadline. Safe for concurrent use; it does not retain in.
func (p *Pricer) Bound(in *Input) Estimate { return p.estimate(in, true) }
