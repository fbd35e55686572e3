//! Activations quantized to int8 blocks of 32, the other operand of every quantized product, as
//! llama.cpp quantizes them for each weight type ([`Activations`]): a scale per 32 values rounded
//! to f16 (`tile::activation_scale`), scalar and vectorized per instruction set with the same bits,
//! or one f32 scale per 256 values for the K-quants' matrices.

use crate::cpu::isa::Isa;
use crate::cpu::tile::{Q8Rows, activation_scale, inverse};
use crate::formats::{Activations, BLOCK};

/// Quantize `rows` (each `cols` wide, a multiple of 32) to int8 blocks: scale = max |x| / 127
/// (kept rounded to f16).
pub fn quantize_rows_q8(x: &[f32], cols: usize, out: &mut Q8Rows) {
    quantize_rows_q8_with(Isa::detect(), x, cols, out)
}

/// [`quantize_rows_q8`] with a given instruction set; every set gives the same bits (the vector
/// versions do the scalar one's f32 operations, lane by lane).
pub fn quantize_rows_q8_with(isa: Isa, x: &[f32], cols: usize, out: &mut Q8Rows) {
    quantize_activations(isa, Activations::Q8_0, x, cols, out)
}

/// Quantize `rows` (each `cols` wide, a multiple of `activations.span()`) as `activations` says.
pub fn quantize_activations(
    isa: Isa,
    activations: Activations,
    x: &[f32],
    cols: usize,
    out: &mut Q8Rows,
) {
    debug_assert_eq!(cols % activations.span(), 0);
    out.quants.clear();
    out.scales.clear();
    out.quants.reserve(x.len());
    out.scales.reserve(x.len() / BLOCK);
    out.activations = activations;
    match (activations, isa) {
        // Q8_K's rounding is the scalar loop's on every instruction set (it vectorizes as it is):
        // it is one pass over the K-quants' inputs, beside products that read 4-5 bits a weight.
        (Activations::Q8K, _) => quantize_q8k(x, out),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: both are only produced after detecting AVX2 and FMA.
        (_, Isa::Avx2 | Isa::Avx512Vnni) => unsafe { crate::cpu::avx2::quantize_q8(x, out) },
        #[cfg(target_arch = "wasm32")]
        (_, Isa::Simd128) => crate::cpu::simd128::quantize_q8(x, out),
        (_, Isa::Scalar) => quantize_q8_scalar(x, out),
    }
}

/// llama.cpp's `nearest_int`: `r` rounded to the nearest integer, ties to even, for |r| < 2^22
/// (adding 1.5 * 2^23 leaves the integer in the low mantissa bits). NaN gives 0.
#[inline(always)]
fn nearest(r: f32) -> i8 {
    (((r + 12_582_912.0).to_bits() & 0x007f_ffff) as i32 - 0x0040_0000) as i8
}

/// Blocks of 32 as llama.cpp's x86 Q8_0 and Q8_1 quantizers make them: `inverse = 127 / max |x|`,
/// codes `x * inverse` to the nearest, ties to even, and the scale `max |x| / 127` kept in f16.
/// The bits every vector version gives.
fn quantize_q8_scalar(x: &[f32], out: &mut Q8Rows) {
    for block in x.chunks_exact(BLOCK) {
        let amax = block.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let inv = inverse(amax);
        out.scales.push(activation_scale(amax / 127.0));
        out.quants.extend(block.iter().map(|&v| nearest(v * inv)));
    }
}

/// Super-blocks of 256 as llama.cpp's Q8_K (`quantize_row_q8_K_ref`, and its x86 repacked
/// version): one f32 scale `1 / inverse`, the same for the super-block's eight blocks. (llama.cpp
/// takes the inverse as `-127 / max` with the largest value's sign, and so codes and scale of the
/// opposite sign when that value is positive: the same products.)
fn quantize_q8k(x: &[f32], out: &mut Q8Rows) {
    for span in x.chunks_exact(Activations::Q8K.span()) {
        let amax = span.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let inv = inverse(amax);
        let scale = if inv > 0.0 { 1.0 / inv } else { 0.0 };
        out.scales
            .extend(std::iter::repeat_n(scale, span.len() / BLOCK));
        out.quants.extend(span.iter().map(|&v| nearest(v * inv)));
    }
}
