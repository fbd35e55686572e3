//! Q8_0, Q4_0, Q5_0 and Q6_K weights (and the types held in their forms: Q4_1 and Q4_K as Q4_0's
//! nibbles, Q5_1 and Q5_K as Q5_0's, with their blocks' offsets) regrouped 8 rows at a time, for
//! the products of prompts, decode and batched decode: AVX2's (`avx2.rs`), and in wasm relaxed
//! SIMD's byte products for Q4_0 and 16-bit products for the others and the baseline build's Q4_0
//! (`wasm.rs`).
//!
//! Row by row (`cpu/matmul.rs`), every block is loaded (Q4_0 unpacked), its signs moved, and its
//! products widened to i32, converted and scaled once per activation row: 8 to 9 instructions for
//! 32 products. Here the 8 rows of a group lie interleaved 4 bytes at a time (the layout of
//! llama.cpp's repacked `q4_0_8x8` CPU kernels; this code is our own), so that one 256-bit
//! register holds 4 values of each of 8 rows, four activation bytes broadcast to every lane, and
//! one `maddubs` makes 8 rows' products at once. A block is converted and scaled once for all 8
//! rows.
//! - Q4_0: the nibbles (0..=15) are `maddubs`' unsigned operand as they are. A block's 8 pair sums
//!   of a lane add up in 16 bits (at most 8 * 2 * 15 * 128 = 30720, so they cannot overflow), are
//!   widened once and corrected by `-8 * sum(x)` (the nibbles stand 8 above their values): about
//!   3 instructions for 32 products.
//! - Q8_0: the weights' signs move onto the broadcast activations (`sign`), and each `maddubs`
//!   (up to 2 * 127 * 127 a pair) is widened at once: about 5 instructions for 32 products.
//! - Q5_0: Q4_0's nibbles in chunks 0..4 and the fifth bits in chunk 4; a chunk's codes (0..=31)
//!   are its nibbles with the bits shifted in, then multiplied as Q4_0's, widened a chunk at a
//!   time (a block's sums would pass 16 bits).
//!
//! Layout of a `[rows, cols]` matrix, `groups = rows / 8` rounded up, `blocks = cols / 32`, and
//! `bytes` = the format's payload a block of one row (32 Q8_0, 16 Q4_0, 20 Q5_0, 36 Q6_K):
//! - `scales[(g * blocks + b) * 8 + r]`: row `8 g + r`'s scale of block `b` (0 for the rows that
//!   pad the last group), in f32, or natively in f16 where every scale is one (`Scales`);
//! - `quants[(g * blocks + b) * 8 * bytes + k * 32 + r * 4 + j]`: byte `4 k + j` of that block
//!   (Q8_0: value `4 k + j`; Q4_0, in GGUF's order: values `4 k + j` in the low nibble and
//!   `16 + 4 k + j` in the high one; Q5_0 the same for `k` < 4, then its fifth bits).
//!
//! Every (weight row, activation row) pair is summed block by block in one order whatever the
//! batch, so batched decode equals batch 1.

#[cfg(target_arch = "x86_64")]
mod avx2;
mod group;
#[cfg(target_arch = "wasm32")]
mod wasm;

pub use group::GROUP;

use crate::cpu::isa::Isa;
use crate::cpu::packed::group::Act;
use crate::cpu::tile::Q8Rows;
use crate::formats::{Activations, BLOCK, Blocks, Format, RunFormat, with_format};

/// A Q8_0 or Q4_0 matrix in groups of 8 interleaved rows (see the module's documentation).
#[derive(Debug, Clone, PartialEq)]
pub struct Packed {
    format: Format,
    rows: usize,
    cols: usize,
    scales: Scales,
    quants: Vec<u8>,
    /// The row-major blocks' offsets, as they were (applied after the product: `cpu::matmul`).
    offsets: Vec<f32>,
    activations: Activations,
}

