package kernel

// Bit packing of MLX's affine format (mlx/ops.cpp pack_and_quantize, mlx/backend/cpu/quantized.cpp quantize): a row of cols
// codes of `bits` bits each is one little-endian bit stream, LSB first.
// Code i occupies bits [i*bits, (i+1)*bits) of the row, so for bits 2, 4, 8
// code j of a word sits at bit j*bits, and for 3, 5, 6 codes straddle words.
// Because the words are little-endian, bit p of the stream is bit p%32 of
// word p/32. A row takes cols*bits/32 words.

// validBits reports whether bits is one of MLX's affine widths.
func validBits(bits int) bool {
	switch bits {
	case 2, 3, 4, 5, 6, 8:
		return true
	}
	return false
}

// checkQuant panics unless bits, groupSize and cols fit MLX's affine format.
func checkQuant(kernel string, cols, groupSize, bits int) {
	check(validBits(bits), kernel, "bits %d, want 2, 3, 4, 5, 6 or 8", bits)
	check(groupSize == 32 || groupSize == 64 || groupSize == 128, kernel, "group size %d, want 32, 64 or 128", groupSize)
	check(cols > 0 && cols%groupSize == 0, kernel, "%d columns is not a positive multiple of the group size %d", cols, groupSize)
}

// WordsPerRow returns the uint32 words of one packed row of cols codes.
func WordsPerRow(cols, bits int) int { return cols * bits / 32 }

// codeAt returns code i of a packed row (the plain reference extraction).
func codeAt(row []uint32, i, bits int) uint32 {
	p := i * bits
	w, sh := p/32, uint(p%32)
	v := uint64(row[w]) >> sh
	if int(sh)+bits > 32 {
		v |= uint64(row[w+1]) << (32 - sh)
	}
	return uint32(v) & (1<<bits - 1)
}

// UnpackRow writes the cols codes of one packed row wqRow (cols*bits/32
// words) to codes[:cols].
func UnpackRow(codes []uint8, wqRow []uint32, cols, bits int) {
	check(validBits(bits), "UnpackRow", "bits %d, want 2, 3, 4, 5, 6 or 8", bits)
	check(cols*bits%32 == 0, "UnpackRow", "%d columns of %d bits do not fill whole words", cols, bits)
	need("UnpackRow", "codes", len(codes), cols)
	need("UnpackRow", "wqRow", len(wqRow), WordsPerRow(cols, bits))
	for i := range cols {
		codes[i] = uint8(codeAt(wqRow, i, bits))
	}
}

// PackRow packs codes[:cols] (each below 2^bits) into wqRow (cols*bits/32
// words), the inverse of UnpackRow. Codes are masked to bits bits.
func PackRow(wqRow []uint32, codes []uint8, cols, bits int) {
	check(validBits(bits), "PackRow", "bits %d, want 2, 3, 4, 5, 6 or 8", bits)
	check(cols*bits%32 == 0, "PackRow", "%d columns of %d bits do not fill whole words", cols, bits)
	need("PackRow", "codes", len(codes), cols)
	need("PackRow", "wqRow", len(wqRow), WordsPerRow(cols, bits))
	packCodes(wqRow[:WordsPerRow(cols, bits)], func(i int) uint32 { return uint32(codes[i]) }, cols, bits)
}

// packCodes writes the codes code(0..cols-1) into row as one LSB-first bit stream.
func packCodes(row []uint32, code func(i int) uint32, cols, bits int) {
	clear(row)
	mask := uint64(1)<<bits - 1
	for i := range cols {
		p := i * bits
		w, sh := p/32, uint(p%32)
		v := (uint64(code(i)) & mask) << sh
		row[w] |= uint32(v)
		if hi := uint32(v >> 32); hi != 0 {
			row[w+1] |= hi
		}
	}
}

// decodeGroup writes the n codes of a packed run starting at word 0 of src
// to dst[:n] as float32 (the fast extraction; n*bits is a multiple of 32).
func decodeGroup(dst []float32, src []uint32, n, bits int) {
	dst = dst[:n]
	switch bits {
	case 4:
		src = src[:n/8]
		for j, w := range src {
			d := dst[8*j : 8*j+8]
			d[0] = float32(w & 15)
			d[1] = float32(w >> 4 & 15)
			d[2] = float32(w >> 8 & 15)
			d[3] = float32(w >> 12 & 15)
			d[4] = float32(w >> 16 & 15)
			d[5] = float32(w >> 20 & 15)
			d[6] = float32(w >> 24 & 15)
			d[7] = float32(w >> 28)
		}
	case 8:
		src = src[:n/4]
		for j, w := range src {
			d := dst[4*j : 4*j+4]
			d[0] = float32(w & 255)
			d[1] = float32(w >> 8 & 255)
			d[2] = float32(w >> 16 & 255)
			d[3] = float32(w >> 24)
		}
	case 2:
		src = src[:n/16]
		for j, w := range src {
			d := dst[16*j : 16*j+16]
			for t := range d {
				d[t] = float32(w >> (2 * t) & 3)
			}
		}
	default: // 3, 5, 6: a 64-bit window slides over the words
		mask := uint64(1)<<bits - 1
		var acc uint64
		have := 0
		wi := 0
		for i := range dst {
			if have < bits {
				acc |= uint64(src[wi]) << have
				wi++
				have += 32
			}
			dst[i] = float32(acc & mask)
			acc >>= bits
			have -= bits
		}
	}
}
