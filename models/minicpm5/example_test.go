package minicpm5_test

import (
	"fmt"
	"log"

	"github.com/mlxgo/mlxgo/backend"
	_ "github.com/mlxgo/mlxgo/backend/cpu"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/models/minicpm5"
)

// Example embeds MiniCPM5 inference in a Go program: open a backend, load a
// checkpoint directory (weights stay memory-mapped and quantized), generate.
func Example() {
	b, err := backend.Open("cpu", backend.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	m, err := minicpm5.Load(b, "../../conformance/testdata/models/optiq-f32")
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	streamed := 0
	res, err := generate.Generate(m, []int32{1, 2, 3}, generate.Options{MaxTokens: 8},
		func(t generate.Token) bool { streamed++; return true })
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(res.Tokens), "tokens,", streamed, "streamed, finish:", res.FinishReason)
	// Output: 8 tokens, 8 streamed, finish: length
}
