//! The shapes every matrix-product kernel shares, below the instruction sets' files: int8
//! activation rows ([`Q8Rows`]), rows of blocks ([`BlockRow`]), a product's operands
//! (`Matmul`), and the loop that runs a kernel over tiles of weight rows and activation rows
//! (`grouped`). `matmul.rs` picks the kernels; `scalar.rs`, `avx2.rs` and `simd128.rs` are
//! them.

use crate::formats::{Activations, BLOCK, RunFormat};

/// Int8 activations in blocks of 32 with one f32 scale each, row-major like the weights, rounded
/// as `activations` says (where it is Q8_K, eight blocks in a row share a scale).
#[derive(Debug, Clone, Default)]
pub struct Q8Rows {
    pub quants: Vec<i8>,
    pub scales: Vec<f32>,
    pub activations: Activations,
}

/// An activation block's scale as [`Q8Rows`] keeps it for [`Activations::Q8_0`]: `max |x| / 127`
/// rounded to f16, as llama.cpp's Q8_0 and Q8_1 activation blocks store theirs (the codes
/// themselves are rounded with the unrounded inverse, `127 / max |x|`, there and here). With it the CPU's quantized products are llama.cpp's up to
/// the order of the sums: the same greedy tokens on SmolLM2's Q4_1 file where f32 scales gave a
/// different answer at the 6th token (tests/real_models.rs).
#[inline(always)]
pub(crate) fn activation_scale(amax_over_127: f32) -> f32 {
    half::f16::from_f32(amax_over_127).to_f32()
}

/// An activation block's inverse scale, `127 / max |x|`, or 0 for a block of zeros (or of
/// infinities, whose codes are then 0): the scalar quantizer's and the vector ones'.
#[inline(always)]
pub(crate) fn inverse(amax: f32) -> f32 {
    if amax > 0.0 && amax.is_finite() {
        127.0 / amax
    } else {
        0.0
    }
}

/// A kernel of several weight rows made of one that takes a single weight row (against several
/// activation rows), called once per weight row.
#[inline(always)]
pub(crate) fn row_by_row<W: Copy, X>(
    tile: impl Fn(W, &[X], &mut [f32]),
) -> impl Fn(&[W], &[X], &mut [f32]) {
    move |w, x, out| {
        for (w, out) in w.iter().zip(out.chunks_mut(x.len())) {
            tile(*w, x, out);
        }
    }
}

/// The most weight rows, and the most activation rows, one kernel call takes.
pub(crate) const TILE: usize = 4;

/// How many weight rows and how many activation rows one kernel call takes.
#[derive(Clone, Copy)]
pub(crate) struct Shape {
    weights: usize,
    activations: usize,
}

/// A kernel and the shape of its calls: it takes up to `TILE` weight rows (`W`) and up to
/// `TILE` activation rows (`X`) and writes `out[k * x.len() + j] = w[k] . x[j]`.
pub(crate) struct Kernel<F> {
    run: F,
    shape: Shape,
}

/// An instruction set's kernels for one weight format: `one` for decode at batch 1, `many` for
/// several activation rows, each run by a `grouped` of its own.
pub(crate) struct Kernels<F, G> {
    one: Kernel<F>,
    many: Kernel<G>,
}

impl<F, G> Kernels<F, G> {
    pub(crate) fn new(
        one: F,
        one_shape: (usize, usize),
        many: G,
        many_shape: (usize, usize),
    ) -> Self {
        let shape = |(weights, activations): (usize, usize)| Shape {
            weights,
            activations,
        };
        Kernels {
            one: Kernel {
                run: one,
                shape: shape(one_shape),
            },
            many: Kernel {
                run: many,
                shape: shape(many_shape),
            },
        }
    }
}

/// A matrix product's operands.
pub(crate) struct Matmul<'a> {
    pub rows: usize,
    pub cols: usize,
    pub x: &'a [f32],
    pub xq: &'a Q8Rows,
    pub t: usize,
}

