package main

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/protobuf/proto"
)

// benchConfig is the default limits file: one rule per tenant with 2 buckets, and tenants
// deny-* whose requests bucket admits one request an hour.
//
//go:embed bench.yaml
var benchConfig []byte

// workload describes the requests the tool sends.
type workload struct {
	sizes   []int    // body sizes in bytes, mixed uniformly
	models  []string // model names, mixed uniformly; claude-* go to /v1/messages
	tenants int      // tenants t-000... that are never limited
	deny    float64  // share of requests from tenants deny-*, which are denied after their first
	seed    uint64
	// conversations, when > 0, makes each body a turn of one of that many ongoing
	// conversations: its system prompt and earlier messages as every earlier turn sent them,
	// and a new last message.
	conversations int
}

// words is the vocabulary of generated prompts: plain English, so the tokenizer does its usual
// work (not a worst case, not a trivially repeated string).
var words = strings.Fields(`the a of to and in is it that for on with as was be by this are or from at an
which not have has one all their will can more about if when there so what time up out other into
some could than them these two may then first any like its over new only would also people after
use how our well way even because work most where much through back still should here those while
request model token limit budget shared tenant replica proxy cluster service latency throughput
answer question explain summarize document paragraph translate function result error value number
please write short long detailed example following code review test deploy schedule report data`)

// prose returns about n bytes of space-separated words.
func prose(rng *rand.Rand, n int) string {
	var b strings.Builder
	b.Grow(n + 16)
	for b.Len() < n {
		w := words[rng.IntN(len(words))]
		if b.Len() > 0 {
			if rng.IntN(12) == 0 {
				b.WriteString(". ")
				w = strings.ToUpper(w[:1]) + w[1:]
			} else {
				b.WriteByte(' ')
			}
		}
		b.WriteString(w)
	}
	return b.String()
}

type msg struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// chatBody returns a chat request body of about size bytes for model: an OpenAI chat completion,
// or an Anthropic message for claude-* models. conv < 0: one user message of new prose; else a
// turn of conversation conv: its system prompt and earlier messages (the same text on every
// turn of that conversation: a 1 KB system prompt, questions of 256 bytes, answers of 1 KB)
// and a new last user message of about 400 bytes.
func chatBody(rng *rand.Rand, model string, size, conv int) ([]byte, string) {
	system := "You are a helpful assistant. Answer briefly and precisely."
	var earlier []msg
	if conv >= 0 {
		crng := rand.New(rand.NewPCG(uint64(conv), 99))
		system = prose(crng, 1024)
		// Questions of about 256 bytes and answers of about 1 KB, then the new question.
		for left := size - 1024 - 400 - 200; left > 0; {
			q := min(256, left)
			a := max(min(1024, left-q), 32)
			earlier = append(earlier, msg{"user", prose(crng, q)}, msg{"assistant", prose(crng, a)})
			left -= q + a
		}
	}
	anthropic := strings.HasPrefix(model, "claude")
	build := func(user string) []byte {
		msgs := append(append([]msg(nil), earlier...), msg{"user", user})
		var v any
		if anthropic {
			v = struct {
				Model     string `json:"model"`
				System    string `json:"system"`
				Messages  []msg  `json:"messages"`
				MaxTokens int    `json:"max_tokens"`
			}{model, system, msgs, 256}
		} else {
			v = struct {
				Model     string  `json:"model"`
				Messages  []msg   `json:"messages"`
				MaxTokens int     `json:"max_tokens"`
				Temp      float64 `json:"temperature"`
			}{model, append([]msg{{"system", system}}, msgs...), 256, 0.2}
		}
		b, _ := json.Marshal(v) // fixed types of strings and numbers
		return b
	}
	lastSize := size - len(build(""))
	if conv >= 0 {
		lastSize = max(lastSize, 200)
	}
	body := build(prose(rng, max(lastSize, 1)))
	if anthropic {
		return body, "/v1/messages"
	}
	return body, "/v1/chat/completions"
}

// rawRequest is a CheckRequest marshalled once, sent as is (see rawCodec), so that the load
// tool spends its CPU on sending, not on encoding.
type rawRequest struct {
	data   []byte
	tenant string
}

// requests builds n distinct CheckRequests as Envoy sends them (raw_body, lower-case headers,
// pseudo-headers, the usual proxy headers), drawn at random from the workload's mix.
func (w *workload) requests(n int) ([]*rawRequest, error) {
	rng := rand.New(rand.NewPCG(w.seed, 8))
	out := make([]*rawRequest, n)
	for i := range out {
		tenant := fmt.Sprintf("t-%03d", rng.IntN(w.tenants))
		if w.deny > 0 && rng.Float64() < w.deny {
			tenant = fmt.Sprintf("deny-%02d", rng.IntN(10))
		}
		model := w.models[rng.IntN(len(w.models))]
		conv := -1
		if w.conversations > 0 {
			conv = rng.IntN(w.conversations)
		}
		body, path := chatBody(rng, model, w.sizes[rng.IntN(len(w.sizes))], conv)
		host := "api.openai.com"
		if path == "/v1/messages" {
			host = "api.anthropic.com"
		}
		hdr := map[string]string{
			":path": path, ":method": "POST", ":authority": host, ":scheme": "http",
			"content-type": "application/json", "content-length": strconv.Itoa(len(body)),
			"accept": "application/json", "user-agent": "OpenAI/Python 1.99.0",
			"authorization":     "Bearer sk-loadgen-" + strconv.Itoa(i%97),
			"x-request-id":      fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", rng.Uint32(), rng.IntN(1<<16), rng.IntN(1<<12), rng.IntN(1<<12), rng.Uint64()&(1<<48-1)),
			"x-forwarded-proto": "http", "x-envoy-expected-rq-timeout-ms": "600000",
			"x-tenant-id": tenant,
		}
		req := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
			Source:      &authv3.AttributeContext_Peer{Address: sockAddr("10.0.0.7", 43210)},
			Destination: &authv3.AttributeContext_Peer{Address: sockAddr("10.0.0.2", 80)},
			Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
				Id: hdr["x-request-id"], Method: "POST", Path: path, Host: host, Scheme: "http",
				Headers: hdr, Size: int64(len(body)), RawBody: body, Protocol: "HTTP/1.1",
			}},
		}}
		data, err := proto.Marshal(req)
		if err != nil {
			return nil, err
		}
		out[i] = &rawRequest{data: data, tenant: tenant}
	}
	return out, nil
}

// parseSizes reads "1k,8k,64k" (k = 1024 bytes).
func parseSizes(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(strings.ToLower(f))
		mult := 1
		if strings.HasSuffix(f, "k") {
			f, mult = f[:len(f)-1], 1024
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 || n*mult > 4<<20 {
			return nil, fmt.Errorf("body size %q: want a positive size up to 4096k, like 1k", f)
		}
		out = append(out, n*mult)
	}
	return out, nil
}
