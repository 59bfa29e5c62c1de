package bench

import (
	"fmt"
	"strings"
)

// rows returns every configuration of the result with its label: the
// configuration's name, or in a matrix run "checkpoint / configuration".
func (r *Result) rows() (labels []string, cs []*ConfigResult) {
	if len(r.Checkpoints) == 0 {
		for i := range r.Configs {
			labels, cs = append(labels, r.Configs[i].Name), append(cs, &r.Configs[i])
		}
		return labels, cs
	}
	for k := range r.Checkpoints {
		ck := &r.Checkpoints[k]
		for i := range ck.Configs {
			labels, cs = append(labels, ck.Name+" / "+ck.Configs[i].Name), append(cs, &ck.Configs[i])
		}
	}
	return labels, cs
}

// Failed reports whether any configuration of the result failed.
func (r *Result) Failed() bool {
	_, cs := r.rows()
	for _, c := range cs {
		if c.Err != "" {
			return true
		}
	}
	return false
}

// MatrixMarkdown renders a matrix run as one table, a row per checkpoint and
// configuration: prefill tok/s per prompt length, decode tok/s, the ratios
// to the llama.cpp row of the same checkpoint (its GGUF twin), decode as a
// fraction of the bandwidth limit, and the size of what the row reads (the
// MLX checkpoint's safetensors, or the GGUF file for llama.cpp); then the
// notes: machine, bandwidth, each checkpoint's files and per-token bytes,
// why a checkpoint has no ratios, and how every value is computed.
func (r *Result) MatrixMarkdown() string {
	var b strings.Builder
	lens := r.promptLens()
	head := []string{"checkpoint", "config"}
	for _, p := range lens {
		head = append(head, fmt.Sprintf("prefill %d tok/s", p))
	}
	head = append(head, "decode tok/s", "×llama.cpp decode / prefill", "decode / BW limit", "size MB")
	b.WriteString("| " + strings.Join(head, " | ") + " |\n|")
	for range head {
		b.WriteString(" --- |")
	}
	b.WriteString("\n")
	noLlama := false
	for k := range r.Checkpoints {
		ck := &r.Checkpoints[k]
		llama := ck.find("llama.cpp")
		for i := range ck.Configs {
			c := &ck.Configs[i]
			name := ""
			if i == 0 {
				name = ck.Name
			}
			if c.Err != "" {
				fmt.Fprintf(&b, "| %s | %s | failed: %s |\n", name, c.Name, strings.ReplaceAll(c.Err, "|", "/"))
				continue
			}
			row := []string{name, c.Name}
			for _, p := range lens {
				pr, _ := c.Prompt(p)
				row = append(row, pr.PrefillTPS.Format(-1))
			}
			rat := "—"
			switch {
			case llama == nil:
				noLlama = true
			case llama != c:
				rat = decodeRatio(c, llama) + " / " + prefillRatio(c, llama)
			}
			frac := "—"
			switch f := 100 * c.BandwidthFraction; {
			case f >= 0.5:
				frac = fmt.Sprintf("%.0f%%", f)
			case f > 0:
				frac = "<1%"
			}
			size := ck.CheckpointBytes
			if c.Engine == "llama.cpp" {
				size = ck.GGUFBytes
			}
			row = append(row, c.Decode.Format(-1), rat, frac, megabytes(size))
			b.WriteString("| " + strings.Join(row, " | ") + " |\n")
		}
		if len(ck.Configs) == 0 {
			fmt.Fprintf(&b, "| %s | (nothing measured) |\n", ck.Name)
		}
	}
	fmt.Fprintf(&b, "\nMachine: %s, %d cores, %s; load average %s at start, %s at end.\n", r.CPU, r.Cores, r.GoVersion, r.LoadAvgStart, r.LoadAvgEnd)
	if len(r.BandwidthProbes) > 1 {
		st := NewStat(r.BandwidthProbes)
		fmt.Fprintf(&b, "Read bandwidth: %.1f GB/s at the start (%s; the limits under Checkpoints use it), and before each checkpoint in every round "+
			"%d readings, median %.1f, range %.1f–%.1f GB/s; a row's decode / BW limit is the median over the rounds of its decode tok/s × "+
			"the bytes one decode step reads of its weights / the reading before it. ",
			r.BandwidthGBs, r.BandwidthNote, st.N, st.Median, st.Min, st.Max)
	} else {
		fmt.Fprintf(&b, "Read bandwidth: %.1f GB/s (%s), measured once for the run. "+
			"Decode / BW limit = decode tok/s × the bytes one decode step reads of the row's weights / bandwidth. ",
			r.BandwidthGBs, r.BandwidthNote)
	}
	b.WriteString("×llama.cpp: against the llama.cpp row of the same checkpoint (its GGUF twin); the prefill ratio at the longest prompt both measured.")
	if r.Rounds > 1 {
		b.WriteString(" Where both rows have every round, the ratio is the median of the rounds' own ratios (each round's medians; " +
			"a checkpoint's configurations ran back to back within a round), their range in parentheses.")
	}
	b.WriteString("\n")
	if noLlama {
		b.WriteString("×llama.cpp is — on every row of a checkpoint without a llama.cpp row (why: under Checkpoints).\n")
	}
	b.WriteString("\nCheckpoints:\n")
	for k := range r.Checkpoints {
		ck := &r.Checkpoints[k]
		fmt.Fprintf(&b, "- %s: %s (%s MB of safetensors", ck.Name, ck.Model, megabytes(ck.CheckpointBytes))
		var mlxBytes, ggufBytes int64
		var packed []string // the configurations that read packed weights
		for _, c := range ck.Configs {
			switch {
			case c.Engine == "llama.cpp":
				ggufBytes = max(ggufBytes, c.WeightBytesPerToken)
			case c.PackedBytes > 0:
				packed = append(packed, fmt.Sprintf("; %s packed%s", c.Name, r.limit(c.WeightBytesPerToken)))
			default:
				mlxBytes = max(mlxBytes, c.WeightBytesPerToken)
			}
		}
		b.WriteString(r.limit(mlxBytes) + strings.Join(packed, "") + ")")
		switch {
		case ck.GGUF != "" && ck.GGUFBytes > 0:
			fmt.Fprintf(&b, "; GGUF twin %s (%s MB%s)", ck.GGUF, megabytes(ck.GGUFBytes), r.limit(ggufBytes))
		case ck.GGUF != "":
			fmt.Fprintf(&b, "; GGUF twin %s (not present)", ck.GGUF)
		}
		if ck.NoLlama != "" {
			fmt.Fprintf(&b, "; no llama.cpp row: %s", ck.NoLlama)
		}
		b.WriteString(".\n")
	}
	b.WriteString("\n" + valuesNote + " " + decodeNote + " Each configuration ran in its own process")
	if r.Rounds > 1 {
		fmt.Fprintf(&b, "; the repetitions were split over %d rounds, each a pass over every checkpoint and configuration in a fresh process with its own warm-up", r.Rounds)
	} else {
		b.WriteString("; the configurations of a checkpoint ran back to back")
	}
	b.WriteString(".\n")
	// One line per distinct plan, naming the rows that ran it.
	var plans []string
	who := map[string][]string{}
	labels, cs := r.rows()
	for i, c := range cs {
		if c.Err != "" {
			continue
		}
		plan := fmt.Sprintf("%d warm-up + %d reps, %d decode tokens", c.Warmup, c.Reps, c.DecodeTokens)
		if c.Note != "" {
			plan += "; " + c.Note
		}
		if _, ok := who[plan]; !ok {
			plans = append(plans, plan)
		}
		who[plan] = append(who[plan], labels[i])
	}
	for _, p := range plans {
		if len(plans) == 1 {
			fmt.Fprintf(&b, "- Every row: %s.\n", p)
		} else {
			fmt.Fprintf(&b, "- %s: %s.\n", strings.Join(who[p], ", "), p)
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "- Note: %s.\n", n)
	}
	return b.String()
}

// limit describes the bandwidth limit of reading perToken bytes per
// decode step ("" when not known).
func (r *Result) limit(perToken int64) string {
	if perToken <= 0 {
		return ""
	}
	s := fmt.Sprintf(", reads %s MB/token", megabytes(perToken))
	if r.BandwidthGBs > 0 {
		s += fmt.Sprintf(" → limit %.1f tok/s", r.BandwidthGBs*1e9/float64(perToken))
	}
	return s
}

// megabytes formats n bytes in MB (10^6), "—" for 0.
func megabytes(n int64) string {
	switch {
	case n <= 0:
		return "—"
	case n < 10e6:
		return fmt.Sprintf("%.2f", float64(n)/1e6)
	}
	return fmt.Sprintf("%.0f", float64(n)/1e6)
}
