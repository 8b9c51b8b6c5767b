package openai

import (
	"strings"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/pricing"
)

// The tool rule is OpenAI's published one (OpenAI Cookbook, "How to count tokens with
// tiktoken", num_tokens_for_tools,
// https://github.com/openai/openai-cookbook/blob/main/examples/How_to_count_tokens_with_tiktoken.ipynb).
// A non-empty list of function definitions costs, on top of the messages:
//
//	per function  funcInit + tokens(name + ":" + description)
//	if the parameters have properties, once  3
//	per property  3 + tokens(key + ":" + type + ":" + description)
//	per enum      -3, then per item 3 + tokens(item)
//	once          12
//
// with one trailing "." dropped from each description. funcInit is 7 for gpt-4o and
// gpt-4o-mini, 10 for gpt-3.5-turbo and gpt-4; the cookbook gives no constants for other
// models. The rule reads only a function's name, description and parameters.properties, and of
// a property only its type, description and enum: a definition with anything else (nested
// object or array schemas, a missing description, a type list, "strict", "additionalProperties",
// non-string enum items) is a shape the cookbook does not cover, and the whole list is priced as
// before, by its JSON text plus toolsOverhead (ReasonTools), which errs high.
//
// A property key repeated in one object is counted each time (Python's json keeps the last),
// which errs high.
//
// The legacy "functions" list holds the same function objects the rule reads from each tool's
// "function", so it is priced by the same rule.
//
// The cookbook has no rule for what the model wrote back: its num_tokens_from_messages counts a
// message's string values only, so assistant "tool_calls" (and the legacy "function_call") stay
// estimated in Chat. A "tool" message is all strings (role, tool_call_id, content) and is
// counted by the chat rule like any other.
const (
	propInit = 3
	propKey  = 3
	enumInit = -3
	enumItem = 3
	funcEnd  = 12
)

// funcInit is the per-function constant of the tool rule for model, false for a model the
// cookbook gives none for. A dated snapshot ("gpt-4o-2024-08-06", "gpt-4-0613") is its model;
// gpt-3.5-turbo-0301 and gpt-4-0314 predate function calling.
func funcInit(model string) (int64, bool) {
	switch base := snapshotBase(model); base {
	case "gpt-4o", "gpt-4o-mini":
		return 7, true
	case "gpt-3.5-turbo", "gpt-4":
		if base != model && (strings.HasSuffix(model, "-0301") || strings.HasSuffix(model, "-0314")) {
			return 0, false
		}
		return 10, true
	}
	return 0, false
}

// snapshotBase strips a snapshot date ("-0613" or "-2024-08-06") from model.
func snapshotBase(model string) string {
	if b, ok := cutDate(model, "-dddd-dd-dd"); ok {
		return b
	}
	if b, ok := cutDate(model, "-dddd"); ok {
		return b
	}
	return model
}

// cutDate cuts a suffix of shape (d a digit, - a dash) from s.
func cutDate(s, shape string) (string, bool) {
	if len(s) <= len(shape) {
		return s, false
	}
	tail := s[len(s)-len(shape):]
	for i := 0; i < len(shape); i++ {
		c := tail[i]
		if shape[i] == 'd' && (c < '0' || c > '9') || shape[i] == '-' && c != '-' {
			return s, false
		}
	}
	return s[:len(s)-len(shape)], true
}

// definitions prices the chat "tools" and legacy "functions" lists: by the tool rule when the
// model has its constants and every definition has a shape the rule reads, else by their JSON
// text plus toolsOverhead (ReasonTools).
func definitions(s *pricing.Request, root int) int64 {
	tl, fl := s.Doc.Get(root, "tools"), s.Doc.Get(root, "functions")
	hasTools := s.Doc.Kind(tl) == pricing.Array && s.Doc.NonEmpty(tl)
	hasFuncs := s.Doc.Kind(fl) == pricing.Array && s.Doc.NonEmpty(fl)
	if !hasTools && !hasFuncs {
		return 0
	}
	perFunc, ok := funcInit(s.Est.Model)
	if !ok || hasTools && hasFuncs { // the cookbook prices one list
		return tools(s, root, "tools", "functions")
	}
	list, wrapped := fl, false
	if hasTools {
		list, wrapped = tl, true
	}
	covered := true
	s.Doc.Children(list, func(_, t int) bool {
		covered = ruleCovers(s.Doc, function(s.Doc, t, wrapped))
		return covered
	})
	if !covered {
		return tools(s, root, "tools", "functions")
	}
	// The lines are built in one buffer per request: Count keeps its argument out of the
	// stack, so a buffer per line would be an allocation per line.
	line := make([]byte, 0, 512)
	total := int64(funcEnd)
	s.Doc.Children(list, func(_, t int) bool {
		var n int64
		n, line = functionTokens(s, function(s.Doc, t, wrapped), line)
		total += perFunc + n
		return true
	})
	return total
}

