package httplimit_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/limitkit/ratelimit/httplimit"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/partitioned"
	"github.com/limitkit/ratelimit/slidinglog"
)

// chatRequest and chatResponse are the parts of a chat completion API's
// bodies that a proxy reads.
type chatRequest struct {
	Prompt    string `json:"prompt"`
	MaxTokens int    `json:"max_tokens"`
}

type chatResponse struct {
	Text  string `json:"text"`
	Usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
}

// estimate is the most tokens a request may use: its prompt's, counted
// here as one per word (the model's tokenizer counts more), and
// max_tokens of answer. It leaves the body for the handler to read.
func estimate(r *http.Request) int {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	r.Body = io.NopCloser(bytes.NewReader(body))
	var req chatRequest
	if json.Unmarshal(body, &req) != nil {
		return 0 // malformed: the handler answers 400
	}
	return len(strings.Fields(req.Prompt)) + req.MaxTokens
}

// An LLM proxy limits the tokens each API key uses per minute. The cost of
// a request is known only once the model has answered: the middleware
// reserves the most it may use (prompt tokens + max_tokens), and the
// handler settles the usage the upstream reports. A request that used
// less gives the rest back; one that used more (the tokenizer counted more
// prompt tokens than the estimate) is charged the excess, and the key's
// next requests wait for it.
func ExampleSettle() {
	// The upstream model: its tokenizer counts two tokens per word, and
	// it answers in at most 40 tokens.
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req chatRequest
		json.NewDecoder(r.Body).Decode(&req)
		var resp chatResponse
		resp.Text = "..."
		resp.Usage.PromptTokens = 2 * len(strings.Fields(req.Prompt))
		resp.Usage.CompletionTokens = min(req.MaxTokens, 40)
		resp.Usage.TotalTokens = resp.Usage.PromptTokens + resp.Usage.CompletionTokens
		json.NewEncoder(w).Encode(resp)
	}))
	defer upstream.Close()

	// 1000 tokens per minute per API key, over any minute (a sliding log).
	f, _ := memory.NewFactory(slidinglog.Config{Limit: 1000, Window: time.Minute})
	perKey, _ := partitioned.New(partitioned.Config{New: f.ForKey})
	defer perKey.Close()
	limit, err := httplimit.Middleware(perKey, httplimit.Options{
		Policy: "tokens",
		Key:    func(r *http.Request) string { return r.Header.Get("Authorization") },
		Cost:   estimate,
	})
	if err != nil {
		panic(err)
	}

	proxy := limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		up, err := http.Post(upstream.URL, "application/json", r.Body)
		if err != nil {
			httplimit.Settle(r.Context(), 0) // nothing used: all of the reservation back
			http.Error(w, "upstream unavailable", http.StatusBadGateway)
			return
		}
		defer up.Body.Close()
		var resp chatResponse
		body, _ := io.ReadAll(up.Body)
		json.Unmarshal(body, &resp)
		if err := httplimit.Settle(r.Context(), resp.Usage.TotalTokens); err != nil {
			log.Print(err)
		}
		w.Write(body)
	}))

	for _, req := range []chatRequest{
		{Prompt: "Name three colours", MaxTokens: 300},         // reserves 303, uses 46
		{Prompt: "Name three colours", MaxTokens: 300},         // reserves 303, uses 46
		{Prompt: strings.Repeat("word ", 400), MaxTokens: 100}, // reserves 500, uses 840
		{Prompt: "Name three colours", MaxTokens: 300},         // 303 of 68 left: refused
		{Prompt: "Write a long story", MaxTokens: 5000},        // can never fit in 1000
	} {
		body, _ := json.Marshal(req)
		r := httptest.NewRequest("POST", "/v1/completions", bytes.NewReader(body))
		r.Header.Set("Authorization", "Bearer sk-alice")
		w := httptest.NewRecorder()
		proxy.ServeHTTP(w, r)
		var resp chatResponse
		json.Unmarshal(w.Body.Bytes(), &resp)
		fmt.Printf("%d %-20s used %d\n", w.Code, w.Header().Get("RateLimit"), resp.Usage.TotalTokens)
	}
	// Output:
	// 200 "tokens";r=697       used 46
	// 200 "tokens";r=651       used 46
	// 200 "tokens";r=408       used 840
	// 429 "tokens";r=68;t=60   used 0
	// 413                      used 0
}
