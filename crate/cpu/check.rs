//! The kernels' self-check: this machine's best kernels against the scalar ones, in one call that
//! the page's end-to-end tests make in both of its builds.

use crate::cpu::isa::Isa;
use crate::cpu::matmul::matmul;
use crate::cpu::matrix::HostMatrix;
use crate::cpu::quantize::quantize_rows_q8;
use crate::cpu::tile::Q8Rows;
use crate::formats::{Blocks, Format};

/// `n` values for checking kernels: a deterministic spread in -1..1 (xorshift from `seed`), with a
/// few large ones as real weights have.
pub fn check_values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.max(1);
    (0..n)
        .map(|i| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let v = (s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0;
            if i % 97 == 0 { v * 8.0 } else { v }
        })
        .collect()
}

/// What [`check_against_scalar`] found.
#[derive(Debug, Clone, serde::Serialize)]
pub struct KernelCheck {
    /// The instruction set checked ([`Isa::name`]).
    pub isa: &'static str,
    /// The largest difference from the scalar kernels, relative to the largest result.
    pub worst_relative_error: f32,
    /// Whether each activation row of a batch got exactly its result alone.
    pub batched_equals_alone: bool,
}

/// Blocks of `format` of `data` (the reference quantizer's).
fn blocks(format: Format, data: &[f32]) -> HostMatrix {
    HostMatrix::Blocks(Blocks::quantize(format, data))
}

/// This machine's best kernels against the scalar ones on f32, Q8_0, Q4_0, Q5_0 and Q6_K weights
/// (pseudo-random, 67 rows of 288, 5 activation rows and each alone). The page's relaxed SIMD
/// build is checked this way by the end-to-end tests, in Chromium: wasm-bindgen-test builds the
/// crate once, without relaxed SIMD (`tests/kernels.rs` checks every other instruction set, more
/// widely).
pub fn check_against_scalar() -> KernelCheck {
    let (rows, cols, t) = (67, 288, 5);
    let (w, x) = (check_values(rows * cols, 3), check_values(t * cols, 5));
    let isa = Isa::detect();
    let (mut worst, mut equal) = (0.0f32, true);
    for m in [
        HostMatrix::F32(w.clone().into()),
        HostMatrix::q8(&w),
        HostMatrix::q4(&w),
        HostMatrix::q8(&w).packed_for(isa, rows, cols),
        HostMatrix::q4(&w).packed_for(isa, rows, cols),
        blocks(Format::Q5_0, &w).packed_for(isa, rows, cols),
        blocks(Format::Q6K, &w).packed_for(isa, rows, cols),
    ] {
        let run = |isa: Isa, x: &[f32]| {
            let t = x.len() / cols;
            let mut xq = Q8Rows::default();
            quantize_rows_q8(x, cols, &mut xq);
            let mut out = vec![f32::NAN; t * rows];
            matmul(isa, m.rows(), rows, cols, x, &xq, t, &mut out);
            out
        };
        let (scalar, got) = (run(Isa::Scalar, &x), run(isa, &x));
        let scale = scalar.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        for (a, b) in got.iter().zip(&scalar) {
            let error = (a - b).abs() / scale;
            // A NaN counts as infinitely wrong (`max` would pass over it).
            worst = if error.is_nan() {
                f32::INFINITY
            } else {
                worst.max(error)
            };
        }
        for (i, row) in got.chunks_exact(rows).enumerate() {
            equal &= run(isa, &x[i * cols..(i + 1) * cols]) == row;
        }
    }
    KernelCheck {
        isa: isa.name(),
        worst_relative_error: worst,
        batched_equals_alone: equal,
    }
}