/// A packed matrix's block scales: f32, or, natively on x86-64, f16 where every scale is one (a
/// GGUF's Q8_0, Q4_0 and Q5_0 scales are f16, widened exactly): 2 bytes a block of a row instead
/// of 4, which decode reads once a token (Q8_0 34 bytes a block of 32 weights instead of 36, Q4_0
/// 18 instead of 20). The kernels widen them again (`vcvtph2ps`), so the products are the same
/// bits. In wasm the scales stay f32 (SIMD128 has no conversion from f16).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
enum Scales {
    F32(Vec<f32>),
    F16(Vec<u16>),
}

/// [`Scales`] borrowed, or some of them.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ScalesRef<'a> {
    F32(&'a [f32]),
    F16(&'a [u16]),
}

impl Scales {
    /// The scales as f16 where that keeps every one exactly (natively on x86-64; see [`Scales`]).
    fn new(scales: Vec<f32>) -> Scales {
        #[cfg(target_arch = "x86_64")]
        if scales
            .iter()
            .all(|&s| half::f16::from_f32(s).to_f32().to_bits() == s.to_bits())
        {
            return Scales::F16(
                scales
                    .iter()
                    .map(|&s| half::f16::from_f32(s).to_bits())
                    .collect(),
            );
        }
        Scales::F32(scales)
    }

    fn view(&self) -> ScalesRef<'_> {
        match self {
            Scales::F32(s) => ScalesRef::F32(s),
            Scales::F16(s) => ScalesRef::F16(s),
        }
    }

    fn bytes(&self) -> usize {
        match self {
            Scales::F32(s) => 4 * s.len(),
            Scales::F16(s) => 2 * s.len(),
        }
    }
}

impl<'a> ScalesRef<'a> {
    fn get(&self, i: usize) -> f32 {
        match self {
            ScalesRef::F32(s) => s[i],
            ScalesRef::F16(s) => half::f16::from_bits(s[i]).to_f32(),
        }
    }

    fn slice(&self, range: std::ops::Range<usize>) -> ScalesRef<'a> {
        match *self {
            ScalesRef::F32(s) => ScalesRef::F32(&s[range]),
            ScalesRef::F16(s) => ScalesRef::F16(&s[range]),
        }
    }
}

impl Packed {
    /// Regroup the row-major blocks of a `[rows, cols]` matrix, in their own memory: a group's 8
    /// rows take the same bytes in both layouts, so each group is copied aside (a few KB) and
    /// written back regrouped. Packing a copy held two of the largest matrix while loading (native
    /// peak RSS loading stories15M q8: 141.2 MB against 134.2 unpacked; see README).
    pub fn pack(rows: usize, cols: usize, row_major: Blocks) -> Packed {
        let Blocks {
            format,
            mut quants,
            mut scales,
            offsets,
            activations,
        } = row_major;
        assert_eq!(cols % BLOCK, 0, "rows of blocks are whole blocks");
        let blocks = cols / BLOCK;
        let bytes = format.payload();
        assert!(quants.len() == rows * blocks * bytes && scales.len() == rows * blocks);
        let groups = rows.div_ceil(GROUP);
        // Rows that pad the last group: scale 0, and values 0.
        quants.resize(groups * GROUP * blocks * bytes, format.zero_byte());
        scales.resize(groups * GROUP * blocks, 0.0);
        let (group_bytes, group_scales) = (GROUP * blocks * bytes, GROUP * blocks);
        let (mut rows_bytes, mut rows_scales) =
            (vec![0u8; group_bytes], vec![0.0f32; group_scales]);
        for g in 0..groups {
            let quants = &mut quants[g * group_bytes..][..group_bytes];
            let scales = &mut scales[g * group_scales..][..group_scales];
            rows_bytes.copy_from_slice(quants);
            rows_scales.copy_from_slice(scales);
            for lane in 0..GROUP {
                for b in 0..blocks {
                    scales[b * GROUP + lane] = rows_scales[lane * blocks + b];
                    let block = &rows_bytes[(lane * blocks + b) * bytes..][..bytes];
                    for (k, four) in block.chunks_exact(4).enumerate() {
                        quants[b * GROUP * bytes + k * 32 + lane * 4..][..4].copy_from_slice(four);
                    }
                }
            }
        }
        Packed {
            format,
            rows,
            cols,
            scales: Scales::new(scales),
            quants,
            offsets,
            activations,
        }
    }

