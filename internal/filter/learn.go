package filter

import (
	"github.com/llm-ratelimit/llm-ratelimit/internal/config"
	"github.com/llm-ratelimit/llm-ratelimit/internal/learn"
	"github.com/llm-ratelimit/llm-ratelimit/internal/tokens"
)

// Learner gives the learned factor of an estimate's provider, model and reason, from a snapshot:
// it must not block. *learn.Shared implements it.
type Learner interface {
	Factor(k learn.Key) learn.Learned
}

// maxLearnedModel is the longest model name learned: a longer one (or one with bytes outside
// printable ASCII) keeps its static estimate, so that the learned keys, the metadata and the
// metric labels that name a model stay small and the same on both paths.
const maxLearnedModel = 64

// learnable reports whether est's prompt may be priced at a learned factor under p: learning is
// on, a Learner is set, and the prompt is an estimate whose reason learns
// (pricing.Reason.Learnable) of a model with a short, printable name.
func (f *Filter) learnable(p *Policy, est *tokens.Estimate) bool {
	return f.opts.Learner != nil && p.Config.LearnEnabled && !est.Exact && est.Reason.Learnable() &&
		est.PromptTokens > 0 && learnableModel(est.Model)
}

// learnableModel reports whether a model's figures may be learned: a short, printable name
// (maxLearnedModel).
func learnableModel(m string) bool {
	if len(m) > maxLearnedModel {
		return false
	}
	for i := 0; i < len(m); i++ {
		if m[i] < 0x20 || m[i] > 0x7e {
			return false
		}
	}
	return true
}

// learn prices est's prompt at its learned factor, where learnable: est.Static keeps the static
// estimate (the response path learns from it), and the prompt and its cache points become the
// static figures times the factor, rounded up, once the factor is learned (learn.Policy: within
// its clamp, past its sample floor). Otherwise est is left as priced. It allocates nothing once
// the key is known.
func (f *Filter) learn(p *Policy, est *tokens.Estimate) {
	if !f.learnable(p, est) {
		return
	}
	est.Static = est.PromptTokens
	l := f.opts.Learner.Factor(learn.Key{Provider: est.ProviderName(), Model: est.Model, Reason: string(est.Reason)})
	if !l.Learned {
		return
	}
	est.PromptTokens = learn.Price(est.PromptTokens, l.Factor)
	for i := range min(est.NCache, len(est.CachePoints)) {
		est.CachePoints[i].Tokens = learn.Price(est.CachePoints[i].Tokens, l.Factor)
	}
}

// learnOutput reports whether rule (reserve_output: learned) reserves est's learned output, and
// computes pl.learnedCost the first time: the charge with the learned quantile of the model's
// completions as the output (never above the request's own maximum). A rule mirroring a
// provider's limits (provider_feedback) reserves it only where the provider counts output as
// generated (provider.Profile.OutputAsGenerated): elsewhere the provider counts max_tokens at
// admission, and so does the rule. Before the sample floor, or without a Learner, the rule
// reserves as the others do; the response path learns all the same (pl.learnOutput).
func (f *Filter) learnOutput(pl *plan, est *tokens.Estimate, rule *config.Rule) bool {
	if f.opts.Learner == nil || (rule.Feedback && !pl.prof.OutputAsGenerated) || !learnableModel(est.Model) {
		return false
	}
	pl.learnOutput = true
	if pl.learnedCost != nil {
		return true
	}
	l := f.opts.Learner.Factor(learn.Key{Provider: est.ProviderName(), Model: est.Model, Reason: learn.OutputReason})
	if !l.Learned {
		return false
	}
	out := learn.Output(l.Quantile)
	if !est.OutputUnset {
		out = min(out, est.OutputTokens)
	}
	e := *est
	e.OutputTokens, e.OutputUnset = out, false
	c := charge(&pl.prof, &e)
	pl.learnedCost = &c
	return true
}