// function is the function object of a tools element ({"type":"function","function":{...}}),
// or the element itself for the legacy functions list; -1 when a tool is not of that shape.
func function(d *pricing.Doc, t int, wrapped bool) int {
	if !wrapped {
		return t
	}
	if d.Kind(t) != pricing.Object || !onlyKeys(d, t, "type", "function") || !d.TextIs(d.Get(t, "type"), "function") {
		return -1
	}
	return d.Get(t, "function")
}

// ruleCovers reports whether function object f has only what the tool rule reads: a string
// name and description, and parameters of type object whose properties each have a string
// type and description and at most an enum of strings (a required list is allowed: it is not
// rendered into the count).
func ruleCovers(d *pricing.Doc, f int) bool {
	if d.Kind(f) != pricing.Object || !onlyKeys(d, f, "name", "description", "parameters") ||
		d.Kind(d.Get(f, "name")) != pricing.String || d.Kind(d.Get(f, "description")) != pricing.String {
		return false
	}
	p := d.Get(f, "parameters")
	if d.Kind(p) != pricing.Object || !onlyKeys(d, p, "type", "properties", "required") ||
		!d.TextIs(d.Get(p, "type"), "object") {
		return false
	}
	props := d.Get(p, "properties")
	if d.Kind(props) != pricing.Object {
		return false
	}
	covered := true
	d.Children(props, func(_, v int) bool {
		covered = d.Kind(v) == pricing.Object && onlyKeys(d, v, "type", "description", "enum") &&
			d.Kind(d.Get(v, "type")) == pricing.String && d.Kind(d.Get(v, "description")) == pricing.String
		if e := d.Get(v, "enum"); covered && e >= 0 {
			covered = d.Kind(e) == pricing.Array
			d.Children(e, func(_, item int) bool {
				covered = covered && d.Kind(item) == pricing.String
				return covered
			})
		}
		return covered
	})
	return covered
}

// onlyKeys reports whether object o has no key but those given.
func onlyKeys(d *pricing.Doc, o int, keys ...string) bool {
	only := true
	d.Children(o, func(k, _ int) bool {
		only = false
		for _, key := range keys {
			if d.KeyIs(k, key) {
				only = true
				break
			}
		}
		return only
	})
	return only
}

// functionTokens prices one function object the rule covers, without funcInit, building its
// lines in line; it returns line, grown if need be.
func functionTokens(s *pricing.Request, f int, line []byte) (int64, []byte) {
	line = appendText(s.Doc, line[:0], s.Doc.Get(f, "name"))
	line = append(line, ':')
	line = appendDesc(s.Doc, line, s.Doc.Get(f, "description"))
	total := s.Count(line)
	props := s.Doc.Get(s.Doc.Get(f, "parameters"), "properties")
	if !s.Doc.NonEmpty(props) {
		return total, line
	}
	total += propInit
	s.Doc.Children(props, func(k, v int) bool {
		total += propKey
		if e := s.Doc.Get(v, "enum"); e >= 0 {
			total += enumInit
			s.Doc.Children(e, func(_, item int) bool {
				total += enumItem + s.CountText(item)
				return true
			})
		}
		line = appendText(s.Doc, line[:0], k)
		line = append(line, ':')
		line = appendText(s.Doc, line, s.Doc.Get(v, "type"))
		line = append(line, ':')
		line = appendDesc(s.Doc, line, s.Doc.Get(v, "description"))
		total += s.Count(line)
		return true
	})
	return total, line
}

// appendDesc appends description i without one trailing ".".
func appendDesc(d *pricing.Doc, b []byte, i int) []byte {
	n := len(b)
	b = appendText(d, b, i)
	if len(b) > n && b[len(b)-1] == '.' {
		b = b[:len(b)-1]
	}
	return b
}

// appendText appends the decoded string (or object key) i to b.
func appendText(d *pricing.Doc, b []byte, i int) []byte {
	var esc [256]byte
	t, _ := d.Text(esc[:0], i)
	return append(b, t...)
}
