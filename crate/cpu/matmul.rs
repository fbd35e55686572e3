//! Matrix products on the CPU: f32 rows, and weight blocks against int8-quantized activations
//! (Q8_0's bytes; Q4_0's nibbles, which also hold Q4_1 and Q4_K's; Q5_0's, which also hold Q5_1
//! and Q5_K's; Q6_K's; each block with its offset where the stored type has minimums), each
//! instruction set's kernels (`scalar.rs`, `avx2.rs`, `simd128.rs`; packed
//! groups of 8 rows in `packed/`) run over tiles of weight rows and activation rows here.
//!
//! Quantized dot products follow the idea of llama.cpp's `ggml_vec_dot_q8_0_q8_0`: both sides are
//! blocks of 32 integers with one scale, so a block's products are summed exactly in integers and
//! scaled once. Weight blocks hold values in -127..=127 (Q8_0), 0..=15 meaning -8..=7 (Q4_0) or
//! 0..=31 meaning -16..=15 (Q5_0), so the 16-bit pair sums of AVX2's `maddubs` cannot saturate. Each format's kernels are compiled
//! for its `RunFormat` type; a matrix's [`Format`] picks them once a product.
//!
//! Layouts (row-major, one row per output unit; `formats/` defines each block):
//! - Q8_0: `quants[r * cols + i]` as i8, `scales[r * cols / 32 + b]`.
//! - Q4_0: 16 bytes per block; byte `j` holds value `j` in its low nibble and value `j + 16` in
//!   its high nibble (GGUF's order), stored as `value + 8`.
//!
//! On AVX2 machines and in wasm the model's Q8_0 and Q4_0 matrices are regrouped 8 rows at a time
//! when they load, and `matmul` hands them to `packed/`. SIMD128's block kernels are only there:
//! a row-major matrix handed to `matmul` in wasm (the tests') is packed for that product.

#[cfg(target_arch = "x86_64")]
use crate::cpu::avx2;
use crate::cpu::isa::Isa;
#[cfg(target_arch = "wasm32")]
use crate::cpu::packed::Packed;
use crate::cpu::packed::{self, GROUP, PackedRows};
use crate::cpu::scalar;
#[cfg(target_arch = "wasm32")]
use crate::cpu::simd128;
use crate::cpu::tile::{BlockRow, Kernels, Matmul, Q8Rows, TILE, row_by_row};
#[cfg(target_arch = "wasm32")]
use crate::formats::Blocks;
use crate::formats::{Activations, BLOCK, Format, with_format};

/// The stored weights of a matrix, borrowed for one product.
#[derive(Clone, Copy)]
pub enum WeightRows<'a> {
    F32(&'a [f32]),
    /// Row-major blocks of one format (see [`crate::formats::Blocks`]; `offsets` empty: all 0).
    Blocks {
        format: Format,
        quants: &'a [u8],
        scales: &'a [f32],
        offsets: &'a [f32],
    },
    /// Blocks in groups of 8 interleaved rows (`packed/`).
    Packed(PackedRows<'a>),
}

impl<'a> WeightRows<'a> {
    /// Rows `range` of a matrix whose rows are `cols` wide, alone (packed: the range starts at a
    /// whole group of 8 rows).
    pub fn range(self, range: std::ops::Range<usize>, cols: usize) -> WeightRows<'a> {
        match self {
            WeightRows::F32(d) => WeightRows::F32(&d[range.start * cols..range.end * cols]),
            WeightRows::Blocks {
                format,
                quants,
                scales,
                offsets,
            } => {
                let blocks = cols / BLOCK;
                let (b, payload) = (range.start * blocks..range.end * blocks, format.payload());
                WeightRows::Blocks {
                    format,
                    quants: &quants[b.start * payload..b.end * payload],
                    scales: &scales[b.clone()],
                    offsets: if offsets.is_empty() { &[] } else { &offsets[b] },
                }
            }
            WeightRows::Packed(packed) => WeightRows::Packed(packed.range(range)),
        }
    }

    /// How many rows a part of a split must be a multiple of: a packed group's.
    pub fn part_rows(&self) -> usize {
        match self {
            WeightRows::Packed(_) => GROUP,
            _ => 1,
        }
    }
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
    let m = Matmul {
        rows,
        cols,
        x,
        xq,
        t,
    };
    let offsets = match w {
        WeightRows::Packed(packed) => {
            assert_eq!((packed.rows(), packed.cols()), (rows, cols));
            packed::matmul_rows(isa, packed, xq, t, out);
            packed.offsets()
        }
        WeightRows::F32(data) => {
            f32_product(isa, &m, data, out);
            &[]
        }
        WeightRows::Blocks {
            format,
            quants,
            scales,
            offsets,
        } => {
            blocks_product(isa, &m, format, BlockRow { quants, scales }, out);
            offsets
        }
    };
    if !offsets.is_empty() {
        add_offsets(isa, offsets, &m, out);
    }
}

