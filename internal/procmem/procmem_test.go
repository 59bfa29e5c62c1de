package procmem

import (
	"runtime"
	"runtime/debug"
	"testing"
)

// TestPeakReset: on Linux the peak is at least 64 MiB higher while a 64 MiB
// buffer is resident than after freeing it and resetting the peak.
func TestPeakReset(t *testing.T) {
	if runtime.GOOS != "linux" {
		if PeakRSS() != 0 || ResetPeak() {
			t.Errorf("off Linux: got peak %d and reset %v, want 0 and false", PeakRSS(), ResetPeak())
		}
		t.Skip("SKIPPED: reading and resetting the peak RSS needs Linux's /proc")
	}
	buf := make([]byte, 64<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	high := PeakRSS()
	runtime.KeepAlive(buf)
	buf = nil
	runtime.GC()
	debug.FreeOSMemory()
	if !ResetPeak() {
		t.Fatal("ResetPeak: /proc/self/clear_refs not writable")
	}
	low := PeakRSS()
	if high <= 0 || low <= 0 || high-low < 48<<20 {
		t.Errorf("peak RSS: %d bytes with the buffer resident, %d after freeing it and the reset; want a drop of about 64 MiB", high, low)
	}
}
