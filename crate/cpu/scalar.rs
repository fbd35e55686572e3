//! The scalar kernels: every machine runs them, and every other instruction set is tested against
//! them. Their block products are the formats' own reference (`formats/`).

use crate::cpu::tile::BlockRow;
use crate::formats::{BLOCK, RunFormat};

pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    // Eight partial sums, as the vector versions keep, so results differ only by rounding.
    let mut acc = [0.0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ac
        .remainder()
        .iter()
        .zip(bc.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ac.zip(bc) {
        for k in 0..8 {
            acc[k] += x[k] * y[k];
        }
    }
    acc.iter().sum::<f32>() + tail
}

pub fn f32_tile(w: &[f32], x: &[&[f32]], out: &mut [f32]) {
    for (out, x) in out.iter_mut().zip(x) {
        *out = dot_f32(w, x);
    }
}

pub fn blocks_tile<F: RunFormat>(w: BlockRow, x: &[BlockRow], out: &mut [f32]) {
    for (out, x) in out.iter_mut().zip(x) {
        *out = dot_blocks::<F>(w, *x);
    }
}

/// One weight row of `F` blocks against one int8 activation row: each block's integer dot product
/// by the format's reference, scaled once.
fn dot_blocks<F: RunFormat>(w: BlockRow, x: BlockRow) -> f32 {
    let mut sum = 0.0f32;
    for b in 0..w.scales.len() {
        let xb: &[i8] = bytemuck::cast_slice(&x.quants[b * BLOCK..(b + 1) * BLOCK]);
        let acc = F::dot_block(&w.quants[b * F::PAYLOAD..(b + 1) * F::PAYLOAD], xb);
        sum += w.scales[b] * x.scales[b] * acc as f32;
    }
    sum
}

/// [`crate::cpu::attention::weighted_sum`]'s lanes `from..` one at a time, added to `out` (the scalar kernel whole,
/// and the vector kernels' tail).
pub(crate) fn weighted_sum_from(
    from: usize,
    p: &[f32],
    values: &[f32],
    stride: usize,
    out: &mut [f32],
) {
    let hs = out.len();
    for (j, &p) in p.iter().enumerate() {
        for (y, x) in out[from..]
            .iter_mut()
            .zip(&values[j * stride + from..j * stride + hs])
        {
            *y += p * x;
        }
    }
}