    /// The row-major blocks again, as [`Packed::pack`] took them.
    pub fn blocks(&self) -> Blocks {
        self.rows_blocks(0..self.rows)
    }

    /// Rows `range` as row-major blocks of their own (with their offsets): a tied classifier's
    /// row read back as the token embedding's (`HostMatrix::extend_row`).
    pub fn rows_blocks(&self, range: std::ops::Range<usize>) -> Blocks {
        let blocks = self.cols / BLOCK;
        let bytes = self.format.payload();
        let mut quants = Vec::with_capacity(range.len() * blocks * bytes);
        let mut scales = Vec::with_capacity(range.len() * blocks);
        let offsets = if self.offsets.is_empty() {
            Vec::new()
        } else {
            self.offsets[range.start * blocks..range.end * blocks].to_vec()
        };
        for r in range {
            let (g, lane) = (r / GROUP, r % GROUP);
            for b in 0..blocks {
                let at = g * blocks + b;
                scales.push(self.scales.view().get(at * GROUP + lane));
                for k in 0..bytes / 4 {
                    quants.extend_from_slice(
                        &self.quants[at * GROUP * bytes + k * 32 + lane * 4..][..4],
                    );
                }
            }
        }
        Blocks {
            format: self.format,
            quants,
            scales,
            offsets,
            activations: self.activations,
        }
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The blocks' offsets, row-major (empty: all 0).
    pub fn offsets(&self) -> &[f32] {
        &self.offsets
    }

    /// How the activations this matrix multiplies are rounded.
    pub fn activations(&self) -> Activations {
        self.activations
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Bytes the matrix takes, padding rows included.
    pub fn bytes(&self) -> u64 {
        (self.quants.len() + self.scales.bytes() + 4 * self.offsets.len()) as u64
    }

    /// The whole matrix, borrowed.
    pub fn view(&self) -> PackedRows<'_> {
        PackedRows {
            format: self.format,
            rows: self.rows,
            cols: self.cols,
            scales: self.scales.view(),
            quants: &self.quants,
            offsets: &self.offsets,
        }
    }
}

/// A [`Packed`] matrix borrowed for one product, or some of its rows ([`PackedRows::rows`]).
#[derive(Clone, Copy, Debug)]
pub struct PackedRows<'a> {
    format: Format,
    rows: usize,
    cols: usize,
    scales: ScalesRef<'a>,
    quants: &'a [u8],
    offsets: &'a [f32],
}

impl<'a> PackedRows<'a> {
    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The blocks' offsets, row-major (empty: all 0).
    pub fn offsets(&self) -> &'a [f32] {
        self.offsets
    }

    /// Rows `range` alone, whose start is a multiple of [`GROUP`] (whole groups, and the last
    /// group's padding where the range ends at the last row).
    pub fn range(&self, range: std::ops::Range<usize>) -> PackedRows<'a> {
        assert!(range.start.is_multiple_of(GROUP) && range.end <= self.rows);
        let blocks = self.cols / BLOCK;
        let groups = range.start / GROUP..range.end.div_ceil(GROUP);
        let bytes = GROUP * blocks * self.format.payload();
        PackedRows {
            rows: range.len(),
            scales: self
                .scales
                .slice(groups.start * GROUP * blocks..groups.end * GROUP * blocks),
            quants: &self.quants[groups.start * bytes..groups.end * bytes],
            offsets: if self.offsets.is_empty() {
                &[]
            } else {
                &self.offsets[range.start * blocks..range.end * blocks]
            },
            ..*self
        }
    }

    /// Group `g`'s scales and bytes.
    fn group(&self, g: usize) -> (ScalesRef<'a>, &'a [u8]) {
        let blocks = self.cols / BLOCK;
        let bytes = GROUP * self.format.payload();
        (
            self.scales
                .slice(g * blocks * GROUP..(g + 1) * blocks * GROUP),
            &self.quants[g * blocks * bytes..][..blocks * bytes],
        )
    }
}

