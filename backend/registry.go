package backend

import (
	"fmt"
	"sort"
	"sync"
)

// OpenFunc opens a backend with the given options.
type OpenFunc func(Options) (Backend, error)

var (
	registryMu sync.Mutex
	registry   = map[string]OpenFunc{}
)

// Register makes a backend available by name. Backends call it from init.
// It panics if name is empty or already registered.
func Register(name string, open OpenFunc) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if name == "" || open == nil {
		panic("backend: Register with empty name or nil open")
	}
	if _, dup := registry[name]; dup {
		panic("backend: Register called twice for " + name)
	}
	registry[name] = open
}

// Names returns the registered backends, sorted.
func Names() []string {
	registryMu.Lock()
	defer registryMu.Unlock()
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Open opens the named backend. An unknown name is an error that lists the
// backends compiled in.
func Open(name string, opts Options) (Backend, error) {
	registryMu.Lock()
	open, ok := registry[name]
	registryMu.Unlock()
	if !ok {
		return nil, fmt.Errorf("backend %q is not compiled in (available: %v; the mlx backend needs `-tags mlx`)", name, Names())
	}
	return open(opts)
}
