package minicpm5

// Test helpers for the external test package minicpm5_test, which can
// import conformance (and its tolerance table) where this package's own
// tests cannot: conformance imports minicpm5.
var (
	Checkpoints = checkpoints
	NewCPU      = newCPU
	LoadModel   = load
	Host        = host
	Step        = step
	Release     = release
	Prompt      = prompt
)