/// Whether the kernels of `isa` read weights of `format` packed: natively every format, on AVX2
/// and on AVX-512 VNNI machines (the same AVX2 kernels; the row-major VNNI tiles stay for the
/// tests). Measured on an AVX-512 VNNI machine (this project's 2-core AMD EPYC, 2026-11-26, 1
/// thread, decode tok/s, 3 interleaved rounds): Gemma 3 270M as stored, whose Q8_0 classifier is
/// most of its bytes, 46.1 / 47.8 / 46.8 with Q8_0 on the VNNI tiles against 61.1 / 57.5 / 52.3
/// packed; SmolLM2 Q8_0 78.7 / 81.6 / 73.9 against 94.9 / 73.7 / 94.0. In wasm every format
/// (`wasm.rs`), and `cpu::matmul` packs any row-major matrix handed to it there. Elsewhere the
/// row-major kernels of `cpu/` are the ones measured.
pub fn packs(isa: Isa, format: Format) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let _ = format;
        matches!(isa, Isa::Avx2 | Isa::Avx512Vnni)
    }
    #[cfg(target_arch = "wasm32")]
    {
        let _ = format;
        isa == Isa::Simd128
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "wasm32")))]
    {
        let _ = (isa, format);
        false
    }
}

/// `out[i * rows + r] = dot(weight row r, activation row i)` for `t` int8 activation rows `xq`,
/// with `isa`'s kernel (AVX2, or wasm's; see [`packs`]) and a scalar loop elsewhere.
pub fn matmul(isa: Isa, w: &Packed, xq: &Q8Rows, t: usize, out: &mut [f32]) {
    matmul_rows(isa, w.view(), xq, t, out)
}

/// [`matmul`] of some of a matrix's rows.
pub fn matmul_rows(isa: Isa, w: PackedRows, xq: &Q8Rows, t: usize, out: &mut [f32]) {
    with_format!(w.format, F => matmul_of::<F>(isa, w, xq, t, out))
}

/// [`matmul`] with the kernels compiled for `F`, the format of `w`'s blocks.
fn matmul_of<F: PackedFormat>(isa: Isa, w: PackedRows, xq: &Q8Rows, t: usize, out: &mut [f32]) {
    let (rows, cols) = (w.rows, w.cols);
    let blocks = cols / BLOCK;
    assert!(xq.quants.len() >= t * cols && xq.scales.len() >= t * blocks);
    assert_eq!(out.len(), t * rows);
    // What each block's integer sum starts from: `-bias * sum(x)`, the codes' bias taken back.
    let bias = codes_bias::<F>(isa);
    let offsets: Vec<i32> = if bias != 0 {
        xq.quants[..t * cols]
            .chunks_exact(BLOCK)
            .map(|block| -bias * block.iter().map(|&v| v as i32).sum::<i32>())
            .collect()
    } else {
        vec![0; t * blocks]
    };
    let acts: Vec<Act> = (0..t)
        .map(|i| Act {
            quants: &xq.quants[i * cols..][..cols],
            scales: &xq.scales[i * blocks..][..blocks],
            offsets: &offsets[i * blocks..][..blocks],
        })
        .collect();
    let mut results = [[0.0f32; GROUP]; TILE];
    let tile = tile_rows::<F>(isa);
    let paired = pairs::<F>(isa, &w, t);
    if paired > 0 {
        pair_products::<F>(&w, paired, &acts, tile, out);
    }
    for g in 2 * paired..rows.div_ceil(GROUP) {
        let (scales, quants) = w.group(g);
        let lanes = (rows - g * GROUP).min(GROUP);
        for (i, acts) in acts.chunks(tile).enumerate() {
            let results = &mut results[..acts.len()];
            tile_of::<F>(isa, scales, quants, acts, results);
            for (j, lane_results) in results.iter().enumerate() {
                let at = (i * tile + j) * rows + g * GROUP;
                if lanes == GROUP {
                    // A copy of constant length, made in registers (a call to `memcpy` for
                    // each group took 2% of a q4 step at 8 users).
                    out[at..at + GROUP].copy_from_slice(lane_results);
                } else {
                    out[at..at + lanes].copy_from_slice(&lane_results[..lanes]);
                }
            }
        }
    }
}

