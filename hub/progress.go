package hub

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// progress shows a download: on a terminal one bar per file, redrawn in
// place at most ten times a second; elsewhere one plain line per file when
// it is done, and one every 10 s while a long one runs. All output goes to
// w (stderr in mlxgo); a nil w shows nothing.
type progress struct {
	w          io.Writer
	term       bool
	repo       string
	n          int
	i          int
	file       string
	size, have int64 // size -1: unknown
	from       int64 // bytes already there when this file began
	start      time.Time
	drawn      time.Time
}

func newProgress(w io.Writer, term bool, repo string, n int) *progress {
	return &progress{w: w, term: term, repo: repo, n: n}
}

func (p *progress) head() string {
	return fmt.Sprintf("[%d/%d] %s", p.i+1, p.n, p.file)
}

// cached reports a file the cache already had.
func (p *progress) cached(i int, file string) {
	if p.w == nil {
		return
	}
	p.i, p.file = i, file
	fmt.Fprintf(p.w, "%s: in the cache\n", p.head())
}

// begin starts a file of size bytes (-1: unknown) of which have are there.
func (p *progress) begin(i int, file string, size, have int64) {
	p.i, p.file, p.size, p.have, p.from = i, file, size, have, have
	p.start = time.Now()
	p.drawn = p.start
	if p.w != nil && p.term {
		p.draw()
	}
}

// plainEvery is how often a long download prints a line off a terminal.
const plainEvery = 10 * time.Second

// add counts n more bytes.
func (p *progress) add(n int64) {
	p.have += n
	if p.w == nil {
		return
	}
	switch since := time.Since(p.drawn); {
	case p.term && since >= 100*time.Millisecond:
		p.draw()
	case !p.term && since >= plainEvery:
		p.drawn = time.Now()
		fmt.Fprintf(p.w, "%s: %s of %s\n", p.head(), FormatSize(p.have), sizeText(p.size))
	}
}

// restart notes that the server sent the file from its start again.
func (p *progress) restart() { p.have, p.from = 0, 0 }

// done ends the file's line.
func (p *progress) done() {
	if p.w == nil {
		return
	}
	secs := time.Since(p.start).Seconds()
	got := p.have - p.from
	line := fmt.Sprintf("%s: %s downloaded in %.1fs", p.head(), FormatSize(p.have), secs)
	if p.from > 0 {
		line = fmt.Sprintf("%s: %s (resumed at %s) in %.1fs", p.head(), FormatSize(p.have), FormatSize(p.from), secs)
	}
	if secs > 0 && got > 0 {
		line += fmt.Sprintf(", %s/s", FormatSize(int64(float64(got)/secs)))
	}
	if p.term {
		fmt.Fprintf(p.w, "\r\x1b[K%s\n", line)
	} else {
		fmt.Fprintln(p.w, line)
	}
}

// fail ends a bar that will not complete.
func (p *progress) fail() {
	if p.w != nil && p.term {
		fmt.Fprintln(p.w)
	}
}

// draw redraws the bar: [i/n] file  45% |#########           | 12.3 MB / 27.0 MB
func (p *progress) draw() {
	p.drawn = time.Now()
	if p.size <= 0 {
		fmt.Fprintf(p.w, "\r\x1b[K%s  %s", p.head(), FormatSize(p.have))
		return
	}
	const width = 24
	frac := float64(p.have) / float64(p.size)
	fill := min(int(frac*width), width)
	fmt.Fprintf(p.w, "\r\x1b[K%s %3.0f%% |%s%s| %s / %s", p.head(), 100*frac,
		strings.Repeat("#", fill), strings.Repeat(" ", width-fill), FormatSize(p.have), FormatSize(p.size))
}

// FormatSize writes n bytes in decimal units (B, kB, MB, GB).
func FormatSize(n int64) string {
	switch {
	case n < 1000:
		return fmt.Sprintf("%d B", n)
	case n < 1000_000:
		return fmt.Sprintf("%.1f kB", float64(n)/1e3)
	case n < 1000_000_000:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	}
	return fmt.Sprintf("%.2f GB", float64(n)/1e9)
}

// sizeText is byteText, or "an unknown size" for -1.
func sizeText(n int64) string {
	if n < 0 {
		return "an unknown size"
	}
	return FormatSize(n)
}
