// Package bench is mlxgo's benchmark harness, which reports speed as ratios
// measured side by side in one run: on one checkpoint and the same prompt ids it runs, in one go,
// the Go CPU backend in each precision, the Go MLX backend when compiled in,
// mlx_lm itself (bench/mlx_lm_driver.py with the project virtualenv), and
// llama.cpp's llama-bench on the checkpoint's GGUF twin when given its path.
//
// Every configuration runs in a child process of its own (`mlxgo bench
// --child` for the Go backends), so its peak resident set is its own (the
// child's ru_maxrss). Each child loads the model, runs warm-up runs and then
// timed repetitions, and reports raw times; the harness computes every
// statistic the same way for every engine: median, min and max over the
// repetitions of
//
//   - prefill tok/s at each prompt length P: P / time to first token (the
//     prompt and the first decode step, mlx_lm's prompt_tps; llama-bench's
//     ppP is prompt processing alone);
//   - decode tok/s: (N-1) / (time of token N - time of token 1) for N new
//     tokens after the first prompt length (llama-bench: tgN from an empty
//     context);
//   - time to first token, load time, peak RSS.
//
// It also measures the machine's memory read bandwidth (ReadBandwidth) and
// reports each decode speed as a fraction of the bandwidth limit: bandwidth
// / weight bytes read per token.
//
// With Options.Checkpoints a run is a matrix (`mlxgo bench --models`): the
// same configurations on each checkpoint, the bandwidth measured once, one
// table (Result.MatrixMarkdown) with each row's ratios to the llama.cpp row
// of its own checkpoint (its GGUF twin), and one JSON file for the run.
// Options.Rounds splits the repetitions over passes over the whole matrix,
// so that a machine's changing load falls on every row alike.
//
// The files in this directory's _test.go are testing.B benchmarks of single
// ops at MiniCPM5-1B's shapes for every backend compiled in.
package bench