/// The most activation rows one kernel call takes.
const TILE: usize = 8;

/// What `isa`'s kernel for `F` adds to the codes it multiplies (its sums start from `-bias *
/// sum(x)`): VNNI's unsigned operand where the format has a VNNI kernel, else the format's own.
fn codes_bias<F: PackedFormat>(isa: Isa) -> i32 {
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512Vnni
        && let Some(bias) = F::VNNI_BIAS
    {
        return bias;
    }
    let _ = isa;
    F::BIAS
}

/// A format's packed kernels on every instruction set: one implementation a format, in the
/// instruction set's file (`avx2.rs`, `wasm.rs`).
#[cfg(target_arch = "x86_64")]
pub(crate) trait PackedFormat: avx2::PackedAvx2 {}
#[cfg(target_arch = "x86_64")]
impl<F: avx2::PackedAvx2> PackedFormat for F {}
#[cfg(target_arch = "wasm32")]
pub(crate) use wasm::PackedWasm as PackedFormat;
#[cfg(not(any(target_arch = "x86_64", target_arch = "wasm32")))]
pub(crate) trait PackedFormat: RunFormat {}
#[cfg(not(any(target_arch = "x86_64", target_arch = "wasm32")))]
impl<F: RunFormat> PackedFormat for F {}

/// How many activation rows `isa`'s kernel takes at once: 4 with AVX2's 16 registers of 256
/// bits, 8 with VNNI's kernel and AVX-512's 32; in wasm as the format's kernel there says
/// (`wasm.rs`).
fn tile_rows<F: PackedFormat>(isa: Isa) -> usize {
    #[cfg(target_arch = "wasm32")]
    if isa == Isa::Simd128 {
        return F::TILE_ROWS;
    }
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512Vnni && F::VNNI_BIAS.is_some() {
        return 8;
    }
    let _ = isa;
    4
}

/// How many pairs of whole groups, from the first, `isa`'s 16-lane kernel takes
/// (`avx2::StagedPair`) for `t` activation rows: none where it has none.
fn pairs<F: PackedFormat>(isa: Isa, w: &PackedRows, t: usize) -> usize {
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512Vnni && F::VNNI_BIAS.is_some() && t >= PAIRED_ROWS {
        return w.rows / GROUP / 2;
    }
    let _ = (isa, w, t);
    0
}

/// The fewest activation rows that take the 16-lane kernel: a prompt's, not decode's. A prompt's
/// products are bound by the `vpdpbusd`s a core issues, and the 16-lane kernel halves them; a
/// decode step's are bound by memory, where two groups read at once were slower. Measured on
/// this project's Intel Xeon (AVX-512 VNNI), 2026-11-28, 1 thread, `bench --concurrency 1,8` on
/// SmolLM2 Q8_0 with 128-token prompts: 8 users' TTFT (their 8 prompts in one pass) 1789 / 1844
/// ms on the 8-lane kernel, 1350 / 1351 on this one (2 interleaved rounds); in another run of 3
/// rounds, 8 decode rows' products 14.0 / 14.1 / 14.3 ms a step on the 8-lane kernel, 15.2 /
/// 14.9 / 15.4 on this one.
#[cfg(target_arch = "x86_64")]
const PAIRED_ROWS: usize = 9;

