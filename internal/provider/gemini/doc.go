// Package gemini is the room of Google's generative API family: the Gemini API
// (generativelanguage.googleapis.com: models/{model}:generateContent and
// :streamGenerateContent, and its OpenAI-compatible endpoint /v1beta/openai/chat/completions,
// which is Gemini for every rule but speaks OpenAI's dialect), and Vertex AI
// ({region}-aiplatform.googleapis.com: publishers/google/models/{model}:generateContent and
// :streamGenerateContent, and Anthropic's models through publishers/anthropic/models/
// {model}:rawPredict and :streamRawPredict with a Messages body, priced by
// internal/provider/anthropic). It owns how the family's requests are recognised (hosts, paths,
// the model named by the path), how they are priced (Price), how it answers an error (the
// google.rpc.Status body google-genai parses, with RetryInfo), how its responses report usage
// (usageMetadata in a JSON body, in each element of a streamed JSON array, in each server-sent
// event) and what a provider 429 says of when to retry (RetryAfter).
//
// Dialect is its provider.Dialect, a stateless value safe for concurrent use; Price is a
// stateless function of one pricing.Request and allocates nothing. It imports
// internal/provider, internal/provider/pricing, internal/provider/openai (the compatibility
// endpoint's chat rule and error body) and internal/provider/anthropic (Claude on Vertex); it
// must never import internal/provider/dialects, internal/filter, internal/reconcile or
// internal/tokens (they consume it).
//
// # Pricing
//
// Gemini's tokenizer is not public (the API offers countTokens, a network call the request path
// cannot afford). The estimate is ceil(Margin * (cl100k_base tokens of every text part, the
// system instruction, function calls and responses and the tools as JSON, plus 4 per content
// turn)), plus media, with reason pricing.ReasonGeminiEstimate. Evidence for Margin = 1.25,
// none of it a tokenizer: Google says "a token is equivalent to about 4 characters" and "100
// tokens is equal to about 60-80 English words" (ai.google.dev/gemini-api/docs/tokens), which
// is cl100k_base's own ratio on English; public comparisons put Gemini's SentencePiece counts
// at 5-10% above o200k_base on English (techcompare.app/token-counter/gemini-tokenization),
// and cl100k_base gives as many or more tokens than o200k_base on English and code. 1.25 covers
// that gap twice over; settlement corrects the rest to usageMetadata.promptTokenCount. The 4
// per turn is Gemma's chat template (<start_of_turn>role, <end_of_turn>), which Gemini's is not
// documented to be: a margin too.
//
// Media: an inline image whose size its base64 header tells costs 258 tokens when both sides
// are at most 384 px, else 258 per 768x768 tile ("With Gemini 2.0, image inputs with both
// dimensions <=384 pixels are counted as 258 tokens. Images larger in one or both dimensions
// are cropped and scaled as needed into tiles of 768x768 pixels, each counted as 258 tokens",
// ai.google.dev/gemini-api/docs/tokens), and at least 1120 for models after Gemini 2 (their
// high media_resolution, ai.google.dev/gemini-api/docs/media-resolution); an image of unknown
// size costs 1120 (ReasonImage). Other inline data (audio, video, PDF) costs one token per 16
// base64 characters (ReasonUnpricedPart), above Google's published rates at common bit rates
// (audio 32 tokens per second, video 263 per second, a PDF page 258). A fileData part (a
// Files API or Cloud Storage URI) and cachedContent bring input the body does not hold: the
// prompt is raised to the unseen-context bound (Unseen).
//
// Output reserved: generationConfig.maxOutputTokens times candidateCount; when absent, the
// configured default (pricing.Request.DefaultOutput) times candidateCount.
//
// # Accounting
//
// Gemini's "Tokens per minute (input) (TPM)" counts input only
// (ai.google.dev/gemini-api/docs/rate-limits): it is the input_tokens dimension, which settles
// to the usage's promptTokenCount. Requests per day "reset at midnight Pacific time" (same
// page): a calendar quota with timezone America/Los_Angeles. Vertex AI's Gemini 2.0+ models use
// dynamic shared quota, with no per-project limit to learn
// (cloud.google.com/vertex-ai/generative-ai/docs/dynamic-shared-quota): its 429 is a capacity
// signal, answered by a short shared pause (RetryAfter).
package gemini
