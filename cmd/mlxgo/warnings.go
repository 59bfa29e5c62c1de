package main

import (
	"fmt"
	"io"
)

// PrintWarnings writes each distinct warning once, in order, as "warning: ..." lines: what
// checkpoint.Checkpoint.Warnings (or checkpoint.Config.Warnings) collected while loading a
// model. Every command that loads a model calls it once after loading (issue 19: the
// warnings were collected and never shown).
func PrintWarnings(w io.Writer, warnings []string) {
	seen := map[string]bool{}
	for _, s := range warnings {
		if seen[s] {
			continue
		}
		seen[s] = true
		fmt.Fprintln(w, "warning:", s)
	}
}