/// Every weight row against every activation row, a group of weight rows and a group of
/// activation rows a kernel call (`shape`), results scattered into `out[i * rows + r]`.
///
/// A group's weight rows are `stride` apart, not neighbours: rows `r, r + stride, ...` with
/// `stride = rows / shape.weights` rounded up. Measured in the page (SIMD128, Q8_0, 2 rows a call,
/// against 1 row a call, tok/s): neighbours took stories15M q8 from 611 to 661 but stories110M q8
/// from 102.8 down to 47.5; rows half the matrix apart gave 779 against 745 at stories15M and
/// 120.3 against 106.0 at stories110M.
///
/// Each weight group is read from memory once for all activation rows, then from L1 once per
/// activation group. Every kernel sums each (weight row, activation row) pair in one order
/// whatever the group it is in, so a row's result never depends on its neighbours (batched
/// decode equals batch 1).
///
/// In wasm each use is a function of its own with its kernel inlined into it. V8 allocates
/// registers a function at a time: with every kernel inlined into one large `matmul`, its code
/// for the Q4_0 row kernel stored the accumulators to the stack at every block, and q8 decoded
/// 11% slower at batch 1 in the page. Natively everything inlines into the instruction set's
/// `#[target_feature]` function.
#[cfg_attr(target_arch = "wasm32", inline(never))]
#[cfg_attr(not(target_arch = "wasm32"), inline(always))]
pub(crate) fn grouped<W: Copy, X: Copy>(
    rows: usize,
    x: &[X],
    kernel: Kernel<impl Fn(&[W], &[X], &mut [f32])>,
    weight_row: impl Fn(usize) -> W,
    out: &mut [f32],
) {
    let (shape, kernel) = (kernel.shape, kernel.run);
    let t = x.len();
    let (m, n) = (
        shape.weights.clamp(1, TILE),
        shape.activations.clamp(1, TILE),
    );
    let stride = rows.div_ceil(m);
    let mut ws = [weight_row(0); TILE];
    let mut results = [0.0f32; TILE * TILE];
    for r in 0..stride {
        let mw = (0..m).filter(|k| r + k * stride < rows).count();
        for (k, w) in ws[..mw].iter_mut().enumerate() {
            *w = weight_row(r + k * stride);
        }
        if t == 1 {
            // Decode at batch 1 without the loop over activation groups below (the same work
            // for one row; measured in the page without this path, 3 rounds: q8 718 -> 649
            // tok/s, q4 605 -> 584).
            kernel(&ws[..mw], x, &mut results[..mw]);
            for (k, v) in results[..mw].iter().enumerate() {
                out[r + k * stride] = *v;
            }
            continue;
        }
        for i in (0..t).step_by(n) {
            let nx = (t - i).min(n);
            kernel(&ws[..mw], &x[i..i + nx], &mut results[..mw * nx]);
            for (k, row) in results[..mw * nx].chunks_exact(nx).enumerate() {
                for (j, v) in row.iter().enumerate() {
                    out[(i + j) * rows + r + k * stride] = *v;
                }
            }
        }
    }
}

impl<'a> Matmul<'a> {
    /// The product of f32 weights `data` (`[rows, cols]`) with an instruction set's f32 kernels (see [`grouped`]).
    #[inline(always)]
    pub(crate) fn f32_tiled(
        &self,
        data: &'a [f32],
        out: &mut [f32],
        f32s: Kernels<
            impl Fn(&[&'a [f32]], &[&'a [f32]], &mut [f32]),
            impl Fn(&[&'a [f32]], &[&'a [f32]], &mut [f32]),
        >,
    ) {
        let (rows, cols, t) = (self.rows, self.cols, self.t);
        assert!(self.x.len() >= t * cols);
        let x: Vec<&[f32]> = (0..t).map(|i| &self.x[i * cols..][..cols]).collect();
        let weight_row = |r: usize| &data[r * cols..(r + 1) * cols];
        if t == 1 {
            grouped(rows, &x, f32s.one, weight_row, out);
        } else {
            grouped(rows, &x, f32s.many, weight_row, out);
        }
    }

