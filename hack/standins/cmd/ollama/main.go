// Command ollama stands in for the ollama/ollama image in data-plane tests: the `serve`, `list`, `pull`, `cp` and
// `show` commands the operator's fallback pod runs, the /api routes they call and the OpenAI routes clients use,
// on one port. A pull records the model without downloading anything; it takes STANDIN_PULL_SECONDS.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"inference-operator.dev/standins/internal/openai"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: ollama serve|list|pull MODEL|cp SOURCE DESTINATION|show MODEL")
		os.Exit(2)
	}
	var err error
	args := os.Args[2:]
	switch os.Args[1] {
	case "serve":
		err = serve()
	case "list", "ls":
		err = list()
	case "pull":
		err = oneArg(args, func(m string) error { return call("/api/pull", map[string]any{"model": m}, os.Stdout) })
	case "show":
		err = oneArg(args, func(m string) error { return call("/api/show", map[string]any{"model": m}, os.Stdout) })
	case "cp":
		if len(args) != 2 {
			err = errors.New("cp takes SOURCE and DESTINATION")
		} else {
			err = call("/api/copy", map[string]any{"source": args[0], "destination": args[1]}, io.Discard)
			if err == nil {
				fmt.Printf("copied '%s' to '%s'\n", args[0], args[1])
			}
		}
	case "--version", "-v":
		fmt.Println("ollama version is 0.0.0-standin")
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "Error: %v\n", err)
		os.Exit(1)
	}
}

func oneArg(args []string, f func(string) error) error {
	if len(args) != 1 {
		return errors.New("takes exactly one model")
	}
	return f(args[0])
}

func hostPort() string {
	h := strings.TrimPrefix(strings.TrimPrefix(os.Getenv("OLLAMA_HOST"), "http://"), "https://")
	if h == "" {
		return "127.0.0.1:11434"
	}
	if !strings.Contains(h, ":") {
		h += ":11434"
	}
	return h
}

func clientBase() string {
	host, port, _ := net.SplitHostPort(hostPort())
	if host == "" || host == "0.0.0.0" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

func call(path string, body map[string]any, out io.Writer) error {
	raw, _ := json.Marshal(body)
	resp, err := http.Post(clientBase()+path, "application/json", bytes.NewReader(raw))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			return errors.New(e.Error)
		}
		return fmt.Errorf("%s: HTTP %d", path, resp.StatusCode)
	}
	_, _ = out.Write(data)
	return nil
}

func list() error {
	resp, err := http.Get(clientBase() + "/api/tags")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var tags struct {
		Models []struct {
			Name string `json:"name"`
		} `json:"models"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&tags); err != nil {
		return err
	}
	fmt.Println("NAME")
	for _, m := range tags.Models {
		fmt.Println(m.Name)
	}
	return nil
}

// store maps a model name (with its tag) to the model it was pulled as.
type store struct {
	mu     sync.Mutex
	models map[string]string
}

func fullName(name string) string {
	if !strings.Contains(name, ":") {
		return name + ":latest"
	}
	return name
}

func (s *store) get(name string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	origin, ok := s.models[fullName(name)]
	return origin, ok
}

func (s *store) put(name, origin string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.models[fullName(name)] = origin
}

func (s *store) names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.models))
	for n := range s.models {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func apiError(w http.ResponseWriter, code int, msg string) {
	openai.WriteJSON(w, code, map[string]string{"error": msg})
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(r.Body).Decode(v); err != nil {
		apiError(w, http.StatusBadRequest, err.Error())
		return false
	}
	return true
}

func serve() error {
	models := &store{models: map[string]string{}}
	pullDelay, _ := strconv.ParseFloat(os.Getenv("STANDIN_PULL_SECONDS"), 64)
	api := openai.NewServer(models.get, models.names, openai.FaultsFromEnv())
	mux := http.NewServeMux()
	api.Register(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		if !api.WaitIfHanging(r) {
			return
		}
		fmt.Fprint(w, "Ollama is running")
	})
	mux.HandleFunc("/api/version", func(w http.ResponseWriter, _ *http.Request) {
		openai.WriteJSON(w, http.StatusOK, map[string]string{"version": "0.0.0-standin"})
	})
	mux.HandleFunc("/api/tags", func(w http.ResponseWriter, _ *http.Request) {
		list := []map[string]string{}
		for _, n := range models.names() {
			list = append(list, map[string]string{"name": n, "model": n})
		}
		openai.WriteJSON(w, http.StatusOK, map[string]any{"models": list})
	})
	mux.HandleFunc("/api/pull", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model string `json:"model"`
			Name  string `json:"name"`
		}
		if !decode(w, r, &req) {
			return
		}
		name := req.Model + req.Name
		if name == "" {
			apiError(w, http.StatusBadRequest, "model is required")
			return
		}
		time.Sleep(time.Duration(pullDelay * float64(time.Second)))
		models.put(name, fullName(name))
		openai.WriteJSON(w, http.StatusOK, map[string]string{"status": "success"})
	})
	mux.HandleFunc("/api/copy", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Source      string `json:"source"`
			Destination string `json:"destination"`
		}
		if !decode(w, r, &req) {
			return
		}
		origin, ok := models.get(req.Source)
		if !ok {
			apiError(w, http.StatusNotFound, fmt.Sprintf("model '%s' not found", req.Source))
			return
		}
		models.put(req.Destination, origin)
		w.WriteHeader(http.StatusOK)
	})
	mux.HandleFunc("/api/show", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model string `json:"model"`
			Name  string `json:"name"`
		}
		if !decode(w, r, &req) {
			return
		}
		origin, ok := models.get(req.Model + req.Name)
		if !ok {
			apiError(w, http.StatusNotFound, fmt.Sprintf("model '%s' not found", req.Model+req.Name))
			return
		}
		openai.WriteJSON(w, http.StatusOK, map[string]any{"details": map[string]string{"parent_model": origin}})
	})

	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	listener, err := net.Listen("tcp", hostPort())
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "Listening on %s\n", listener.Addr())
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(listener) }()
	select {
	case err := <-done:
		return err
	case <-stop:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return srv.Shutdown(ctx)
}
