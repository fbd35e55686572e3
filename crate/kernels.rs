//! The CPU backend's inner loops: dot products of f32 rows and of Q8_0 / Q4_0 weight blocks with
//! int8-quantized activations, vectorized for AVX2 natively (chosen at run time) and SIMD128 in
//! WebAssembly (chosen at compile time), with a scalar version that every other machine runs and
//! the tests compare against.
//!
//! Quantized dot products follow the idea of llama.cpp's `ggml_vec_dot_q8_0_q8_0`: both sides are
//! blocks of 32 integers with one scale, so a block's products are summed exactly in integers and
//! scaled once. Weight blocks hold values in -127..=127 (Q8_0) or 0..=15 meaning -8..=7 (Q4_0), so
//! the 16-bit pair sums of AVX2's `maddubs` cannot saturate.
//!
//! Layouts (row-major, one row per output unit; see `quant.rs` for how they are made):
//! - Q8_0: `quants[r * cols + i]` as i8, `scales[r * cols / 32 + b]`.
//! - Q4_0: 16 bytes per block; byte `j` holds value `j` in its low nibble and value `j + 16` in
//!   its high nibble (GGUF's order), stored as `value + 8`.
//!
//! On AVX2 machines and in wasm the model's Q8_0 and Q4_0 matrices are regrouped 8 rows at a time
//! when they load, and `matmul` hands them to `packed.rs`. SIMD128's block kernels are only
//! there: a row-major matrix handed to `matmul` in wasm (the tests') is packed for that product.

use crate::quant::BLOCK;

/// The instruction set the kernels use on this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    Scalar,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    /// AVX2, with AVX-512 VNNI's `vpdpbusd` (in its 256-bit form) for the block products.
    #[cfg(target_arch = "x86_64")]
    Avx512Vnni,
    #[cfg(target_arch = "wasm32")]
    Simd128,
}

impl Isa {
    /// The best this machine runs.
    pub fn detect() -> Isa {
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            if std::is_x86_feature_detected!("avx512vnni")
                && std::is_x86_feature_detected!("avx512vl")
            {
                return Isa::Avx512Vnni;
            }
            return Isa::Avx2;
        }
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        return Isa::Simd128;
        #[allow(unreachable_code)]
        Isa::Scalar
    }

    /// Every set this machine can run, for tests that compare them.
    pub fn available() -> Vec<Isa> {
        match Isa::detect() {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512Vnni => vec![Isa::Scalar, Isa::Avx2, Isa::Avx512Vnni],
            Isa::Scalar => vec![Isa::Scalar],
            best => vec![Isa::Scalar, best],
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => "AVX2",
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512Vnni => "AVX2+VNNI",
            #[cfg(all(target_arch = "wasm32", not(target_feature = "relaxed-simd")))]
            Isa::Simd128 => "SIMD128",
            // The page's second build: fused f32 multiply-adds (`simd128::mul_add`) and Q4_0
            // byte products (`simd128::relaxed`).
            #[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
            Isa::Simd128 => "SIMD128+relaxed",
        }
    }

    /// The set's name on the command line (`--cpu-kernels`).
    pub fn key(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => "avx2",
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512Vnni => "vnni",
            #[cfg(target_arch = "wasm32")]
            Isa::Simd128 => "simd128",
        }
    }

    /// The set whose [`key`](Isa::key) is `name` (any case), if this machine runs it; otherwise
    /// a sentence naming the sets it does run.
    pub fn by_name(name: &str) -> Result<Isa, String> {
        let available = Isa::available();
        available
            .iter()
            .copied()
            .find(|isa| isa.key().eq_ignore_ascii_case(name))
            .ok_or_else(|| {
                let keys: Vec<&str> = available.iter().map(|isa| isa.key()).collect();
                format!(
                    "this CPU's kernels come in {}, not \"{name}\"",
                    keys.join(", ")
                )
            })
    }
}

/// Int8 activations in blocks of 32 with one f32 scale each, row-major like the weights.
#[derive(Debug, Clone, Default)]
pub struct Q8Rows {
    pub quants: Vec<i8>,
    pub scales: Vec<f32>,
}

/// Quantize `rows` (each `cols` wide, a multiple of 32) to int8 blocks: scale = max |x| / 127.
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
        Isa::Avx2 | Isa::Avx512Vnni => unsafe { avx2::quantize_q8(x, out) },
        #[cfg(target_arch = "wasm32")]
        Isa::Simd128 => simd128::quantize_q8(x, out),
        Isa::Scalar => quantize_q8_scalar(x, out),
    }
}

fn quantize_q8_scalar(x: &[f32], out: &mut Q8Rows) {
    for block in x.chunks_exact(BLOCK) {
        let amax = block.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let scale = amax / 127.0;
        let inv = if scale > 0.0 { 1.0 / scale } else { 0.0 };
        out.scales.push(scale);
        // Round half away from zero, as `f32::round` does, without its library call (`roundf`
        // took 1.7% of a q8 decode natively): |v * inv| <= 127, so the truncating cast is exact.
        out.quants.extend(block.iter().map(|v| {
            let r = v * inv;
            (r + 0.5f32.copysign(r)) as i8
        }));
    }
}

