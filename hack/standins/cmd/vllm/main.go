// Command vllm stands in for `vllm serve` of the vllm/vllm-openai image in data-plane tests: it refuses a command
// line the release's flag catalog refuses, then serves the OpenAI API, /health and /metrics on --host:--port, and
// on SIGTERM stops accepting connections, finishes the requests in flight and exits, as vLLM does.
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"inference-operator.dev/standins/internal/openai"
	"inference-operator.dev/standins/internal/vllmflags"
)

const defaultCatalog = "/etc/vllm/flags.json"

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	path := os.Getenv("VLLM_FLAG_CATALOG")
	if path == "" {
		path = defaultCatalog
	}
	catalog, err := vllmflags.Load(path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "vllm: cannot read the flag catalog: %v\n", err)
		return 1
	}
	if len(args) == 1 && (args[0] == "--version" || args[0] == "-v") {
		fmt.Println(catalog.Version)
		return 0
	}
	serve, err := catalog.ParseServe(args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "usage: vllm serve [model_tag] [options]\nvllm: error: %v\n", err)
		return 2
	}
	served := strings.Fields(serve.Get("--served-model-name", serve.Model))
	addr := net.JoinHostPort(serve.Get("--host", "0.0.0.0"), serve.Get("--port", "8000"))
	startup, _ := strconv.ParseFloat(os.Getenv("STANDIN_STARTUP_SECONDS"), 64)
	if startup > 0 {
		fmt.Fprintf(os.Stderr, "INFO loading model %s (%.1fs)\n", serve.Model, startup)
		time.Sleep(time.Duration(startup * float64(time.Second)))
	}

	api := openai.NewServer(func(id string) (string, bool) {
		for _, s := range served {
			if s == id {
				return serve.Model, true
			}
		}
		return "", false
	}, func() []string { return served }, openai.FaultsFromEnv())
	mux := http.NewServeMux()
	api.Register(mux)
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {
		if !api.WaitIfHanging(r) {
			return
		}
		if api.Faults().Unhealthy {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	mux.HandleFunc("/version", func(w http.ResponseWriter, _ *http.Request) {
		openai.WriteJSON(w, http.StatusOK, map[string]string{"version": catalog.Version})
	})
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		writeMetrics(w, api, served[0])
	})

	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	listener, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "vllm: %v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "INFO vLLM %s API server serving %s as %v on http://%s\n",
		catalog.Version, serve.Model, served, addr)
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(listener) }()
	select {
	case err := <-done:
		fmt.Fprintf(os.Stderr, "vllm: %v\n", err)
		return 1
	case sig := <-stop:
		fmt.Fprintf(os.Stderr, "INFO received %v: finishing requests in flight\n", sig)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintf(os.Stderr, "vllm: shutdown: %v\n", err)
		return 1
	}
	fmt.Fprintln(os.Stderr, "INFO shutdown complete")
	return 0
}

func writeMetrics(w http.ResponseWriter, api *openai.Server, model string) {
	running, finished, prompt, generated := api.Counts()
	label := fmt.Sprintf("{model_name=%q}", model)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	for _, m := range []struct {
		name, kind string
		value      int64
	}{
		{"vllm:num_requests_running", "gauge", running},
		{"vllm:num_requests_waiting", "gauge", 0},
		{"vllm:kv_cache_usage_perc", "gauge", 0},
		{"vllm:request_success_total", "counter", finished},
		{"vllm:prompt_tokens_total", "counter", prompt},
		{"vllm:generation_tokens_total", "counter", generated},
	} {
		fmt.Fprintf(w, "# TYPE %s %s\n%s%s %d\n", m.name, m.kind, m.name, label, m.value)
	}
}