/// The offsets' part of a product with blocks that have them (Q4_1, Q5_1, Q4_K, Q5_K as they are
/// stored): a block's `offset * sum(x)`, summed along the row. The activations' block sums are
/// taken from their int8 blocks as llama.cpp takes them: for Q8_0 rounding, as its Q8_1 blocks
/// carry them (`sum(codes) * max |x| / 127`, the unrounded scale, rounded to f16); for Q8_K, as
/// its K-quant products use the integer sums (`sum(codes) * scale`).
/// It is an f32 product of `[rows, cols / 32]` offsets with `[t, cols / 32]` sums: a 32nd of the
/// main product's multiply-adds, on the f32 kernels.
fn add_offsets(isa: Isa, offsets: &[f32], m: &Matmul, out: &mut [f32]) {
    let blocks = m.cols / BLOCK;
    debug_assert_eq!(offsets.len(), m.rows * blocks);
    let sums: Vec<f32> = m.xq.quants[..m.t * m.cols]
        .chunks_exact(BLOCK)
        .zip(&m.xq.scales)
        .zip(m.x.chunks_exact(BLOCK))
        .map(|((codes, &scale), x)| {
            let sum = codes.iter().map(|&c| c as i32).sum::<i32>() as f32;
            match m.xq.activations {
                Activations::Q8_0 => {
                    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                    half::f16::from_f32(sum * (amax / 127.0)).to_f32()
                }
                Activations::Q8K => sum * scale,
            }
        })
        .collect();
    let sums_by = Matmul {
        rows: m.rows,
        cols: blocks,
        x: &sums,
        xq: m.xq,
        t: m.t,
    };
    let mut part = vec![0.0; out.len()];
    f32_product(isa, &sums_by, offsets, &mut part);
    for (out, part) in out.iter_mut().zip(part) {
        *out += part;
    }
}

/// The fewest activation rows that take AVX-512's f32 grids (`avx2::matmul_f32_evex`): a prompt's.
/// Batched decode keeps AVX2's (compiled with AVX-512 enabled, its loops decoded stories15M f32 a
/// tenth slower at 8 users).
#[cfg(target_arch = "x86_64")]
const EVEX_F32_ROWS: usize = 16;

/// The product of f32 weights `data` with `isa`'s f32 kernels.
fn f32_product(isa: Isa, m: &Matmul, data: &[f32], out: &mut [f32]) {
    match isa {
        Isa::Scalar => m.f32_tiled(
            data,
            out,
            Kernels::new(
                row_by_row(scalar::f32_tile),
                (1, 1),
                row_by_row(scalar::f32_tile),
                (1, TILE),
            ),
        ),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: only produced after detecting AVX2, FMA, AVX512-VNNI and AVX512-VL (which
        // implies AVX512F). A prompt's rows take 4 x 4 grids in EVEX's 32 registers.
        Isa::Avx512Vnni if m.t >= EVEX_F32_ROWS => unsafe { avx2::matmul_f32_evex(m, data, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: both are only produced after detecting AVX2 and FMA. f32 weights take
        // the AVX2 loops on a VNNI machine too (compiled with AVX-512 enabled, they
        // decoded stories15M f32 a tenth slower at 8 users).
        Isa::Avx2 | Isa::Avx512Vnni => unsafe { avx2::matmul_f32(m, data, out) },
        #[cfg(target_arch = "wasm32")]
        Isa::Simd128 => m.f32_tiled(
            data,
            out,
            // Closures marked to inline, so that each kernel's loops inline into its
            // `grouped`: handed over as function items, the block kernels (since moved to
            // `packed/`) stayed behind a call once per weight row and tile (page,
            // stories15M, 3 rounds: q8 676 -> 707 tok/s at 1 user, 862 -> 891 at 8; q4
            // 563 -> 592 and 807 -> 810 with the closures).
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

/// The product of `blocks` (the whole row-major matrix) of `format` with `isa`'s block kernels,
/// compiled for the format's type.
fn blocks_product(isa: Isa, m: &Matmul, format: Format, blocks: BlockRow, out: &mut [f32]) {
    // SIMD128's block kernels read 8-row groups only (`packed/`): the model's matrices are
    // packed as they load, and a row-major one handed here (the tests' and the kernel check's)
    // is packed for this product.
    #[cfg(target_arch = "wasm32")]
    if isa == Isa::Simd128 {
        let blocks = Blocks {
            format,
            quants: blocks.quants.to_vec(),
            scales: blocks.scales.to_vec(),
            offsets: Vec::new(),
            activations: m.xq.activations,
        };
        return packed::matmul(isa, &Packed::pack(m.rows, m.cols, blocks), m.xq, m.t, out);
    }
    with_format!(format, F => match isa {
        Isa::Scalar => m.blocks_tiled::<F>(
            blocks,
            out,
            &[],
            Kernels::new(
                row_by_row(scalar::blocks_tile::<F>),
                (1, 1),
                row_by_row(scalar::blocks_tile::<F>),
                (1, TILE),
            ),
        ),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx512Vnni` is only produced after detecting AVX2, FMA, AVX512-VNNI and
        // AVX512-VL. VNNI multiplies unsigned by signed bytes: the activations move to 1..=255
        // (x + 128), made once here, not once per weight row, and each weight block's 128 * sum
        // is taken back once for the whole tile.
        Isa::Avx512Vnni => unsafe {
            let prepared: Vec<u8> = m.xq.quants[..m.t * m.cols].iter().map(|&q| (q as u8) ^ 0x80).collect();
            avx2::matmul_vnni::<F>(m, blocks, &prepared, out)
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: only produced after detecting AVX2 and FMA.
        Isa::Avx2 => unsafe { avx2::matmul_blocks::<F>(m, blocks, &[], out) },
        #[cfg(target_arch = "wasm32")]
        Isa::Simd128 => unreachable!("packed above"),
    })
}
