package config

import (
	"fmt"
	"time"
)

// CheckMaxWait reports, as an *Error naming the file (name), every rule whose max_wait is above
// limit, the longest hold the service can honour (filter.Filter.HoldLimit: Envoy's per-try
// timeout less the store's time and the answer's margin). Such a hold would be cut by Envoy
// before it ends; the service would then have to give the reservation back while Envoy decides
// the request by its failure mode. limit <= 0 checks nothing.
func (c *Config) CheckMaxWait(limit time.Duration, name string) error {
	if limit <= 0 {
		return nil
	}
	var problems []string
	for i, r := range c.Rules {
		if r.MaxWait > limit {
			problems = append(problems, fmt.Sprintf("rules[%d].max_wait: %v cannot be honoured: a check attempt must end within %v (the service's -check-timeout, Envoy's per-try timeout, less the store's timeout and the answer's margin)", i, r.MaxWait, limit))
		}
	}
	if len(problems) > 0 {
		return &Error{Name: name, Problems: problems}
	}
	return nil
}
