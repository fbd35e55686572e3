//! Activations quantized to int8 blocks of 32 (one scale each, rounded to f16 as llama.cpp keeps
//! it: `tile::activation_scale`), the other operand of every quantized product: scalar, and
//! vectorized per instruction set with the same bits.

use crate::cpu::isa::Isa;
use crate::cpu::tile::{Q8Rows, activation_scale};
use crate::formats::{BLOCK, Q8_0, RunFormat};

/// Quantize `rows` (each `cols` wide, a multiple of 32) to int8 blocks: scale = max |x| / 127
/// (kept rounded to f16).
pub fn quantize_rows_q8(x: &[f32], cols: usize, out: &mut Q8Rows) {
    quantize_rows_q8_with(Isa::detect(), x, cols, out)
}

/// [`quantize_rows_q8`] with a given instruction set; every set gives the same bits (the vector
/// versions do the scalar one's f32 operations, lane by lane).
pub fn quantize_rows_q8_with(isa: Isa, x: &[f32], cols: usize, out: &mut Q8Rows) {
    debug_assert_eq!(cols % BLOCK, 0);
    out.quants.clear();
    out.scales.clear();
    out.quants.reserve(x.len());
    out.scales.reserve(x.len() / BLOCK);
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: both are only produced after detecting AVX2 and FMA.
        Isa::Avx2 | Isa::Avx512Vnni => unsafe { crate::cpu::avx2::quantize_q8(x, out) },
        #[cfg(target_arch = "wasm32")]
        Isa::Simd128 => crate::cpu::simd128::quantize_q8(x, out),
        Isa::Scalar => quantize_q8_scalar(x, out),
    }
}

/// The format's reference quantizer (`formats/q8_0.rs`), block by block: the bits every vector
/// version gives.
fn quantize_q8_scalar(x: &[f32], out: &mut Q8Rows) {
    for block in x.chunks_exact(BLOCK) {
        let at = out.quants.len();
        out.quants.resize(at + BLOCK, 0);
        let payload: &mut [u8] = bytemuck::cast_slice_mut(&mut out.quants[at..]);
        out.scales
            .push(activation_scale(Q8_0::quantize_block(block, payload)));
    }
}
