// Package pricing is the toolkit the provider rooms price requests with. It owns the tape
// parser of request bodies (Doc: one pass, nothing copied, pooled), the counting of their texts
// (Request.Count: the encoding the room chose of those Config holds, the count cache of resent
// texts, the byte-length bound), the sizes of images from their headers, the output reservation
// a request names or the configuration defaults, and the values the rooms fill in (Estimate,
// Reason). Config holds only what every room shares: no setting here names a provider, each
// room owns its own.
//
// The contract: tokens.Pricer recognises a request's provider and API, parses the body into a
// Request, and hands it to the provider's room through internal/provider/dialects.Price; the
// room sets the encoding (SetEncoding, Config.Encoding), walks Doc from the root and sets
// Est.PromptTokens and Est.OutputTokens, recording why they are approximate (Approx) and what
// input the body refers to but does not hold (Unseen). A room never allocates per request: the
// Request lives on the caller's stack and its scratch is pooled. Everything here is safe for
// concurrent use except a Request and its Scratch, which belong to one request at a time.
//
// It imports internal/provider and internal/tiktoken, and must never import a room,
// internal/provider/dialects or internal/tokens (they import it), nor touch the network.
package pricing