/// The first `paired` pairs of whole groups of `w` against every activation row in `acts`, a tile
/// of `tile` rows at a time, on AVX-512 VNNI's 16-lane kernel: each pair staged once
/// (`avx2::StagedPair`) for all of the tiles.
#[cfg(target_arch = "x86_64")]
fn pair_products<F: PackedFormat>(
    w: &PackedRows,
    paired: usize,
    acts: &[Act],
    tile: usize,
    out: &mut [f32],
) {
    let mut staged = avx2::StagedPair::default();
    let mut results = [[0.0f32; 2 * GROUP]; TILE];
    for pair in 0..paired {
        let g = 2 * pair;
        let ((first_scales, first), (second_scales, second)) = (w.group(g), w.group(g + 1));
        // SAFETY: `pairs` gives pairs on Avx512Vnni only, produced after detecting AVX2, FMA,
        // F16C, AVX512F, AVX512-VNNI and AVX512-VL.
        match (first_scales, second_scales) {
            (ScalesRef::F32(a), ScalesRef::F32(b)) => unsafe {
                staged.stage::<F, f32>([a, b], [first, second])
            },
            (ScalesRef::F16(a), ScalesRef::F16(b)) => unsafe {
                staged.stage::<F, u16>([a, b], [first, second])
            },
            _ => unreachable!("a matrix's scales are all f32 or all f16"),
        }
        for (i, acts) in acts.chunks(tile).enumerate() {
            let results = &mut results[..acts.len()];
            // SAFETY: as above.
            unsafe { staged.tile::<F>(acts, results) };
            for (j, lane_results) in results.iter().enumerate() {
                let at = (i * tile + j) * w.rows + g * GROUP;
                out[at..at + 2 * GROUP].copy_from_slice(lane_results);
            }
        }
    }
}
#[cfg(not(target_arch = "x86_64"))]
fn pair_products<F: PackedFormat>(_: &PackedRows, _: usize, _: &[Act], _: usize, _: &mut [f32]) {
    unreachable!("pairs are x86-64's")
}

/// One group of 8 weight rows against up to [`TILE`] activation rows.
fn tile_of<F: PackedFormat>(
    isa: Isa,
    scales: ScalesRef,
    quants: &[u8],
    x: &[Act],
    out: &mut [[f32; GROUP]],
) {
    #[cfg(target_arch = "x86_64")]
    {
        let vnni = isa == Isa::Avx512Vnni && F::VNNI_BIAS.is_some();
        let avx2 = matches!(isa, Isa::Avx2 | Isa::Avx512Vnni);
        // SAFETY: Avx512Vnni is only produced after detecting AVX2, FMA, AVX512-VNNI and
        // AVX512-VL; both after detecting AVX2, FMA and F16C.
        match scales {
            ScalesRef::F32(s) if vnni => unsafe { avx2::tile_vnni::<F, f32>(s, quants, x, out) },
            ScalesRef::F16(s) if vnni => unsafe { avx2::tile_vnni::<F, u16>(s, quants, x, out) },
            ScalesRef::F32(s) if avx2 => unsafe { avx2::tile::<F, f32>(s, quants, x, out) },
            ScalesRef::F16(s) if avx2 => unsafe { avx2::tile::<F, u16>(s, quants, x, out) },
            _ => scalar_tile::<F>(scales, quants, x, out),
        }
    }
    #[cfg(target_arch = "wasm32")]
    match scales {
        ScalesRef::F32(s) if isa == Isa::Simd128 => F::tile(s, quants, x, out),
        _ => scalar_tile::<F>(scales, quants, x, out),
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "wasm32")))]
    {
        let _ = isa;
        scalar_tile::<F>(scales, quants, x, out);
    }
}

/// The scalar kernel: the format's reference products (each lane's block gathered from the
/// group's chunks), with the same integers and the same scaling as the AVX2 one, lane by lane.
fn scalar_tile<F: RunFormat>(
    scales: ScalesRef,
    quants: &[u8],
    x: &[Act],
    out: &mut [[f32; GROUP]],
) {
    let bytes = F::PAYLOAD;
    let mut payload = [0u8; 64];
    let payload = &mut payload[..bytes];
    for (x, out) in x.iter().zip(out.iter_mut()) {
        let mut acc = [0.0f32; GROUP];
        for (b, block) in quants.chunks_exact(GROUP * bytes).enumerate() {
            let xb = &x.quants[b * BLOCK..][..BLOCK];
            for (lane, acc) in acc.iter_mut().enumerate() {
                for (k, four) in payload.chunks_exact_mut(4).enumerate() {
                    four.copy_from_slice(&block[k * 32 + lane * 4..][..4]);
                }
                let sum = F::dot_block(payload, xb);
                let scale = scales.get(b * GROUP + lane) * x.scales[b];
                *acc = (sum as f32).mul_add(scale, *acc);
            }
        }
        *out = acc;
    }
}
