package tiktoken_test

import (
	"fmt"

	"github.com/llm-ratelimit/llm-ratelimit/internal/tiktoken"
)

func ExampleEncoding_Count() {
	enc, err := tiktoken.Get(tiktoken.EncodingForModel("gpt-4o"))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(enc.Name(), enc.Count([]byte("Hello, world!")))
	// Output: o200k_base 4
}
