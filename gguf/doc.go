// Package gguf reads GGUF files (versions 2 and 3, little-endian), the
// format of llama.cpp, converts their tensors to MLX's form, and writes
// version-3 files (Write streams tensor by tensor, so a file larger than
// memory can be written; WriteFile and Encode take the tensors' bytes in
// memory).
//
// A GGUF file is: the magic "GGUF", a uint32 version, a uint64 tensor count
// and a uint64 metadata count; the metadata key/value pairs (a key is a
// uint64-length string, a value a uint32 type tag and its payload; arrays
// carry an element type and a uint64 count and may nest); one info per
// tensor (name, uint32 dimension count, uint64 dimensions ne[0..n), the
// innermost first, uint32 ggml type, uint64 offset into the data section);
// padding to general.alignment (32 when absent); the data section. Open
// checks every length, count and offset against the file and memory-maps
// it; nothing in a bad file panics, and every error names the file and,
// where there is one, the key or tensor.
//
// Shapes: TensorInfo.Shape is row-major (numpy/MLX order), the reverse of
// GGUF's ne, so a matrix stored with ne = [in, out] has Shape [out, in].
//
// Conversion (Convert), each exact:
//
//   - F32, F16, BF16: kept as they are (same bytes).
//   - Q4_0 (x = d·(q−8)): 4-bit affine, group 32, scale d, bias −8d.
//   - Q4_1 (x = d·q + m): 4-bit affine, group 32, scale d, bias m.
//   - Q8_0 (x = d·q, q int8): 8-bit affine, group 32, unsigned code q+128,
//     scale d, bias −128d.
//
// Scales and biases are stored in F16, the dtype d and m have in the file
// (as MLX's own GGUF loader does), so they are the file's bits. −8d and
// −128d are exact in F16 (multiplication by a power of two) unless they
// overflow F16's range (|d| > 8188 resp. |d| > 511.75); a tensor where that
// happens gets F32 scales and biases instead, which are exact. That the
// affine form is exact means scale·q + bias equals llama.cpp's value as a
// real number; a backend evaluating scale·q + bias in F32 gets it exactly
// (the products have at most 11+8 significant bits).
//
// K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) have 256-element super-blocks
// with quantized sub-block scales that MLX's affine format cannot hold, so
// they are dequantized to F32 with llama.cpp's dequantize_row_* formulas,
// each float32 operation rounded separately as llama.cpp's reference C
// computes them (no fused multiply-add), and kept unquantized. Any other
// type is an error naming the tensor and the type.
package gguf
