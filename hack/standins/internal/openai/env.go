package openai

import (
	"os"
	"strconv"
)

// FaultsFromEnv reads STANDIN_UNHEALTHY, STANDIN_HANG (1/true) and STANDIN_TOKEN_DELAY_MS.
func FaultsFromEnv() Faults {
	delay, _ := strconv.Atoi(os.Getenv("STANDIN_TOKEN_DELAY_MS"))
	return Faults{Unhealthy: envBool("STANDIN_UNHEALTHY"), Hang: envBool("STANDIN_HANG"), TokenDelayMs: delay}
}

func envBool(name string) bool {
	v, _ := strconv.ParseBool(os.Getenv(name))
	return v
}
