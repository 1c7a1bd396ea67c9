// Package openai serves the parts of the OpenAI API that clients of vLLM and Ollama use, answering with a fixed
// text that names the model behind the served id, and carries the fault switches tests use to make a server
// slow, unhealthy or unresponsive.
package openai

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// BackendHeader names, on every answer, the model that produced it (the served id is the same across a switch).
const BackendHeader = "X-Backend-Model"

// Faults are switched by tests through POST /standin/faults (JSON) or the STANDIN_* environment variables.
type Faults struct {
	Unhealthy    bool `json:"unhealthy"`    // /health answers 503
	Hang         bool `json:"hang"`         // every request, /health included, waits until cleared
	TokenDelayMs int  `json:"tokenDelayMs"` // pause between streamed tokens
}

// Server answers completions for the ids Lookup resolves to a backend model.
type Server struct {
	// Lookup maps a requested model id to the model behind it; false when it is not served.
	Lookup func(id string) (string, bool)
	// Served lists the ids /v1/models shows.
	Served func() []string
	Tokens int

	mu       sync.Mutex
	faults   Faults
	cleared  chan struct{}
	running  atomic.Int64
	finished atomic.Int64
	promptN  atomic.Int64
	genN     atomic.Int64
}

// NewServer returns a server with the given faults switched on.
func NewServer(lookup func(string) (string, bool), served func() []string, faults Faults) *Server {
	return &Server{Lookup: lookup, Served: served, Tokens: 8, faults: faults, cleared: make(chan struct{})}
}

// Faults returns the current fault switches.
func (s *Server) Faults() Faults {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults
}

func (s *Server) setFaults(f Faults) {
	s.mu.Lock()
	defer s.mu.Unlock()
	wasHanging := s.faults.Hang
	s.faults = f
	if wasHanging && !f.Hang {
		close(s.cleared)
		s.cleared = make(chan struct{})
	}
}

// WaitIfHanging blocks while the Hang fault is on, or until the request is abandoned.
func (s *Server) WaitIfHanging(r *http.Request) bool {
	s.mu.Lock()
	hang, cleared := s.faults.Hang, s.cleared
	s.mu.Unlock()
	if !hang {
		return true
	}
	select {
	case <-cleared:
		return true
	case <-r.Context().Done():
		return false
	}
}

// Register adds the OpenAI routes and the fault switch to mux.
func (s *Server) Register(mux *http.ServeMux) {
	mux.HandleFunc("/v1/models", s.guard(s.models))
	mux.HandleFunc("/v1/completions", s.guard(s.completions))
	mux.HandleFunc("/v1/chat/completions", s.guard(s.chat))
	mux.HandleFunc("/standin/faults", s.faultSwitch)
}

// Counts returns requests running, finished, prompt and generated tokens, for metrics.
func (s *Server) Counts() (running, finished, prompt, generated int64) {
	return s.running.Load(), s.finished.Load(), s.promptN.Load(), s.genN.Load()
}

func (s *Server) guard(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.WaitIfHanging(r) {
			return
		}
		h(w, r)
	}
}

func (s *Server) faultSwitch(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		var f Faults
		if err := json.NewDecoder(r.Body).Decode(&f); err != nil {
			WriteError(w, http.StatusBadRequest, err.Error())
			return
		}
		s.setFaults(f)
	}
	WriteJSON(w, http.StatusOK, s.Faults())
}

func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	data := []map[string]any{}
	for _, id := range s.Served() {
		backend, _ := s.Lookup(id)
		data = append(data, map[string]any{"id": id, "object": "model", "owned_by": "standin", "root": backend})
	}
	WriteJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

type request struct {
	Model    string `json:"model"`
	Stream   bool   `json:"stream"`
	Prompt   any    `json:"prompt"`
	Messages []struct {
		Content any `json:"content"`
	} `json:"messages"`
	MaxTokens int `json:"max_tokens"`
}

func (s *Server) decode(w http.ResponseWriter, r *http.Request) (*request, string, bool) {
	if r.Method != http.MethodPost {
		WriteError(w, http.StatusMethodNotAllowed, "use POST")
		return nil, "", false
	}
	var req request
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		WriteError(w, http.StatusBadRequest, "invalid JSON body: "+err.Error())
		return nil, "", false
	}
	backend, ok := s.Lookup(req.Model)
	if !ok {
		WriteError(w, http.StatusNotFound, fmt.Sprintf("The model `%s` does not exist.", req.Model))
		return nil, "", false
	}
	return &req, backend, true
}

func (s *Server) words(req *request, backend string) []string {
	n := s.Tokens
	if req.MaxTokens > 0 && req.MaxTokens < n {
		n = req.MaxTokens
	}
	out := []string{"answer", "from", backend}
	for len(out) < n {
		out = append(out, "token")
	}
	return out[:max(n, 1)]
}

func (s *Server) completions(w http.ResponseWriter, r *http.Request) {
	s.answer(w, r, "text_completion", func(text string) map[string]any {
		return map[string]any{"index": 0, "text": text, "finish_reason": "stop"}
	}, func(text string) map[string]any {
		return map[string]any{"index": 0, "text": text, "finish_reason": nil}
	})
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	s.answer(w, r, "chat.completion", func(text string) map[string]any {
		return map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": text},
			"finish_reason": "stop"}
	}, func(text string) map[string]any {
		return map[string]any{"index": 0, "delta": map[string]any{"content": text}, "finish_reason": nil}
	})
}

func (s *Server) answer(w http.ResponseWriter, r *http.Request, object string,
	whole func(string) map[string]any, chunk func(string) map[string]any) {
	req, backend, ok := s.decode(w, r)
	if !ok {
		return
	}
	s.running.Add(1)
	defer s.running.Add(-1)
	defer s.finished.Add(1)
	words := s.words(req, backend)
	s.promptN.Add(4)
	s.genN.Add(int64(len(words)))
	id := fmt.Sprintf("cmpl-%d", time.Now().UnixNano())
	created := time.Now().Unix()
	w.Header().Set(BackendHeader, backend)
	delay := time.Duration(s.Faults().TokenDelayMs) * time.Millisecond
	if !req.Stream {
		time.Sleep(delay * time.Duration(len(words)))
		WriteJSON(w, http.StatusOK, map[string]any{
			"id": id, "object": object, "created": created, "model": req.Model,
			"choices": []any{whole(strings.Join(words, " "))},
			"usage":   map[string]int{"prompt_tokens": 4, "completion_tokens": len(words), "total_tokens": 4 + len(words)},
		})
		return
	}
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	streamObject := object
	if object == "chat.completion" {
		streamObject = "chat.completion.chunk"
	}
	for i, word := range words {
		if i > 0 {
			word = " " + word
			time.Sleep(delay)
		}
		body, _ := json.Marshal(map[string]any{
			"id": id, "object": streamObject, "created": created, "model": req.Model, "choices": []any{chunk(word)},
		})
		if _, err := fmt.Fprintf(w, "data: %s\n\n", body); err != nil {
			return
		}
		if flusher != nil {
			flusher.Flush()
		}
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// WriteJSON writes v with status code.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// WriteError writes an OpenAI-style error object.
func WriteError(w http.ResponseWriter, code int, message string) {
	WriteJSON(w, code, map[string]any{"error": map[string]any{"message": message, "code": code}})
}
