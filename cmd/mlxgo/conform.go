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
of its class. Prints a table with one row per op: its case count, then cases
passed / total per backend; without --run, then every backend op method
(conformance.MethodOps) with its case count. Exits 1 if anything fails.
--json prints {"ops": [{"op", "cases", "backends": {NAME: {"pass",
"total"}}}], "methods": [{"interface", "method", "ops": [{"op", "cases"}],
"cases"}] (without --run only), "results": [every output's verdict]}.

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
	cases, results, err := runConformance(dir, names, *run, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "mlxgo conform:", err)
		return 2
	}
	var methods []conformance.MethodCoverage
	if *run == "" {
		methods = conformance.Coverage(cases)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", " ")
		report := conformReport{Ops: opSummary(results), Methods: methods, Results: results}
		if err := enc.Encode(report); err != nil {
			fmt.Fprintln(stderr, "mlxgo conform:", err)
			return 2
		}
	} else {
		printConformTable(stdout, results, names, *verbose)
		printCoverage(stdout, methods)
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

// runConformance runs the cases of dir that match pattern on every named
// backend and returns the cases with the results.
func runConformance(dir string, names []string, pattern string, progress io.Writer) ([]*conformance.Case, []conformance.Result, error) {
	cases, err := conformance.Load(dir)
	if err != nil {
		return nil, nil, err
	}
	cases = conformance.Filter(cases, pattern)
	if len(cases) == 0 {
		return nil, nil, fmt.Errorf("no cases in %s match %q", dir, pattern)
	}
	results, err := conformCases(cases, names, progress)
	return cases, results, err
}

// conformReport is what --json prints.
type conformReport struct {
	Ops     []opRow                      `json:"ops"`
	Methods []conformance.MethodCoverage `json:"methods,omitempty"`
	Results []conformance.Result         `json:"results"`
}

// opRow is one op (or model phase): its case count and, per backend, the
// cases that passed (every output passed) out of those run.
type opRow struct {
	Op       string                `json:"op"`
	Cases    int                   `json:"cases"`
	Backends map[string]*passCount `json:"backends"`
}

type passCount struct {
	Pass  int `json:"pass"`
	Total int `json:"total"`
}

// opSummary groups results by op (opOf) and case, sorted by op.
func opSummary(results []conformance.Result) []opRow {
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
	rows := map[string]*opRow{}
	casesOf := map[string]map[string]bool{}
	for _, k := range order {
		op := opOf(k[1])
		row := rows[op]
		if row == nil {
			row = &opRow{Op: op, Backends: map[string]*passCount{}}
			rows[op] = row
			casesOf[op] = map[string]bool{}
		}
		casesOf[op][k[1]] = true
		c := row.Backends[k[0]]
		if c == nil {
			c = &passCount{}
			row.Backends[k[0]] = c
		}
		c.Total++
		if caseOK[k] {
			c.Pass++
		}
	}
	out := make([]opRow, 0, len(rows))
	for op, row := range rows {
		row.Cases = len(casesOf[op])
		out = append(out, *row)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Op < out[j].Op })
	return out
}

// printCoverage lists every backend op method with its fixture ops and case
// count, and says which methods have none.
func printCoverage(w io.Writer, methods []conformance.MethodCoverage) {
	if len(methods) == 0 {
		return
	}
	fmt.Fprintln(w, "\nbackend op methods (fixture ops: cases)")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	var missing []string
	for _, m := range methods {
		ops := make([]string, len(m.Ops))
		for i, o := range m.Ops {
			ops[i] = fmt.Sprintf("%s %d", o.Op, o.Cases)
		}
		fmt.Fprintf(tw, "%s.%s\t%d\t%s\n", m.Interface, m.Method, m.Cases, strings.Join(ops, ", "))
		if m.Cases == 0 {
			missing = append(missing, m.Interface+"."+m.Method)
		}
	}
	tw.Flush()
	if len(missing) > 0 {
		fmt.Fprintf(w, "methods without a case: %s\n", strings.Join(missing, ", "))
	} else {
		fmt.Fprintf(w, "every one of the %d methods has a case\n", len(methods))
	}
}

// opOf groups a case under its op ("rope") or model phase ("model/prefill").
func opOf(caseName string) string {
	parts := strings.SplitN(caseName, "/", 4)
	if parts[0] == "model" && len(parts) >= 3 {
		return "model/" + parts[2]
	}
	return parts[0]
}

// printConformTable prints one row per op: its case count, then a column per
// backend with cases passed / total. A case passes when every output passes.
// Failures follow.
func printConformTable(w io.Writer, results []conformance.Result, names []string, verbose bool) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "op\tcases")
	for _, n := range names {
		fmt.Fprintf(tw, "\t%s", n)
	}
	fmt.Fprintln(tw)
	totals := map[string]*passCount{}
	ncases := 0
	for _, row := range opSummary(results) {
		fmt.Fprintf(tw, "%s\t%d", row.Op, row.Cases)
		ncases += row.Cases
		for _, n := range names {
			c := row.Backends[n]
			if c == nil {
				fmt.Fprint(tw, "\t-")
				continue
			}
			mark := "ok"
			if c.Pass != c.Total {
				mark = "FAIL"
			}
			fmt.Fprintf(tw, "\t%d/%d %s", c.Pass, c.Total, mark)
			if totals[n] == nil {
				totals[n] = &passCount{}
			}
			totals[n].Pass += c.Pass
			totals[n].Total += c.Total
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprintf(tw, "TOTAL\t%d", ncases)
	for _, n := range names {
		if c := totals[n]; c != nil {
			fmt.Fprintf(tw, "\t%d/%d", c.Pass, c.Total)
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
