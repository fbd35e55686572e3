//! The CPU backend: tokenometer's own kernels, natively (AVX2, AVX-512 VNNI, chosen at run time)
//! and in WebAssembly (SIMD128, and relaxed SIMD in the page's second build), with a scalar
//! version every other machine runs and the tests compare against; and the forward pass's
//! operations over them ([`HostOps`]). burn is not involved here.
//!
//! One job a file: [`isa`] (which instruction set), [`quantize`] (activations to int8 blocks),
//! [`matmul`](mod@matmul) (products over tiles of rows), [`packed`] (blocks regrouped 8 rows at a time and
//! their kernels), [`attention`] (scores, weighted sums, the f32 dot product), [`check`] (the
//! self-check the page runs), [`matrix`] (weights as the kernels read them), [`ops`]; and the
//! instruction sets' bodies: `scalar.rs`, `avx2.rs`, `simd128.rs`. Each block format's kernels
//! are compiled for its type from `formats/`, per instruction set (`Avx2Block`, `PackedAvx2`,
//! `PackedWasm`).

/// `out.copy_from_slice` of `$grid::<M, N>(w, x)` for the shape of `$w` (M weight rows) and `$x`
/// (N activation rows): up to 4 weight rows against one activation row, or up to 2 against up
/// to 4, the shapes the f32 grids' kernels take.
#[cfg(any(target_arch = "x86_64", target_arch = "wasm32"))]
macro_rules! f32_grid_shapes {
    ($grid:ident, $w:expr, $x:expr, $out:expr) => {
        f32_grid_shapes!(@arms $grid, $w, $x, $out;
            (1, 1) (2, 1) (3, 1) (4, 1) (1, 2) (2, 2) (1, 3) (2, 3) (1, 4) (2, 4))
    };
    // Every shape up to 4 x 4 (a grid with 32 vector registers).
    (@all $grid:ident, $w:expr, $x:expr, $out:expr) => {
        f32_grid_shapes!(@arms $grid, $w, $x, $out;
            (1, 1) (2, 1) (3, 1) (4, 1) (1, 2) (2, 2) (3, 2) (4, 2)
            (1, 3) (2, 3) (3, 3) (4, 3) (1, 4) (2, 4) (3, 4) (4, 4))
    };
    (@arms $grid:ident, $w:expr, $x:expr, $out:expr; $(($m:literal, $n:literal))*) => {{
        let (w, x, out): (&[&[f32]], &[&[f32]], &mut [f32]) = ($w, $x, $out);
        match (w.len(), x.len()) {
            $(($m, $n) => out.copy_from_slice(
                $grid::<$m, $n>(w.try_into().unwrap(), x.try_into().unwrap()).as_flattened(),
            ),)*
            _ => panic!("an f32 grid holds up to 4 x 4 rows"),
        }
    }};
}

pub mod attention;
#[cfg(target_arch = "x86_64")]
mod avx2;
pub mod bandwidth;
pub mod check;
pub mod isa;
pub mod matmul;
pub mod matrix;
pub mod ops;
pub mod packed;
pub mod quantize;
mod scalar;
#[cfg(target_arch = "wasm32")]
pub(crate) mod simd128;
pub mod threads;
pub mod tile;

pub use attention::{attention_scores, dot, weighted_sum};
pub use check::{KernelCheck, check_against_scalar, check_values};
pub use isa::Isa;
pub use matmul::{WeightRows, matmul};
pub use matrix::{HostLinear, HostMatrix};
pub use ops::{HostOps, Rows, silu_mul};
pub use quantize::{quantize_activations, quantize_rows_q8, quantize_rows_q8_with};
pub use threads::Threads;
pub use tile::Q8Rows;