    /// The product of `w` (the whole matrix's blocks of `F`, row-major) with an instruction set's
    /// block kernels (see [`grouped`]), the
    /// activations as `xq` holds them, or as `prepared` (`t` rows of the same length) where
    /// that is not empty: VNNI moves them to unsigned bytes.
    ///
    /// Measured (this project's 2-core AMD EPYC, synthetic stories15M, 8 users, greedy, 128
    /// tokens, aggregate tok/s before -> after tiles of activation rows, one run each): AVX2 f32
    /// 940 -> 1273, q8 1316 -> 1499; SIMD128 in Chromium's worker f32 488 -> 578, q4 424 -> 477,
    /// q8 530 -> 498 (a Q8_0 block's weight loads are a small part of its work there, so q8
    /// gains nothing).
    #[inline(always)]
    pub(crate) fn blocks_tiled<'b, F: RunFormat>(
        &'b self,
        w: BlockRow<'b>,
        out: &mut [f32],
        prepared: &'b [u8],
        blocks: Kernels<
            impl Fn(&[BlockRow<'b>], &[BlockRow<'b>], &mut [f32]),
            impl Fn(&[BlockRow<'b>], &[BlockRow<'b>], &mut [f32]),
        >,
    ) {
        let (rows, cols, t) = (self.rows, self.cols, self.t);
        let blocks_per_row = cols / BLOCK;
        assert!(self.xq.quants.len() >= t * cols);
        let BlockRow { quants, scales } = w;
        let x: Vec<BlockRow> = (0..t)
            .map(|row| BlockRow {
                quants: if prepared.is_empty() {
                    bytemuck::cast_slice(&self.xq.quants[row * cols..][..cols])
                } else {
                    let size = prepared.len() / t;
                    &prepared[row * size..][..size]
                },
                scales: &self.xq.scales[row * blocks_per_row..][..blocks_per_row],
            })
            .collect();
        let step = blocks_per_row * F::PAYLOAD;
        let weight_row = |r: usize| BlockRow {
            quants: &quants[r * step..(r + 1) * step],
            scales: &scales[r * blocks_per_row..(r + 1) * blocks_per_row],
        };
        if t == 1 {
            grouped(rows, &x, blocks.one, weight_row, out);
        } else {
            grouped(rows, &x, blocks.many, weight_row, out);
        }
    }
}

/// One row of blocks: payload bytes (or an activation row's int8 values as bytes) and a scale per
/// block of 32.
#[derive(Clone, Copy)]
pub struct BlockRow<'a> {
    pub quants: &'a [u8],
    pub scales: &'a [f32],
}

/// The blocks per row of a block kernel's operands and the weight bytes per block, after
/// checking that every row holds them (the kernels' loads are unchecked): weight rows of the
/// same length, and activation rows of `x_bytes` a block (their instruction set's layout).
#[cfg(target_arch = "x86_64")]
pub(crate) fn checked_blocks<F: RunFormat>(
    w: &[BlockRow],
    x: &[BlockRow],
    x_bytes: usize,
) -> (usize, usize) {
    let step = F::PAYLOAD;
    let blocks = w[0].scales.len();
    assert!(
        w.iter()
            .all(|w| w.scales.len() == blocks && w.quants.len() >= blocks * step)
    );
    assert!(
        x.iter()
            .all(|x| x.scales.len() == blocks && x.quants.len() >= blocks * x_bytes)
    );
    (blocks, step)
}

/// The length of every row of an f32 grid's operands, checked (the grids' loads are unchecked).
#[cfg(any(target_arch = "x86_64", target_arch = "wasm32"))]
pub(crate) fn grid_len(w: &[&[f32]], x: &[&[f32]]) -> usize {
    let n = w[0].len();
    assert!(w.iter().all(|w| w.len() == n) && x.iter().all(|x| x.len() == n));
    n
}

/// How many activation rows of `row_bytes` each a product takes against every weight row before
/// the next ones (`cpu/ops.rs` splits a prompt so, natively): as many as fill [`CHUNK_BYTES`], a
/// multiple of `tile` (at least one tile). Without the chunks a prompt's activations (530 rows of
/// 576 f32, 1.2 MB; 3.2 MB into the FFN's down projection) were read again from L3 for every group
/// of weight rows; in chunks they stay in L2 and the weights are read once a chunk. The arithmetic
/// of each (weight row, activation row) pair is the same.
pub(crate) fn chunk_rows(row_bytes: usize, tile: usize) -> usize {
    (CHUNK_BYTES / row_bytes.max(1)).max(tile) / tile * tile
}

/// The bytes of activations a product keeps in L2 at once (see [`chunk_rows`]): half of the
/// smallest L2 of the x86 cores this runs on (512 KB), leaving room for the weights streaming past.
pub(crate) const CHUNK_BYTES: usize = 256 * 1024;
