//go:build !unix

package bench

import "os"

// maxRSS is unknown off unix: 0.
func maxRSS(*os.ProcessState) int64 { return 0 }