/// The stored weights of a matrix, borrowed for one product.
#[derive(Clone, Copy)]
pub enum WeightRows<'a> {
    F32(&'a [f32]),
    Q8 {
        quants: &'a [i8],
        scales: &'a [f32],
    },
    Q4 {
        quants: &'a [u8],
        scales: &'a [f32],
    },
    /// Q8_0 or Q4_0 in groups of 8 interleaved rows (`packed.rs`).
    Packed(&'a crate::packed::Packed),
}

/// `out[i * rows + r] = dot(weight row r, x row i)` for a `[rows, cols]` weight and `t` rows of
/// `x` (f32 for f32 weights; int8 blocks in `xq` for quantized ones). Each weight row is read
/// from memory once for all `t` activation rows.
#[allow(clippy::too_many_arguments)]
pub fn matmul(
    isa: Isa,
    w: WeightRows,
    rows: usize,
    cols: usize,
    x: &[f32],
    xq: &Q8Rows,
    t: usize,
    out: &mut [f32],
) {
    debug_assert_eq!(out.len(), t * rows);
    if let WeightRows::Packed(packed) = w {
        assert_eq!((packed.rows(), packed.cols()), (rows, cols));
        return crate::packed::matmul(isa, packed, xq, t, out);
    }
    let quantized = !matches!(w, WeightRows::F32(_));
    // SIMD128's block kernels read 8-row groups only (`packed.rs`): the model's matrices are
    // packed as they load, and a row-major one handed here (the tests' and the kernel check's)
    // is packed for this product.
    #[cfg(target_arch = "wasm32")]
    if isa == Isa::Simd128 && quantized {
        let blocks = match w {
            WeightRows::Q8 { quants, scales } => crate::weights::Blocks::Q8 {
                quants: quants.to_vec(),
                scales: scales.to_vec(),
            },
            WeightRows::Q4 { quants, scales } => crate::weights::Blocks::Q4 {
                quants: quants.to_vec(),
                scales: scales.to_vec(),
            },
            WeightRows::F32(_) | WeightRows::Packed(_) => unreachable!("handled above"),
        };
        let packed = crate::packed::Packed::pack(rows, cols, blocks);
        return crate::packed::matmul(isa, &packed, xq, t, out);
    }
    // The activations in the layout the block tiles take, made once here, not once per weight
    // row; `None`: `xq` as it is.
    let prepared: Option<Vec<u8>> = match isa {
        // VNNI multiplies unsigned by signed bytes: the activations move to 1..=255 (x + 128),
        // and each weight block's 128 * sum is taken back once for the whole tile.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni if quantized => Some(
            xq.quants[..t * cols]
                .iter()
                .map(|&q| (q as u8) ^ 0x80)
                .collect(),
        ),
        _ => None,
    };
    let m = Matmul {
        w,
        rows,
        cols,
        x,
        xq,
        x_prepared: prepared.as_deref(),
        t,
    };
    match isa {
        Isa::Scalar => m.tiled(
            out,
            Kernels::new(
                row_by_row(scalar::f32_tile),
                (1, 1),
                row_by_row(scalar::f32_tile),
                (1, TILE),
            ),
            Kernels::new(
                row_by_row(scalar::blocks_tile),
                (1, 1),
                row_by_row(scalar::blocks_tile),
                (1, TILE),
            ),
        ),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx512Vnni` is only produced after detecting AVX2, FMA, AVX512-VNNI
        // and AVX512-VL.
        Isa::Avx512Vnni if quantized => unsafe { avx2::matmul_vnni(&m, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: both are only produced after detecting AVX2 and FMA. f32 weights take the
        // AVX2 loops on a VNNI machine too (compiled with AVX-512 enabled, they decoded stories15M
        // f32 a tenth slower at 8 users).
        Isa::Avx2 | Isa::Avx512Vnni => unsafe { avx2::matmul(&m, out) },
        #[cfg(target_arch = "wasm32")]
        Isa::Simd128 => m.f32_tiled(
            out,
            // Closures marked to inline, so that each kernel's loops inline into its `grouped`:
            // handed over as function items, the block kernels (since moved to `packed.rs`)
            // stayed behind a call once per weight row and tile (page, stories15M, 3 rounds: q8
            // 676 -> 707 tok/s at 1 user, 862 -> 891 at 8; q4 563 -> 592 and 807 -> 810 with the
            // closures).
            Kernels::new(
                #[inline(always)]
                |w: &[&[f32]], x: &[&[f32]], o: &mut [f32]| simd128::f32_grid(w, x, o),
                (4, 1),
                #[inline(always)]
                |w: &[&[f32]], x: &[&[f32]], o: &mut [f32]| simd128::f32_grid(w, x, o),
                (2, 4),
            ),
        ),
    }
}

/// A kernel of several weight rows made of one that takes a single weight row (against several
/// activation rows), called once per weight row.
#[inline(always)]
fn row_by_row<W: Copy, X>(tile: impl Fn(W, &[X], &mut [f32])) -> impl Fn(&[W], &[X], &mut [f32]) {
    move |w, x, out| {
        for (w, out) in w.iter().zip(out.chunks_mut(x.len())) {
            tile(*w, x, out);
        }
    }
}

/// The most weight rows, and the most activation rows, one kernel call takes.
const TILE: usize = 4;

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
    fn new(one: F, one_shape: (usize, usize), many: G, many_shape: (usize, usize)) -> Self {
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
    w: WeightRows<'a>,
    rows: usize,
    cols: usize,
    x: &'a [f32],
    xq: &'a Q8Rows,
    /// `xq`'s values as the instruction set's block tiles take them, where that is not `xq`
    /// itself: moved to unsigned bytes (VNNI).
    x_prepared: Option<&'a [u8]>,
    t: usize,
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
fn grouped<W: Copy, X: Copy>(
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
    /// The product of f32 weights with an instruction set's f32 kernels (see [`grouped`]).
    #[inline(always)]
    fn f32_tiled(
        &self,
        out: &mut [f32],
        f32s: Kernels<
            impl Fn(&[&'a [f32]], &[&'a [f32]], &mut [f32]),
            impl Fn(&[&'a [f32]], &[&'a [f32]], &mut [f32]),
        >,
    ) {
        let (rows, cols, t) = (self.rows, self.cols, self.t);
        let WeightRows::F32(data) = self.w else {
            panic!("f32 kernels take f32 weights")
        };
        assert!(self.x.len() >= t * cols);
        let x: Vec<&[f32]> = (0..t).map(|i| &self.x[i * cols..][..cols]).collect();
        let weight_row = |r: usize| &data[r * cols..(r + 1) * cols];
        if t == 1 {
            grouped(rows, &x, f32s.one, weight_row, out);
        } else {
            grouped(rows, &x, f32s.many, weight_row, out);
        }
    }

    /// The product with an instruction set's f32 and block kernels (see [`grouped`]).
    /// Measured (this project's 2-core AMD EPYC, synthetic stories15M, 8 users, greedy, 128
    /// tokens, aggregate tok/s before -> after tiles of activation rows, one run each): AVX2 f32
    /// 940 -> 1273, q8 1316 -> 1499; SIMD128 in Chromium's worker f32 488 -> 578, q4 424 -> 477,
    /// q8 530 -> 498 (a Q8_0 block's weight loads are a small part of its work there, so q8
    /// gains nothing).
    #[inline(always)]
    fn tiled(
        &self,
        out: &mut [f32],
        f32s: Kernels<
            impl Fn(&[&'a [f32]], &[&'a [f32]], &mut [f32]),
            impl Fn(&[&'a [f32]], &[&'a [f32]], &mut [f32]),
        >,
        blocks: Kernels<
            impl Fn(&[WeightBlocks<'a>], &[BlockRow<'a>], &mut [f32]),
            impl Fn(&[WeightBlocks<'a>], &[BlockRow<'a>], &mut [f32]),
        >,
    ) {
        let (rows, cols, t) = (self.rows, self.cols, self.t);
        let blocks_per_row = cols / BLOCK;
        match self.w {
            WeightRows::F32(_) => self.f32_tiled(out, f32s),
            _ => {
                assert!(self.xq.quants.len() >= t * cols);
                let (wq, scales, q4) = self.w.blocks();
                // Bytes per block: 32 values of Q8_0, or 32 nibbles of Q4_0.
                let step = if q4 { BLOCK / 2 } else { BLOCK };
                let x: Vec<BlockRow> = (0..t)
                    .map(|row| BlockRow {
                        quants: match self.x_prepared {
                            Some(prepared) => {
                                let size = prepared.len() / t;
                                &prepared[row * size..][..size]
                            }
                            None => bytemuck::cast_slice(&self.xq.quants[row * cols..][..cols]),
                        },
                        scales: &self.xq.scales[row * blocks_per_row..][..blocks_per_row],
                    })
                    .collect();
                let weight_row = |r: usize| WeightBlocks {
                    row: BlockRow {
                        quants: &wq[r * blocks_per_row * step..(r + 1) * blocks_per_row * step],
                        scales: &scales[r * blocks_per_row..(r + 1) * blocks_per_row],
                    },
                    q4,
                };
                if t == 1 {
                    grouped(rows, &x, blocks.one, weight_row, out);
                } else {
                    grouped(rows, &x, blocks.many, weight_row, out);
                }
            }
        }
    }
}

/// One row of blocks: Q8_0 values as bytes (or Q4_0 nibbles) and a scale per block of 32.
#[derive(Clone, Copy)]
pub struct BlockRow<'a> {
    pub quants: &'a [u8],
    pub scales: &'a [f32],
}

/// A weight row of blocks, and whether they are Q4_0.
#[derive(Clone, Copy)]
pub struct WeightBlocks<'a> {
    pub row: BlockRow<'a>,
    pub q4: bool,
}

impl<'a> WeightRows<'a> {
    /// A quantized matrix's bytes (Q8_0 values as bytes, or Q4_0 nibbles), its scales, and
    /// whether it is Q4_0.
    fn blocks(self) -> (&'a [u8], &'a [f32], bool) {
        match self {
            WeightRows::Q8 { quants, scales } => (bytemuck::cast_slice(quants), scales, false),
            WeightRows::Q4 { quants, scales } => (quants, scales, true),
            WeightRows::F32(_) | WeightRows::Packed(_) => {
                panic!("f32 and packed weights have no row-major blocks")
            }
        }
    }
}

/// The blocks per row of a block kernel's operands and the weight bytes per block, after
/// checking that every row holds them (the kernels' loads are unchecked): weight rows of the
/// same length, and activation rows of `x_bytes` a block (their instruction set's layout).
#[cfg(target_arch = "x86_64")]
fn checked_blocks<const Q4: bool>(
    w: &[WeightBlocks],
    x: &[BlockRow],
    x_bytes: usize,
) -> (usize, usize) {
    let step = if Q4 { BLOCK / 2 } else { BLOCK };
    let blocks = w[0].row.scales.len();
    assert!(
        w.iter()
            .all(|w| w.row.scales.len() == blocks && w.row.quants.len() >= blocks * step)
    );
    assert!(
        x.iter()
            .all(|x| x.scales.len() == blocks && x.quants.len() >= blocks * x_bytes)
    );
    (blocks, step)
}

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

/// This machine's best kernels against the scalar ones on f32, Q8_0 and Q4_0 weights
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
        crate::quant::HostMatrix::F32(w.clone().into()),
        crate::quant::HostMatrix::q8(&w),
        crate::quant::HostMatrix::q4(&w),
        crate::quant::HostMatrix::q8(&w).packed_for(isa, rows, cols),
        crate::quant::HostMatrix::q4(&w).packed_for(isa, rows, cols),
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

/// The dot product of two f32 slices, with the best instruction set.
pub fn dot(isa: Isa, a: &[f32], b: &[f32]) -> f32 {
    match isa {
        Isa::Scalar => scalar::dot_f32(a, b),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: both are only produced after detecting AVX2 and FMA.
        Isa::Avx2 | Isa::Avx512Vnni => unsafe { avx2::dot_f32(a, b) },
        #[cfg(target_arch = "wasm32")]
        Isa::Simd128 => simd128::dot_f32(a, b),
    }
}

/// One query's attention scores over a head's cached keys: `scores[j] = dot(query, key j) *
/// scale`, key `j` being `keys[j * stride..][..query.len()]`. One call for all positions, so the
/// dot products inline into one loop: called once per position, their call and dispatch took
/// more time than their arithmetic at a head size of 48 (attention was a fifth of a q8 decode
/// step at 8 users natively, in a profile).
pub fn attention_scores(
    isa: Isa,
    query: &[f32],
    keys: &[f32],
    stride: usize,
    scale: f32,
    scores: &mut [f32],
) {
    let hs = query.len();
    assert!(scores.is_empty() || keys.len() >= (scores.len() - 1) * stride + hs);
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: both are only produced after detecting AVX2 and FMA.
        Isa::Avx2 | Isa::Avx512Vnni => unsafe {
            avx2::attention_scores(query, keys, stride, scale, scores)
        },
        _ => {
            for (j, s) in scores.iter_mut().enumerate() {
                *s = dot(isa, query, &keys[j * stride..][..hs]) * scale;
            }
        }
    }
}

/// The attention's output for one query: `out = sum_j p[j] * value j`, value `j` being
/// `values[j * stride..][..out.len()]`, each lane summed in position order (as a chain of
/// `y += p * x` would), kept in registers across the positions.
pub fn weighted_sum(isa: Isa, p: &[f32], values: &[f32], stride: usize, out: &mut [f32]) {
    let hs = out.len();
    assert!(p.is_empty() || values.len() >= (p.len() - 1) * stride + hs);
    out.fill(0.0);
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: both are only produced after detecting AVX2 and FMA.
        Isa::Avx2 | Isa::Avx512Vnni => unsafe { avx2::weighted_sum(p, values, stride, out) },
        #[cfg(target_arch = "wasm32")]
        Isa::Simd128 => simd128::weighted_sum(p, values, stride, out),
        Isa::Scalar => weighted_sum_from(0, p, values, stride, out),
    }
}

