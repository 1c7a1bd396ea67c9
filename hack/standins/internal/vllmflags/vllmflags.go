// Package vllmflags checks a `vllm serve` command line against the project's flag catalog of one vLLM release,
// the way vLLM's argparse parser would accept or refuse it.
package vllmflags

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Flag is what the catalog says of one option.
type Flag struct {
	Boolean bool
	Choices []string
}

// Catalog is the set of options of one release, aliases included.
type Catalog struct {
	Version string
	Flags   map[string]Flag
}

// Load reads a catalog file. It accepts the flags as an object (name -> {"boolean", "choices", "aliases"},
// or name -> true/false for "is a switch") or as a plain list of names, so older and newer catalog files work.
func Load(path string) (*Catalog, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Version string          `json:"vllm"`
		Flags   json.RawMessage `json:"flags"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	cat := &Catalog{Version: doc.Version, Flags: map[string]Flag{}}
	var names []string
	if json.Unmarshal(doc.Flags, &names) == nil {
		for _, n := range names {
			cat.Flags[n] = Flag{}
		}
		return cat, nil
	}
	var entries map[string]json.RawMessage
	if err := json.Unmarshal(doc.Flags, &entries); err != nil {
		return nil, fmt.Errorf("%s: flags is neither a list nor an object: %w", path, err)
	}
	for name, body := range entries {
		var isSwitch bool
		if json.Unmarshal(body, &isSwitch) == nil {
			cat.Flags[name] = Flag{Boolean: isSwitch}
			continue
		}
		var entry struct {
			Boolean bool              `json:"boolean"`
			Choices []json.RawMessage `json:"choices"`
			Aliases []string          `json:"aliases"`
		}
		if err := json.Unmarshal(body, &entry); err != nil {
			// A shape this reader does not know: the flag exists, its value is not checked.
			cat.Flags[name] = Flag{}
			continue
		}
		flag := Flag{Boolean: entry.Boolean}
		for _, c := range entry.Choices {
			var s string
			if json.Unmarshal(c, &s) != nil {
				s = strings.TrimSpace(string(c))
			}
			flag.Choices = append(flag.Choices, s)
		}
		cat.Flags[name] = flag
		for _, alias := range entry.Aliases {
			cat.Flags[alias] = flag
		}
	}
	return cat, nil
}

// Typed values vLLM converts; a value that does not convert is refused as argparse would.
var numeric = map[string]string{
	"--port":                   "int",
	"--tensor-parallel-size":   "int",
	"--pipeline-parallel-size": "int",
	"--max-model-len":          "int",
	"--max-num-seqs":           "int",
	"--max-num-batched-tokens": "int",
	"--swap-space":             "float",
	"--gpu-memory-utilization": "float",
}

// Serve is a parsed `vllm serve` command line.
type Serve struct {
	Model   string
	Options map[string]string
}

// Get returns an option's value, or def when it was not given.
func (s *Serve) Get(name, def string) string {
	if v, ok := s.Options[name]; ok {
		return v
	}
	return def
}

// ParseServe parses the arguments after the program name, such as ["serve", "org/model", "--port", "8000"].
func (c *Catalog) ParseServe(args []string) (*Serve, error) {
	if len(args) == 0 || args[0] != "serve" {
		return nil, fmt.Errorf("argument subparser: invalid choice (choose from 'serve')")
	}
	out := &Serve{Options: map[string]string{}}
	var unknown []string
	rest := args[1:]
	for i := 0; i < len(rest); i++ {
		arg := rest[i]
		if !strings.HasPrefix(arg, "-") || arg == "-" {
			if out.Model == "" {
				out.Model = arg
			} else {
				unknown = append(unknown, arg)
			}
			continue
		}
		name, value, hasValue := strings.Cut(arg, "=")
		flag, known := c.Flags[name]
		if !known {
			unknown = append(unknown, arg)
			continue
		}
		if flag.Boolean {
			if hasValue {
				return nil, fmt.Errorf("argument %s: ignored explicit argument '%s'", name, value)
			}
			out.Options[name] = "true"
			continue
		}
		if !hasValue {
			if i+1 >= len(rest) || (strings.HasPrefix(rest[i+1], "--") && len(rest[i+1]) > 2) {
				return nil, fmt.Errorf("argument %s: expected one argument", name)
			}
			i++
			value = rest[i]
		}
		if len(flag.Choices) > 0 && !contains(flag.Choices, value) {
			return nil, fmt.Errorf("argument %s: invalid choice: '%s' (choose from %s)", name, value,
				strings.Join(flag.Choices, ", "))
		}
		if err := checkType(name, value); err != nil {
			return nil, err
		}
		out.Options[name] = value
	}
	if out.Model == "" {
		if m, ok := out.Options["--model"]; ok {
			out.Model = m
		} else {
			return nil, fmt.Errorf("the following arguments are required: model_tag")
		}
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("unrecognized arguments: %s", strings.Join(unknown, " "))
	}
	return out, nil
}

func checkType(name, value string) error {
	switch numeric[name] {
	case "int":
		if _, err := strconv.Atoi(value); err != nil {
			return fmt.Errorf("argument %s: invalid int value: '%s'", name, value)
		}
	case "float":
		if _, err := strconv.ParseFloat(value, 64); err != nil {
			return fmt.Errorf("argument %s: invalid float value: '%s'", name, value)
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
