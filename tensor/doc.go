// Package tensor holds mlxgo's host-side tensors and the files they come from.
//
// It provides:
//
//   - DType and Shape, with the safetensors dtype names and MLX's spellings;
//   - Dense, a row-major little-endian host tensor whose Data may alias a
//     read-only memory-mapped file, with zero-copy typed views and converting
//     copies;
//   - scalar conversions between float32 and bfloat16/float16 that match MLX's
//     CPU conversions bit for bit (round to nearest even; see convert.go for
//     the NaN conventions);
//   - a safetensors reader (memory-mapped, zero-copy where alignment allows,
//     strict validation with errors naming the file and tensor), a writer, and
//     sharded checkpoint directories cross-checked against their index;
//   - error metrics used by the conformance suite (max abs/rel error, ULPs,
//     cosine, NMSE, argmax agreement, top-k overlap, KL divergence).
//
// Typed views (Float32s, Uint16s, ...) reinterpret Data in place and so assume
// a little-endian host and an element-aligned Data pointer; they panic
// otherwise. Everything that copies (ToFloat32, Convert, ...) decodes bytes
// explicitly and works at any alignment.
package tensor
