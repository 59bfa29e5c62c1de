package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/conformance"
)

const conformUsage = `usage: mlxgo conform [--backend NAME] [--fixtures DIR] [--run PATTERN] [--json] [--verbose]

Runs the conformance suite: every fixture on every backend compiled in (or
the one named), each output held to the oracle (mlx_lm) under the tolerance
of its class. Prints a table per op and backend; exits 1 if anything fails.

Examples:
  mlxgo conform
  mlxgo conform --backend cpu --run rope,rms_norm
  mlxgo conform --fixtures /path/to/fixtures --json > report.json
`

func cmdConform(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("conform", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, conformUsage) }
	backendName := fs.String("backend", "", "run only this backend (default: every backend compiled in)")
	fixtures := fs.String("fixtures", "", "fixture directory holding manifest.json (default: the repository's conformance/testdata)")
	run := fs.String("run", "", "only cases whose name contains one of these comma-separated substrings")
	asJSON := fs.Bool("json", false, "print every result as JSON instead of the table")
	verbose := fs.Bool("verbose", false, "print every failing output, not only the summary")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "mlxgo conform: unexpected argument %q\n%s", fs.Arg(0), conformUsage)
		return 2
	}
	dir, err := fixtureDir(*fixtures)
	if err != nil {
		fmt.Fprintln(stderr, "mlxgo conform:", err)
		return 2
	}
	names := backend.Names()
	if *backendName != "" {
		names = []string{*backendName}
	}
	results, err := runConformance(dir, names, *run, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "mlxgo conform:", err)
		return 2
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", " ")
		if err := enc.Encode(results); err != nil {
			fmt.Fprintln(stderr, "mlxgo conform:", err)
			return 2
		}
	} else {
		printConformTable(stdout, results, names, *verbose)
	}
	for _, r := range results {
		if !r.Pass {
			return 1
		}
	}
	return 0
}

// fixtureDir resolves --fixtures, defaulting to conformance/testdata found
// from the working directory upwards.
func fixtureDir(flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	if d, ok := findUp("conformance/testdata/manifest.json"); ok {
		return d[:len(d)-len("/manifest.json")], nil
	}
	return "", fmt.Errorf("no fixtures: pass --fixtures DIR (a directory with manifest.json), or run inside the mlxgo repository")
}

func runConformance(dir string, names []string, pattern string, progress io.Writer) ([]conformance.Result, error) {
	cases, err := conformance.Load(dir)
	if err != nil {
		return nil, err
	}
	cases = conformance.Filter(cases, pattern)
	if len(cases) == 0 {
		return nil, fmt.Errorf("no cases in %s match %q", dir, pattern)
	}
	return conformCases(cases, names, progress)
}

// opOf groups a case under its op ("rope") or model phase ("model/prefill").
func opOf(caseName string) string {
	parts := strings.SplitN(caseName, "/", 4)
	if parts[0] == "model" && len(parts) >= 3 {
		return "model/" + parts[2]
	}
	return parts[0]
}

// printConformTable prints one row per op with a column per backend: cases
// passed / total. A case passes when every output passes. Failures follow.
func printConformTable(w io.Writer, results []conformance.Result, names []string, verbose bool) {
	type cell struct{ pass, total int }
	caseOK := map[[2]string]bool{}
	var order [][2]string
	for _, r := range results {
		k := [2]string{r.Backend, r.Case}
		ok, seen := caseOK[k]
		if !seen {
			order = append(order, k)
			ok = true
		}
		caseOK[k] = ok && r.Pass
	}
	cells := map[string]map[string]*cell{}
	for _, k := range order {
		op := opOf(k[1])
		if cells[op] == nil {
			cells[op] = map[string]*cell{}
		}
		c := cells[op][k[0]]
		if c == nil {
			c = &cell{}
			cells[op][k[0]] = c
		}
		c.total++
		if caseOK[k] {
			c.pass++
		}
	}
	var ops []string
	for op := range cells {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "op")
	for _, n := range names {
		fmt.Fprintf(tw, "\t%s", n)
	}
	fmt.Fprintln(tw)
	totals := map[string]*cell{}
	for _, op := range ops {
		fmt.Fprint(tw, op)
		for _, n := range names {
			c := cells[op][n]
			if c == nil {
				fmt.Fprint(tw, "\t-")
				continue
			}
			mark := "ok"
			if c.pass != c.total {
				mark = "FAIL"
			}
			fmt.Fprintf(tw, "\t%d/%d %s", c.pass, c.total, mark)
			if totals[n] == nil {
				totals[n] = &cell{}
			}
			totals[n].pass += c.pass
			totals[n].total += c.total
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprint(tw, "TOTAL")
	for _, n := range names {
		if c := totals[n]; c != nil {
			fmt.Fprintf(tw, "\t%d/%d", c.pass, c.total)
		} else {
			fmt.Fprint(tw, "\t-")
		}
	}
	fmt.Fprintln(tw)
	tw.Flush()
	nfail := 0
	for _, r := range results {
		if !r.Pass {
			nfail++
			if verbose || nfail <= 20 {
				fmt.Fprintln(w, r.String())
			}
		}
	}
	if nfail > 20 && !verbose {
		fmt.Fprintf(w, "... and %d more failing outputs (--verbose lists all)\n", nfail-20)
	}
}

// findUp looks for rel in the working directory and its parents.
func findUp(rel string) (string, bool) {
	dir, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for {
		p := dir + "/" + rel
		if _, err := os.Stat(p); err == nil {
			return p, true
		}
		parent := dir[:max(strings.LastIndex(dir, "/"), 0)]
		if parent == dir || parent == "" {
			return "", false
		}
		dir = parent
	}
}
