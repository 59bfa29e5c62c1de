// Package mmap maps a whole file read-only into memory, for the readers of
// safetensors and GGUF files (where mmap is not wired up it reads the file
// into an 8-byte-aligned buffer instead), gives a mapping's pages back to
// the operating system (Release), and allocates large buffers advised for
// transparent huge pages (AllocHuge, on Linux), and small ones from shared
// chunks of such memory (Arena).
package mmap