/// [`weighted_sum`]'s lanes `from..` one at a time, added to `out` (the scalar kernel whole,
/// and the vector kernels' tail).
fn weighted_sum_from(from: usize, p: &[f32], values: &[f32], stride: usize, out: &mut [f32]) {
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

/// The length of every row of an f32 grid's operands, checked (the grids' loads are unchecked).
#[cfg(any(target_arch = "x86_64", target_arch = "wasm32"))]
fn grid_len(w: &[&[f32]], x: &[&[f32]]) -> usize {
    let n = w[0].len();
    assert!(w.iter().all(|w| w.len() == n) && x.iter().all(|x| x.len() == n));
    n
}

/// `out.copy_from_slice` of `$grid::<M, N>(w, x)` for the shape of `$w` (M weight rows) and `$x`
/// (N activation rows): up to 4 weight rows against one activation row, or up to 2 against up
/// to 4, the shapes [`Kernel`]s of f32 grids take.
#[cfg(any(target_arch = "x86_64", target_arch = "wasm32"))]
macro_rules! f32_grid_shapes {
    ($grid:ident, $w:expr, $x:expr, $out:expr) => {
        f32_grid_shapes!(@arms $grid, $w, $x, $out;
            (1, 1) (2, 1) (3, 1) (4, 1) (1, 2) (2, 2) (1, 3) (2, 3) (1, 4) (2, 4))
    };
    (@arms $grid:ident, $w:expr, $x:expr, $out:expr; $(($m:literal, $n:literal))*) => {{
        let (w, x, out): (&[&[f32]], &[&[f32]], &mut [f32]) = ($w, $x, $out);
        match (w.len(), x.len()) {
            $(($m, $n) => out.copy_from_slice(
                $grid::<$m, $n>(w.try_into().unwrap(), x.try_into().unwrap()).as_flattened(),
            ),)*
            _ => panic!("an f32 grid holds up to 4 x 1 or 2 x 4 rows"),
        }
    }};
}

mod scalar {
    use super::{BLOCK, BlockRow, WeightBlocks};

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

    pub fn blocks_tile(w: WeightBlocks, x: &[BlockRow], out: &mut [f32]) {
        for (out, x) in out.iter_mut().zip(x) {
            *out = dot_blocks(w, *x);
        }
    }

    fn dot_blocks(w: WeightBlocks, x: BlockRow) -> f32 {
        let mut sum = 0.0f32;
        for b in 0..w.row.scales.len() {
            let xb = &x.quants[b * BLOCK..(b + 1) * BLOCK];
            let mut acc = 0i32;
            if w.q4 {
                let wb = &w.row.quants[b * BLOCK / 2..(b + 1) * BLOCK / 2];
                for j in 0..BLOCK / 2 {
                    let lo = (wb[j] & 0x0f) as i32 - 8;
                    let hi = (wb[j] >> 4) as i32 - 8;
                    acc += lo * (xb[j] as i8) as i32 + hi * (xb[j + BLOCK / 2] as i8) as i32;
                }
            } else {
                let wb = &w.row.quants[b * BLOCK..(b + 1) * BLOCK];
                for j in 0..BLOCK {
                    acc += (wb[j] as i8) as i32 * (xb[j] as i8) as i32;
                }
            }
            sum += w.row.scales[b] * x.scales[b] * acc as f32;
        }
        sum
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{
        BLOCK, BlockRow, Kernels, Matmul, Q8Rows, TILE, WeightBlocks, checked_blocks, grid_len,
        row_by_row,
    };

    #[target_feature(enable = "avx2,fma")]
    fn hsum(v: __m256) -> f32 {
        let hi = _mm256_extractf128_ps(v, 1);
        let s = _mm_add_ps(_mm256_castps256_ps128(v), hi);
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let (v, i) = dot_lanes(a, b, n);
        let mut sum = hsum(v);
        for i in i..n {
            sum += a[i] * b[i];
        }
        sum
    }

    /// `dot_f32`'s vector part: 8 lanes of partial sums over `a[..i]` and `b[..i]`, `i` the
    /// largest multiple of 8 in `n` (the tail `i..n` is the caller's).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn dot_lanes(a: &[f32], b: &[f32], n: usize) -> (__m256, usize) {
        assert!(a.len() >= n && b.len() >= n);
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        // SAFETY: every load is within 0..n of both slices (asserted above).
        unsafe {
            while i + 32 <= n {
                for (k, acc) in acc.iter_mut().enumerate() {
                    let x = _mm256_loadu_ps(pa.add(i + 8 * k));
                    let y = _mm256_loadu_ps(pb.add(i + 8 * k));
                    *acc = _mm256_fmadd_ps(x, y, *acc);
                }
                i += 32;
            }
            while i + 8 <= n {
                acc[0] = _mm256_fmadd_ps(
                    _mm256_loadu_ps(pa.add(i)),
                    _mm256_loadu_ps(pb.add(i)),
                    acc[0],
                );
                i += 8;
            }
        }
        let v = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
        (v, i)
    }

    /// The horizontal sums of 8 vectors, `[hsum(v[0]), ..., hsum(v[7])]`, each added in
    /// `hsum`'s order: `((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))`. The additions of 8
    /// vectors happen side by side instead of one vector's after another's.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn hsum8(v: [__m256; 8]) -> __m256 {
        // Lanes l and l + 4 of two vectors: [a0+a4, a1+a5, a2+a6, a3+a7, b0+b4, ...].
        let halves = |a: __m256, b: __m256| {
            _mm256_add_ps(
                _mm256_permute2f128_ps(a, b, 0x20),
                _mm256_permute2f128_ps(a, b, 0x31),
            )
        };
        let s = [
            halves(v[0], v[1]),
            halves(v[2], v[3]),
            halves(v[4], v[5]),
            halves(v[6], v[7]),
        ];
        // s0 + s2 and s1 + s3 of four vectors: [t0(v0), t1(v0), t0(v2), t1(v2) | the same of
        // v1 and v3].
        let pairs = |a: __m256, b: __m256| {
            _mm256_add_ps(_mm256_shuffle_ps(a, b, 0x44), _mm256_shuffle_ps(a, b, 0xee))
        };
        let (t0123, t4567) = (pairs(s[0], s[1]), pairs(s[2], s[3]));
        // t0 + t1: the sums of vectors 0, 2, 4, 6 | 1, 3, 5, 7.
        let sums = _mm256_add_ps(
            _mm256_shuffle_ps(t0123, t4567, 0x88),
            _mm256_shuffle_ps(t0123, t4567, 0xdd),
        );
        _mm256_permutevar8x32_ps(sums, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))
    }

    /// [`super::quantize_rows_q8_with`], 32 values (a block) at a time.
    #[target_feature(enable = "avx2,fma")]
    pub fn quantize_q8(x: &[f32], out: &mut Q8Rows) {
        let sign = _mm256_set1_ps(-0.0);
        let half = _mm256_set1_ps(0.5);
        // `packs` works within 128-bit halves; this puts the 8 groups of 4 back in order.
        let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        for block in x.chunks_exact(BLOCK) {
            // SAFETY: the block holds 32 values.
            let v: [__m256; 4] =
                std::array::from_fn(|k| unsafe { _mm256_loadu_ps(block.as_ptr().add(8 * k)) });
            let abs = v.map(|v| _mm256_andnot_ps(sign, v));
            let m = _mm256_max_ps(_mm256_max_ps(abs[0], abs[1]), _mm256_max_ps(abs[2], abs[3]));
            let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
            let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
            let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
            let scale = amax / 127.0;
            let inv = _mm256_set1_ps(if scale > 0.0 { 1.0 / scale } else { 0.0 });
            out.scales.push(scale);
            // Round half away from zero: add 0.5 with r's sign, then truncate (as the scalar one).
            let ints = v.map(|v| {
                let r = _mm256_mul_ps(v, inv);
                let r = _mm256_add_ps(r, _mm256_or_ps(half, _mm256_and_ps(r, sign)));
                _mm256_cvttps_epi32(r)
            });
            let words = [
                _mm256_packs_epi32(ints[0], ints[1]),
                _mm256_packs_epi32(ints[2], ints[3]),
            ];
            let bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(words[0], words[1]), order);
            let at = out.quants.len();
            out.quants.resize(at + BLOCK, 0);
            // SAFETY: the 32 bytes just made room for.
            unsafe { _mm256_storeu_si256(out.quants.as_mut_ptr().add(at) as *mut __m256i, bytes) };
        }
    }

    /// [`super::attention_scores`]: `dot_f32(q, key) * scale` for every position, bit for bit.
    /// Where the head size is a multiple of 8 (no scalar tail), 8 positions at a time: their
    /// lanes as `dot_f32` makes them, then the 8 horizontal sums together ([`hsum8`]), so one
    /// position's sum no longer waits for the one before it.
    ///
    /// Measured natively (this project's 2-core AMD EPYC, AVX2, synthetic stories15M q4, 8
    /// users): the scores went from 16.5% to 12.9% of a decode step's profile samples; aggregate
    /// tok/s at 224 tokens a user 1242 -> 1294 (medians of 4 rounds interleaved, faster in each),
    /// at 128 tokens within this machine's noise.
    #[target_feature(enable = "avx2,fma")]
    pub fn attention_scores(q: &[f32], keys: &[f32], stride: usize, scale: f32, s: &mut [f32]) {
        let hs = q.len();
        let mut j = 0;
        if hs.is_multiple_of(8) {
            while j + 8 <= s.len() {
                let v =
                    std::array::from_fn(|p| dot_lanes(q, &keys[(j + p) * stride..][..hs], hs).0);
                let sums = _mm256_mul_ps(hsum8(v), _mm256_set1_ps(scale));
                // SAFETY: positions j..j + 8 are within `s`.
                unsafe { _mm256_storeu_ps(s.as_mut_ptr().add(j), sums) };
                j += 8;
            }
        }
        for (j, s) in s.iter_mut().enumerate().skip(j) {
            *s = dot_f32(q, &keys[j * stride..][..hs]) * scale;
        }
    }

    /// [`super::weighted_sum`]: up to 64 lanes of the output at a time, 8 registers held over
    /// all positions, then the lanes left in one more pass of 1 to 7 registers (a head of 48 is
    /// one pass of 6), then one lane at a time; each lane gets the same fused multiply-adds in
    /// position order whatever pass it is in. One pass of 6 registers replaced a pass of 4 and
    /// two of one at a head size of 48, whose single chains waited on each multiply-add.
    #[target_feature(enable = "avx2,fma")]
    pub fn weighted_sum(p: &[f32], values: &[f32], stride: usize, out: &mut [f32]) {
        let hs = out.len();
        let mut i = 0;
        while i + 64 <= hs {
            weighted_pass::<8>(p, values, stride, i, out);
            i += 64;
        }
        match (hs - i) / 8 {
            1 => weighted_pass::<1>(p, values, stride, i, out),
            2 => weighted_pass::<2>(p, values, stride, i, out),
            3 => weighted_pass::<3>(p, values, stride, i, out),
            4 => weighted_pass::<4>(p, values, stride, i, out),
            5 => weighted_pass::<5>(p, values, stride, i, out),
            6 => weighted_pass::<6>(p, values, stride, i, out),
            7 => weighted_pass::<7>(p, values, stride, i, out),
            _ => {}
        }
        super::weighted_sum_from(i + (hs - i) / 8 * 8, p, values, stride, out);
    }

    /// Lanes `i..i + 8 K` of [`weighted_sum`], in `K` registers over all positions.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn weighted_pass<const K: usize>(
        p: &[f32],
        values: &[f32],
        stride: usize,
        i: usize,
        out: &mut [f32],
    ) {
        assert!(i + 8 * K <= out.len());
        assert!(p.is_empty() || values.len() >= (p.len() - 1) * stride + i + 8 * K);
        let pv = values.as_ptr();
        let mut acc = [_mm256_setzero_ps(); K];
        // SAFETY: every load is within value j's lanes `i..i + 8 K` and every store within
        // `out` (asserted above).
        unsafe {
            for (j, &p) in p.iter().enumerate() {
                let a = _mm256_set1_ps(p);
                for (k, acc) in acc.iter_mut().enumerate() {
                    let v = _mm256_loadu_ps(pv.add(j * stride + i + 8 * k));
                    *acc = _mm256_fmadd_ps(a, v, *acc);
                }
            }
            for (k, acc) in acc.iter().enumerate() {
                _mm256_storeu_ps(out.as_mut_ptr().add(i + 8 * k), *acc);
            }
        }
    }

    /// The products of 32 signed weights and 32 signed activations, as 8 i32 partial sums.
    #[target_feature(enable = "avx2,fma")]
    fn block_dot(w: __m256i, x: __m256i) -> __m256 {
        // maddubs multiplies unsigned by signed bytes: move w's sign onto x.
        let aw = _mm256_sign_epi8(w, w);
        let sx = _mm256_sign_epi8(x, w);
        let pairs = _mm256_maddubs_epi16(aw, sx);
        _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
    }

    /// Q4_0's 16 bytes as 32 signed values in -8..=7, in value order.
    #[target_feature(enable = "avx2,fma")]
    fn unpack_q4(p: *const u8) -> __m256i {
        // SAFETY: the caller passes a pointer to 16 readable bytes.
        let bytes = unsafe { _mm_loadu_si128(p as *const __m128i) };
        let mask = _mm_set1_epi8(0x0f);
        let lo = _mm_and_si128(bytes, mask);
        let hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
        _mm256_sub_epi8(_mm256_set_m128i(hi, lo), _mm256_set1_epi8(8))
    }

    /// `M` f32 weight rows against `N` activation rows, `out[k][j] = w[k] . x[j]`, with one
    /// 8-lane accumulator a pair (fused multiply-adds): each 8-wide piece of a weight row is
    /// loaded once for all `N` activation rows and each piece of an activation row once for all
    /// `M` weight rows, and every pair is summed in one order whatever `M` and `N` (as SIMD128's
    /// grid, which measured the shapes).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn dot_f32_grid<const M: usize, const N: usize>(
        w: &[&[f32]; M],
        x: &[&[f32]; N],
    ) -> [[f32; N]; M] {
        let n = grid_len(w, x);
        let mut acc = [[_mm256_setzero_ps(); N]; M];
        let mut wv = [_mm256_setzero_ps(); M];
        let mut i = 0;
        // SAFETY: every load is within 0..n of each weight row and each activation row.
        unsafe {
            while i + 8 <= n {
                for (wv, w) in wv.iter_mut().zip(w) {
                    *wv = _mm256_loadu_ps(w.as_ptr().add(i));
                }
                for (j, x) in x.iter().enumerate() {
                    let xv = _mm256_loadu_ps(x.as_ptr().add(i));
                    for (acc, wv) in acc.iter_mut().zip(&wv) {
                        acc[j] = _mm256_fmadd_ps(*wv, xv, acc[j]);
                    }
                }
                i += 8;
            }
        }
        let mut out = [[0.0; N]; M];
        for (k, out) in out.iter_mut().enumerate() {
            for (j, out) in out.iter_mut().enumerate() {
                let mut sum = hsum(acc[k][j]);
                for l in i..n {
                    sum += w[k][l] * x[j][l];
                }
                *out = sum;
            }
        }
        out
    }

    /// Every row of `w` against every row of `x`, `out[k * x.len() + j]` (see [`dot_f32_grid`]).
    #[target_feature(enable = "avx2,fma")]
    fn f32_grid(w: &[&[f32]], x: &[&[f32]], out: &mut [f32]) {
        f32_grid_shapes!(dot_f32_grid, w, x, out)
    }

    /// A weight block's 32 signed values: Q8_0's bytes, or Q4_0's nibbles unpacked.
    ///
    /// # Safety
    /// `pw` points to the block's 32 (Q8_0) or 16 (Q4_0) readable bytes.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn weight_block<const Q4: bool>(pw: *const u8) -> __m256i {
        if Q4 {
            unpack_q4(pw)
        } else {
            // SAFETY: the caller's.
            unsafe { _mm256_loadu_si256(pw as *const __m256i) }
        }
    }

    /// `N` int8 activation rows against one Q8_0 or Q4_0 weight row, each summed block by block
    /// in the same order whatever `N`; a weight block is loaded (and Q4_0 unpacked) once for all
    /// `N`.
    #[target_feature(enable = "avx2,fma")]
    fn dot_q_tile<const N: usize, const Q4: bool>(w: WeightBlocks, x: [BlockRow; N]) -> [f32; N] {
        let (blocks, step) = checked_blocks::<Q4>(&[w], &x, BLOCK);
        let mut acc = [_mm256_setzero_ps(); N];
        for b in 0..blocks {
            // SAFETY: the weight row holds `blocks * step` bytes and each activation row
            // `blocks * 32` (checked by `checked_blocks`).
            let wv = unsafe { weight_block::<Q4>(w.row.quants.as_ptr().add(b * step)) };
            for (acc, x) in acc.iter_mut().zip(&x) {
                // SAFETY: as above.
                let xv = unsafe {
                    _mm256_loadu_si256(x.quants.as_ptr().add(b * BLOCK) as *const __m256i)
                };
                let scale = w.row.scales[b] * x.scales[b];
                *acc = _mm256_fmadd_ps(_mm256_set1_ps(scale), block_dot(wv, xv), *acc);
            }
        }
        acc.map(|a| hsum(a))
    }

    /// A product's loops and a block kernel's tiles of up to 4 rows (`$tile`), compiled with
    /// `$features` so that the tiles inline into the loops. The weight format is a constant in
    /// each tile (measured: q4 decode at batch 1 lost a tenth of its speed when the format was
    /// tested block by block).
    macro_rules! block_matmul {
        ($(#[$doc:meta])* $matmul:ident, $tiles:ident, $dot:ident, $features:literal, $f32s:expr) => {
            #[target_feature(enable = $features)]
            fn $tiles<const Q4: bool>(w: WeightBlocks, x: &[BlockRow], o: &mut [f32]) {
                match *x {
                    [a] => o.copy_from_slice(&$dot::<1, Q4>(w, [a])),
                    [a, b] => o.copy_from_slice(&$dot::<2, Q4>(w, [a, b])),
                    [a, b, c] => o.copy_from_slice(&$dot::<3, Q4>(w, [a, b, c])),
                    [a, b, c, d] => o.copy_from_slice(&$dot::<4, Q4>(w, [a, b, c, d])),
                    _ => panic!("a block tile holds 1 to 4 rows"),
                }
            }

            $(#[$doc])*
            #[target_feature(enable = $features)]
            pub fn $matmul(m: &Matmul, out: &mut [f32]) {
                // The format's tile, as a closure each use inlines.
                macro_rules! tile {
                    () => {
                        #[inline(always)]
                        |w: WeightBlocks, x: &[BlockRow], o: &mut [f32]| {
                            if w.q4 {
                                $tiles::<true>(w, x, o)
                            } else {
                                $tiles::<false>(w, x, o)
                            }
                        }
                    };
                }
                m.tiled(
                    out,
                    $f32s,
                    Kernels::new(row_by_row(tile!()), (1, 1), row_by_row(tile!()), (1, TILE)),
                );
            }
        };
    }

    block_matmul!(
        /// The whole product for AVX2: f32 grids (4 weight rows at batch 1, 2 x 4 activation
        /// rows in a batch) and block tiles of up to 4 activation rows.
        matmul,
        blocks_tile,
        dot_q_tile,
        "avx2,fma",
        {
            let grid = |w: &[&[f32]], x: &[&[f32]], o: &mut [f32]| f32_grid(w, x, o);
            Kernels::new(grid, (4, 1), grid, (2, 4))
        }
    );

    /// `N` activation rows, as unsigned bytes `x + 128`, against one Q8_0 or Q4_0 weight row,
    /// with AVX-512 VNNI's `vpdpbusd`: each i32 lane gets the sum of 4 adjacent byte products
    /// added to it, the lanes AVX2's `maddubs` + `madd` make, without the 16-bit step or the sign
    /// moves. `(x + 128) . w = x . w + 128 * sum(w)`, so every row's lanes start from
    /// `-128 * sum(w)`, taken once per weight block for the whole tile. The lanes are the same
    /// exact integers as the AVX2 tile's, so the results are bit for bit the same.
    #[target_feature(enable = "avx2,fma,avx512vnni,avx512vl")]
    fn dot_q_tile_vnni<const N: usize, const Q4: bool>(
        w: WeightBlocks,
        x: [BlockRow; N],
    ) -> [f32; N] {
        let (blocks, step) = checked_blocks::<Q4>(&[w], &x, BLOCK);
        let zero = _mm256_setzero_si256();
        let offset = _mm256_set1_epi8(-128);
        let mut acc = [_mm256_setzero_ps(); N];
        for b in 0..blocks {
            // SAFETY: the weight row holds `blocks * step` bytes and each activation row
            // `blocks * 32` (checked by `checked_blocks`).
            let wv = unsafe { weight_block::<Q4>(w.row.quants.as_ptr().add(b * step)) };
            let start = _mm256_sub_epi32(zero, _mm256_dpbusd_epi32(zero, offset, wv));
            for (acc, x) in acc.iter_mut().zip(&x) {
                // SAFETY: as above.
                let xv = unsafe {
                    _mm256_loadu_si256(x.quants.as_ptr().add(b * BLOCK) as *const __m256i)
                };
                let ints = _mm256_dpbusd_epi32(start, xv, wv);
                let scale = w.row.scales[b] * x.scales[b];
                *acc = _mm256_fmadd_ps(_mm256_set1_ps(scale), _mm256_cvtepi32_ps(ints), *acc);
            }
        }
        acc.map(|a| hsum(a))
    }

    block_matmul!(
        /// The whole product for quantized weights, with the VNNI block tiles (f32 weights take
        /// [`matmul`]).
        matmul_vnni,
        blocks_tile_vnni,
        dot_q_tile_vnni,
        "avx2,fma,avx512vnni,avx512vl",
        {
            let none = |_: &[&[f32]], _: &[&[f32]], _: &mut [f32]| {
                unreachable!("f32 weights take [`matmul`]")
            };
            Kernels::new(none, (1, 1), none, (1, 1))
        }
    );
}

#[cfg(target_arch = "wasm32")]
pub(crate) mod simd128 {
    use std::arch::wasm32::*;

    use super::{BLOCK, Q8Rows, grid_len};

    #[inline(always)]
    fn hsum(v: v128) -> f32 {
        f32x4_extract_lane::<0>(v)
            + f32x4_extract_lane::<1>(v)
            + f32x4_extract_lane::<2>(v)
            + f32x4_extract_lane::<3>(v)
    }

    /// `acc + a * b`: baseline SIMD128 has no fused multiply-add, so a multiply and an add; the
    /// page's second build (`make pkg`: `pkg/relaxed/`, built with `-C
    /// target-feature=+relaxed-simd`, for browsers that run it) uses relaxed SIMD's
    /// `f32x4.relaxed_madd`, one `vfmadd` on an x86 with FMA. Fused, a product is not rounded
    /// before it is added, so that build's f32 results differ from the baseline's by rounding;
    /// within a build every kernel still sums each pair in one order.
    ///
    /// Measured in the page (Chromium 156, synthetic stories15M f32, 128 tokens a user, 3 rounds
    /// interleaved, aggregate tok/s), fused against not: 917 against 766-769 at 8 users (the f32
    /// grid is bound by arithmetic there), 465 against 400-435 at 1 user (bound by memory).
    #[inline(always)]
    pub(crate) fn mul_add(acc: v128, a: v128, b: v128) -> v128 {
        #[cfg(target_feature = "relaxed-simd")]
        return f32x4_relaxed_madd(a, b, acc);
        #[cfg(not(target_feature = "relaxed-simd"))]
        f32x4_add(acc, f32x4_mul(a, b))
    }

    #[inline(always)]
    pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let mut acc = [f32x4_splat(0.0); 4];
        let mut i = 0;
        // SAFETY: every load is within 0..n of both slices (unaligned loads are allowed).
        unsafe {
            while i + 16 <= n {
                for (k, acc) in acc.iter_mut().enumerate() {
                    let x = v128_load(pa.add(i + 4 * k) as *const v128);
                    let y = v128_load(pb.add(i + 4 * k) as *const v128);
                    *acc = mul_add(*acc, x, y);
                }
                i += 16;
            }
            while i + 4 <= n {
                let x = v128_load(pa.add(i) as *const v128);
                let y = v128_load(pb.add(i) as *const v128);
                acc[0] = mul_add(acc[0], x, y);
                i += 4;
            }
        }
        let v = f32x4_add(f32x4_add(acc[0], acc[1]), f32x4_add(acc[2], acc[3]));
        let mut sum = hsum(v);
        while i < n {
            sum += a[i] * b[i];
            i += 1;
        }
        sum
    }

    /// [`super::quantize_rows_q8_with`], 32 values (a block) at a time.
    pub fn quantize_q8(x: &[f32], out: &mut Q8Rows) {
        let sign = f32x4_splat(-0.0);
        let half = f32x4_splat(0.5);
        for block in x.chunks_exact(BLOCK) {
            // SAFETY: the block holds 32 values.
            let v: [v128; 8] = std::array::from_fn(|k| unsafe {
                v128_load(block.as_ptr().add(4 * k) as *const v128)
            });
            // `pmax` keeps the first operand when the second is NaN, as `f32::max` does.
            let m = v
                .iter()
                .fold(f32x4_splat(0.0), |m, v| f32x4_pmax(m, f32x4_abs(*v)));
            let amax = f32x4_extract_lane::<0>(m)
                .max(f32x4_extract_lane::<1>(m))
                .max(f32x4_extract_lane::<2>(m).max(f32x4_extract_lane::<3>(m)));
            let scale = amax / 127.0;
            let inv = f32x4_splat(if scale > 0.0 { 1.0 / scale } else { 0.0 });
            out.scales.push(scale);
            // Round half away from zero: add 0.5 with r's sign, then truncate (as the scalar one).
            let ints = v.map(|v| {
                let r = f32x4_mul(v, inv);
                i32x4_trunc_sat_f32x4(f32x4_add(r, v128_or(half, v128_and(r, sign))))
            });
            let words: [v128; 4] =
                std::array::from_fn(|k| i16x8_narrow_i32x4(ints[2 * k], ints[2 * k + 1]));
            let bytes = [
                i8x16_narrow_i16x8(words[0], words[1]),
                i8x16_narrow_i16x8(words[2], words[3]),
            ];
            let at = out.quants.len();
            out.quants.resize(at + BLOCK, 0);
            for (k, b) in bytes.iter().enumerate() {
                // SAFETY: the 32 bytes just made room for.
                unsafe { v128_store(out.quants.as_mut_ptr().add(at + 16 * k) as *mut v128, *b) };
            }
        }
    }

    /// [`super::weighted_sum`]: 16 lanes of the output at a time held in 4 registers over all
    /// positions, then 4, then one; each lane gets the scalar loop's multiply and add in the same
    /// order.
    pub fn weighted_sum(p: &[f32], values: &[f32], stride: usize, out: &mut [f32]) {
        let hs = out.len();
        let pv = values.as_ptr();
        let mut i = 0;
        // SAFETY: every load is within value j's `hs` lanes (asserted by the caller), every
        // store within `out`.
        unsafe {
            while i + 16 <= hs {
                let mut acc = [f32x4_splat(0.0); 4];
                for (j, &p) in p.iter().enumerate() {
                    let a = f32x4_splat(p);
                    for (k, acc) in acc.iter_mut().enumerate() {
                        let v = v128_load(pv.add(j * stride + i + 4 * k) as *const v128);
                        *acc = mul_add(*acc, a, v);
                    }
                }
                for (k, acc) in acc.iter().enumerate() {
                    v128_store(out.as_mut_ptr().add(i + 4 * k) as *mut v128, *acc);
                }
                i += 16;
            }
            while i + 4 <= hs {
                let mut acc = f32x4_splat(0.0);
                for (j, &p) in p.iter().enumerate() {
                    let v = v128_load(pv.add(j * stride + i) as *const v128);
                    acc = mul_add(acc, f32x4_splat(p), v);
                }
                v128_store(out.as_mut_ptr().add(i) as *mut v128, acc);
                i += 4;
            }
        }
        super::weighted_sum_from(i, p, values, stride, out);
    }

    /// `M` f32 weight rows against `N` activation rows, `out[k][j] = w[k] . x[j]`, with one
    /// 4-lane accumulator a pair: each 4-wide piece of a weight row is loaded once for all `N`
    /// activation rows and each piece of an activation row once for all `M` weight rows, and
    /// every pair is summed in one order (4 lanes at a time from the start, the lanes left to
    /// right, then the tail), whatever `M` and `N`. Baseline SIMD128 has no fused multiply-add,
    /// so a product is a multiply and an add.
    ///
    /// Measured in the page (Chromium 156, synthetic stories15M f32, 128 tokens, aggregate tok/s,
    /// 2-3 rounds interleaved, against the 4-accumulator row kernel this replaced): at batch 1,
    /// 4 rows at a time 431-456 against 367-376 (3 rows 411, 2 rows 388); at 8 users, (2, 4)
    /// 820-839 against 679 ((3, 3) 797, (4, 2) 747, (2, 3) 735, (1, 4) 659, (4, 4) 618). The
    /// loop is deliberately not unrolled: unrolled 4 times in the source, LLVM loaded every
    /// piece first and V8 spilled the accumulators to the stack (8 users: 712-734).
    #[inline(always)]
    fn dot_f32_grid<const M: usize, const N: usize>(
        w: &[&[f32]; M],
        x: &[&[f32]; N],
    ) -> [[f32; N]; M] {
        let n = grid_len(w, x);
        let mut acc = [[f32x4_splat(0.0); N]; M];
        let mut i = 0;
        // SAFETY: every load is within 0..n of each weight row and each activation row.
        unsafe {
            let step = |acc: &mut [[v128; N]; M], i: usize| {
                let wv: [v128; M] =
                    std::array::from_fn(|k| v128_load(w[k].as_ptr().add(i) as *const v128));
                for (j, x) in x.iter().enumerate() {
                    let xv = v128_load(x.as_ptr().add(i) as *const v128);
                    for (acc, wv) in acc.iter_mut().zip(&wv) {
                        acc[j] = mul_add(acc[j], *wv, xv);
                    }
                }
            };
            while i + 4 <= n {
                step(&mut acc, i);
                i += 4;
            }
        }
        // Loops rather than `from_fn`: LLVM kept `from_fn` behind a call, with the accumulators
        // stored to the stack for it and read back. A `perf` profile of the page's worker (8
        // users, f32) had 6.6% of its samples in that call, gone with the loops; the page's
        // aggregate tok/s moved within noise (7 rounds, both orders: 506 -> 555, 616 -> 607).
        let mut sums = [[0.0; N]; M];
        for k in 0..M {
            for j in 0..N {
                let mut sum = hsum(acc[k][j]);
                for l in i..n {
                    sum += w[k][l] * x[j][l];
                }
                sums[k][j] = sum;
            }
        }
        sums
    }

    /// Every row of `w` against every row of `x`, `out[k * x.len() + j]`: up to 4 weight rows
    /// against one activation row, or up to 2 against up to 4 (see [`dot_f32_grid`]).
    #[inline(always)]
    pub fn f32_grid(w: &[&[f32]], x: &[&[f32]], out: &mut [f32]) {
        f32_grid_shapes!(dot_f32_grid, w, x, out)
    }
}
