//! The packed kernels for AVX2: one generic loop over a group's blocks, and each format's share of
//! it ([`PackedAvx2`]): how a chunk of 32 bytes (4 of each of 8 rows) becomes products with the
//! broadcast activations, and how a block's sums become 8 i32 lanes.

use std::arch::x86_64::*;

use crate::cpu::packed::group::{Act, GROUP, checked_group};
use crate::formats::{BLOCK, Q4_0, Q5_0Run, Q6KRun, Q8_0, RunFormat};

/// A format's share of the AVX2 packed kernel.
pub(crate) trait PackedAvx2: RunFormat {
    /// The chunks of 32 bytes that hold a block's codes (those after them hold its sub-block
    /// scales).
    const CHUNKS: usize;

    /// What chunks `0..CHUNKS / 2` and `CHUNKS / 2..` multiply their 16-bit pair sums by, as
    /// 16-bit lanes (2 a row): 1 where a block has one scale.
    ///
    /// # Safety
    /// A machine with AVX2; `block` points to the group's block whole.
    #[inline(always)]
    unsafe fn multipliers(_block: *const u8) -> [__m256i; 2] {
        // SAFETY: AVX2, the caller's.
        unsafe { [_mm256_set1_epi16(1); 2] }
    }

    /// Chunk `k`'s 32 bytes (4 of each of 8 rows) of the group's block at `block`, in the forms
    /// [`products`](Self::products) takes: by default signed bytes (Q8_0's), as their magnitudes
    /// and themselves (for their signs).
    ///
    /// # Safety
    /// A machine with AVX2; `block` points to the group's block whole.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn chunk(block: *const u8, k: usize) -> [__m256i; 2] {
        // SAFETY: the caller's.
        let v = unsafe { load(block, k) };
        [_mm256_sign_epi8(v, v), v]
    }

    /// `sum` plus chunk `k`'s products with activation row `x` of block `b`, their pair sums
    /// multiplied by `mult` (see [`multipliers`](Self::multipliers)). By default signed bytes':
    /// the weights' signs move onto the broadcast activations (`sign`), and each `maddubs` (up to
    /// 2 * 127 * 127 a pair) is widened at once.
    ///
    /// # Safety
    /// A machine with AVX2; `x` holds block `b` whole.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn products(
        w: [__m256i; 2],
        x: &Act,
        b: usize,
        k: usize,
        sum: __m256i,
        mult: __m256i,
    ) -> __m256i {
        // SAFETY: the caller's.
        let signed = _mm256_sign_epi8(unsafe { four(x, b, k) }, w[1]);
        let pairs = _mm256_maddubs_epi16(w[0], signed);
        _mm256_add_epi32(sum, _mm256_madd_epi16(pairs, mult))
    }

    /// A block's sums as 8 i32 lanes (a lane a row), the codes' bias taken back (`offset`): by
    /// default the sums as they are (no bias).
    ///
    /// # Safety
    /// A machine with AVX2.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn finish(sum: __m256i, _offset: i32) -> __m256i {
        sum
    }

    /// What the VNNI kernel ([`dot_vnni`]) adds to the codes it multiplies, so that they are
    /// `vpdpbusd`'s unsigned operand (its sums then start from `-VNNI_BIAS * sum(x)`); `None`
    /// where the format has no VNNI kernel (its sums take the AVX2 one).
    const VNNI_BIAS: Option<i32> = None;

    /// Whether a chunk's bytes hold two values each (nibbles, Q4_0's and Q5_0's): [`chunk`]
    /// gives values `4 k..4 k + 4` and `16 + 4 k..` of each row apart, and each meets its own
    /// activations.
    ///
    /// [`chunk`]: Self::chunk
    const HALVES: bool = false;

    /// Chunk `k`'s 32 bytes as `vpdpbusd`'s unsigned operand(s): by default [`chunk`]'s (the
    /// nibbles' codes are unsigned as they are).
    ///
    /// # Safety
    /// A machine with AVX2, AVX-512 VNNI and VL; `block` points to the group's block whole.
    ///
    /// [`chunk`]: Self::chunk
    #[inline]
    #[target_feature(enable = "avx2,fma,avx512vnni,avx512vl")]
    unsafe fn vnni_chunk(block: *const u8, k: usize) -> [__m256i; 2] {
        // SAFETY: the same instructions as `chunk`'s, on the same machine; the caller's.
        unsafe { Self::chunk(block, k) }
    }

    /// `sum` plus chunk `k`'s products with activation row `x` of block `b`, by `vpdpbusd` (two
    /// where the chunk holds [`HALVES`](Self::HALVES)).
    ///
    /// # Safety
    /// A machine with AVX2, AVX-512 VNNI and VL; `x` holds block `b` whole.
    #[inline]
    #[target_feature(enable = "avx2,fma,avx512vnni,avx512vl")]
    unsafe fn vnni_products(w: [__m256i; 2], x: &Act, b: usize, k: usize, sum: __m256i) -> __m256i {
        // SAFETY: the caller's.
        let sum = _mm256_dpbusd_epi32(sum, w[0], unsafe { four(x, b, k) });
        if Self::HALVES {
            // SAFETY: as above.
            _mm256_dpbusd_epi32(sum, w[1], unsafe { four(x, b, k + 4) })
        } else {
            sum
        }
    }
}

/// Chunk `k` of the group's block at `block`.
///
/// # Safety
/// `block` points to the group's block whole.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn load(block: *const u8, k: usize) -> __m256i {
    // SAFETY: the caller's.
    unsafe { _mm256_loadu_si256(block.add(k * 32) as *const __m256i) }
}

/// A chunk's nibbles split: values `4 k..4 k + 4` (low) and `16 + 4 k..` (high) of 8 rows.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn split_nibbles(v: __m256i) -> [__m256i; 2] {
    let mask = _mm256_set1_epi8(0x0f);
    [
        _mm256_and_si256(v, mask),
        _mm256_and_si256(_mm256_srli_epi16(v, 4), mask),
    ]
}

/// Four activation bytes, `4 k..4 k + 4` of block `b`, in every lane.
///
/// # Safety
/// `x` holds block `b` whole.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn four(x: &Act, b: usize, k: usize) -> __m256i {
    // SAFETY: the caller's.
    _mm256_set1_epi32(unsafe { four_i32(x, b, k) })
}

/// [`four`]'s bytes as one `i32`.
///
/// # Safety
/// `x` holds block `b` whole.
#[inline(always)]
unsafe fn four_i32(x: &Act, b: usize, k: usize) -> i32 {
    // SAFETY: the caller's.
    unsafe { (x.quants.as_ptr().add(b * BLOCK + 4 * k) as *const i32).read_unaligned() }
}

/// Q4_0: the nibbles (0..=15) are `maddubs`' unsigned operand as they are; a block's pair sums add
/// up in 16 bits (at most 8 * 2 * 15 * 128 = 30720) and are widened once, then corrected by
/// `-8 * sum(x)`.
impl PackedAvx2 for Q4_0 {
    const CHUNKS: usize = 4;

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn chunk(block: *const u8, k: usize) -> [__m256i; 2] {
        // SAFETY: the caller's.
        split_nibbles(unsafe { load(block, k) })
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn products(
        w: [__m256i; 2],
        x: &Act,
        b: usize,
        k: usize,
        sum: __m256i,
        _mult: __m256i,
    ) -> __m256i {
        // SAFETY: the caller's.
        let (low, high) = unsafe { (four(x, b, k), four(x, b, k + 4)) };
        let sum = _mm256_add_epi16(sum, _mm256_maddubs_epi16(w[0], low));
        _mm256_add_epi16(sum, _mm256_maddubs_epi16(w[1], high))
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn finish(sum: __m256i, offset: i32) -> __m256i {
        _mm256_add_epi32(
            _mm256_madd_epi16(sum, _mm256_set1_epi16(1)),
            _mm256_set1_epi32(offset),
        )
    }

    const VNNI_BIAS: Option<i32> = Some(8);
    const HALVES: bool = true;
}

/// Q8_0: signed bytes, the trait's own products; with VNNI the codes move to `w + 128` (one
/// `xor` a chunk for every activation row), the trait's own `vnni_products`.
impl PackedAvx2 for Q8_0 {
    const CHUNKS: usize = 8;

    const VNNI_BIAS: Option<i32> = Some(128);

    #[inline]
    #[target_feature(enable = "avx2,fma,avx512vnni,avx512vl")]
    unsafe fn vnni_chunk(block: *const u8, k: usize) -> [__m256i; 2] {
        // SAFETY: the caller's.
        let v = unsafe { load(block, k) };
        let unsigned = _mm256_xor_si256(v, _mm256_set1_epi8(-128));
        [unsigned, unsigned]
    }
}

/// Q6_K: Q8_0's products (codes -32..=31, so a pair sum is at most 2 * 32 * 127), each half's pair
/// sums multiplied by its scale (at most 128) as they are widened: exact i32 lanes, with no more
/// instructions a chunk than Q8_0. Chunk 8 holds each row's two scales (bytes `4 r`, `4 r + 1`),
/// spread to both 16-bit lanes of the row by a byte shuffle and sign-extended by a shift.
impl PackedAvx2 for Q6KRun {
    const CHUNKS: usize = 8;

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn multipliers(block: *const u8) -> [__m256i; 2] {
        // SAFETY: the caller's: the block's 9 chunks are readable.
        let v = unsafe { _mm256_loadu_si256(block.add(8 * 32) as *const __m256i) };
        // Byte `4 r + h` (r = 0..4 in each 128-bit half) into all four bytes of row r.
        let spread = |h: i8| {
            let idx = _mm256_add_epi8(
                _mm256_setr_epi8(
                    0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12, 0, 0, 0, 0, 4, 4, 4, 4, 8,
                    8, 8, 8, 12, 12, 12, 12,
                ),
                _mm256_set1_epi8(h),
            );
            _mm256_srai_epi16(_mm256_shuffle_epi8(v, idx), 8)
        };
        [spread(0), spread(1)]
    }
}

/// Q5_0: chunks 0..4 hold Q4_0's nibbles and chunk 4 the fifth bits, so that byte `j` of a row's
/// four holds bit `2 k` for the low nibble of chunk `k`'s byte `j` and bit `2 k + 1` for its high
/// one (`formats/q5_0.rs`): one shift right by `2 k` and a shift left to bit 4 each give a chunk's
/// codes (0..=31), `maddubs`' unsigned operand as Q4_0's nibbles are. Two `maddubs` of a chunk
/// (at most 2 * 2 * 31 * 128 = 15872 a lane) are widened at once, since a block's eight would
/// pass 16 bits; then `-16 * sum(x)`.
impl PackedAvx2 for Q5_0Run {
    const CHUNKS: usize = 4;

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn chunk(block: *const u8, k: usize) -> [__m256i; 2] {
        // SAFETY: the caller's: chunk 4 holds the fifth bits.
        let (v, high) = unsafe { (load(block, k), load(block, 4)) };
        let high = _mm256_srl_epi16(high, _mm_cvtsi32_si128(2 * k as i32));
        let bit = _mm256_set1_epi8(0x10);
        let [low_nibbles, high_nibbles] = split_nibbles(v);
        [
            _mm256_or_si256(
                low_nibbles,
                _mm256_and_si256(_mm256_slli_epi16(high, 4), bit),
            ),
            _mm256_or_si256(
                high_nibbles,
                _mm256_and_si256(_mm256_slli_epi16(high, 3), bit),
            ),
        ]
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn products(
        w: [__m256i; 2],
        x: &Act,
        b: usize,
        k: usize,
        sum: __m256i,
        _mult: __m256i,
    ) -> __m256i {
        // SAFETY: the caller's.
        let (low, high) = unsafe { (four(x, b, k), four(x, b, k + 4)) };
        let pairs = _mm256_add_epi16(
            _mm256_maddubs_epi16(w[0], low),
            _mm256_maddubs_epi16(w[1], high),
        );
        _mm256_add_epi32(sum, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn finish(sum: __m256i, offset: i32) -> __m256i {
        _mm256_add_epi32(sum, _mm256_set1_epi32(offset))
    }

    const VNNI_BIAS: Option<i32> = Some(16);
    const HALVES: bool = true;
}

/// How far ahead of the block it multiplies a kernel asks for the weights' bytes: 8 blocks of
/// Q8_0, 16 of Q4_0 (at a group's end, the next group's first: groups lie one after another).
/// Left to the hardware's own prefetcher, one core waited on memory between bursts of products.
/// Measured on this project's 2-core Intel Xeon (AVX-512 VNNI), 2026-11-28, 1 thread, 2 rounds
/// interleaved with the build before: `bench --concurrency 1,8` on SmolLM2 Q8_0 with 128-token
/// prompts, the products alone, 8 rows 25.5 / 21.2 ms a step without, 14.3 / 15.8 with, and 1 row
/// 15.7 / 12.4 without, 11.9 / 10.0 with; decode tok/s after a 530-token prompt, the Llama 3.2 1B
/// shape's Q4_0 12.4 / 11.3 without, 16.0 / 16.2 with, Gemma 3 270M 36.2 / 35.6 and 42.5 / 43.6.
/// Another run put 1024 bytes ahead at 16.8 / 16.5 ms for 8 rows, 2048 at 19.8 / 14.1 and 4096
/// at 14.1 / 13.5.
const PREFETCH: usize = 2048;

/// Ask for the cache lines [`PREFETCH`] bytes past block `b` of a group of `bytes` a block.
/// A prefetch never faults, so the address may lie past the matrix's end.
#[inline(always)]
fn prefetch(quants: &[u8], b: usize, bytes: usize) {
    let ahead = quants.as_ptr().wrapping_add(b * bytes + PREFETCH);
    for line in (0..bytes).step_by(64) {
        // SAFETY: SSE, which every x86-64 has; a prefetch reads nothing.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(line) as *const i8) };
    }
}

/// How a group's 8 block scales are held: f32, or f16 (`u16` bits, widened by `vcvtph2ps`).
pub(crate) trait Scale: Copy {
    /// The 8 scales from `at` on, as f32.
    ///
    /// # Safety
    /// A machine with AVX2 and F16C; `at` points to 8 scales.
    unsafe fn eight(at: *const Self) -> __m256;
}

impl Scale for f32 {
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn eight(at: *const f32) -> __m256 {
        // SAFETY: the caller's.
        unsafe { _mm256_loadu_ps(at) }
    }
}

impl Scale for u16 {
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn eight(at: *const u16) -> __m256 {
        // SAFETY: the caller's.
        _mm256_cvtph_ps(unsafe { _mm_loadu_si128(at as *const __m128i) })
    }
}

/// A kernel's 8-lane accumulators as its results, in a loop: with `array::map` here and
/// `array::from_fn` for the sums' starts, the compiler left their closures as calls in some
/// builds. Measured on this project's Intel Xeon, 2026-11-28, 8 rows of a 1536x576 Q8_0 matrix
/// (`kernel_bench`), 3 interleaved rounds, after the 16-lane kernel's change: 48 / 83 / 83
/// billion multiply-adds a second with them, 102 / 102 / 102 with loops (as before that change).
#[inline]
#[target_feature(enable = "avx2,fma")]
fn stored<const N: usize>(acc: [__m256; N]) -> [[f32; GROUP]; N] {
    let mut lanes = [[0.0f32; GROUP]; N];
    for (lanes, acc) in lanes.iter_mut().zip(acc) {
        // SAFETY: `lanes` holds 8 f32.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), acc) };
    }
    lanes
}

/// `N` activation rows against one group of `F` blocks, one 8-lane accumulator (a lane a weight
/// row) for each.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn dot<const N: usize, F: PackedAvx2, S: Scale>(
    scales: &[S],
    quants: &[u8],
    x: [Act; N],
) -> [[f32; GROUP]; N] {
    let (blocks, bytes) = checked_group::<F, _>(scales, quants, &x);
    let mut acc = [_mm256_setzero_ps(); N];
    for b in 0..blocks {
        let mut ints = [_mm256_setzero_si256(); N];
        prefetch(quants, b, bytes);
        // SAFETY: the group holds `blocks * bytes` bytes and each activation row `blocks * 32`
        // values (asserted above).
        let mult = unsafe { F::multipliers(quants.as_ptr().add(b * bytes)) };
        for k in 0..F::CHUNKS {
            // SAFETY: as above.
            unsafe {
                let w = F::chunk(quants.as_ptr().add(b * bytes), k);
                for (sum, x) in ints.iter_mut().zip(&x) {
                    *sum = F::products(w, x, b, k, *sum, mult[2 * k / F::CHUNKS]);
                }
            }
        }
        // SAFETY: the group holds `blocks * 8` scales.
        let w_scales = unsafe { S::eight(scales.as_ptr().add(b * GROUP)) };
        for ((acc, sum), x) in acc.iter_mut().zip(&ints).zip(&x) {
            // SAFETY: AVX2, as this function.
            let ints = unsafe { F::finish(*sum, x.offsets[b]) };
            let scale = _mm256_mul_ps(w_scales, _mm256_set1_ps(x.scales[b]));
            *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ints), scale, *acc);
        }
    }
    stored(acc)
}

/// [`dot`] with AVX-512 VNNI's `vpdpbusd` for formats that have it (`VNNI_BIAS`): each i32 lane
/// gets the sum of 4 adjacent products of unsigned codes (`code + bias`) and signed activations
/// added to it in one instruction (AVX2 takes `maddubs`, `madd`, `add` and for Q8_0 a `sign`), and
/// starts a block from `-bias * sum(x)` (`x.offsets`). The lanes are the same exact integers as
/// [`dot`]'s, scaled the same way, so the results are bit for bit the same. EVEX encoding gives 32
/// vector registers: up to 8 activation rows a call.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512vnni,avx512vl")]
fn dot_vnni<const N: usize, F: PackedAvx2, S: Scale>(
    scales: &[S],
    quants: &[u8],
    x: [Act; N],
) -> [[f32; GROUP]; N] {
    let (blocks, bytes) = checked_group::<F, _>(scales, quants, &x);
    let mut acc = [_mm256_setzero_ps(); N];
    for b in 0..blocks {
        let mut ints = [_mm256_setzero_si256(); N];
        for (sum, x) in ints.iter_mut().zip(&x) {
            *sum = _mm256_set1_epi32(x.offsets[b]);
        }
        prefetch(quants, b, bytes);
        for k in 0..F::CHUNKS {
            // SAFETY: the group holds `blocks * bytes` bytes and each activation row `blocks * 32`
            // values (asserted above).
            unsafe {
                let w = F::vnni_chunk(quants.as_ptr().add(b * bytes), k);
                for (sum, x) in ints.iter_mut().zip(&x) {
                    *sum = F::vnni_products(w, x, b, k, *sum);
                }
            }
        }
        // SAFETY: the group holds `blocks * 8` scales.
        let w_scales = unsafe { S::eight(scales.as_ptr().add(b * GROUP)) };
        for ((acc, sum), x) in acc.iter_mut().zip(&ints).zip(&x) {
            let scale = _mm256_mul_ps(w_scales, _mm256_set1_ps(x.scales[b]));
            *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(*sum), scale, *acc);
        }
    }
    stored(acc)
}

/// [`dot_vnni`] for the number of rows in `x` (1 to 8).
#[target_feature(enable = "avx2,fma,f16c,avx512vnni,avx512vl")]
pub fn tile_vnni<F: PackedAvx2, S: Scale>(
    scales: &[S],
    quants: &[u8],
    x: &[Act],
    out: &mut [[f32; GROUP]],
) {
    macro_rules! rows {
        ($($n:literal)*) => {
            match x.len() {
                $($n => out.copy_from_slice(&dot_vnni::<$n, F, S>(scales, quants, std::array::from_fn(|j| x[j]))),)*
                _ => panic!("a VNNI packed tile holds 1 to 8 activation rows"),
            }
        };
    }
    rows!(1 2 3 4 5 6 7 8)
}

/// [`dot`] for the number of rows in `x` (1 to 4).
#[target_feature(enable = "avx2,fma,f16c")]
pub fn tile<F: PackedAvx2, S: Scale>(
    scales: &[S],
    quants: &[u8],
    x: &[Act],
    out: &mut [[f32; GROUP]],
) {
    match *x {
        [a] => out.copy_from_slice(&dot::<1, F, S>(scales, quants, [a])),
        [a, b] => out.copy_from_slice(&dot::<2, F, S>(scales, quants, [a, b])),
        [a, b, c] => out.copy_from_slice(&dot::<3, F, S>(scales, quants, [a, b, c])),
        [a, b, c, d] => out.copy_from_slice(&dot::<4, F, S>(scales, quants, [a, b, c, d])),
        _ => panic!("a packed tile holds 1 to 4 activation rows"),
    }
}

/// Two groups' blocks as [`dot_vnni_pair`] reads them, staged once for all of a prompt's tiles of
/// activation rows: each chunk already `vpdpbusd`'s unsigned operand ([`PackedAvx2::vnni_chunk`];
/// both halves where the format has [`HALVES`](PackedAvx2::HALVES)), group 0's 8 rows in lanes
/// 0..8 and group 1's in lanes 8..16 of one 64-byte register, and each block's 16 scales as f32.
/// Read as packed, every tile redid that for every chunk (a load of each group, a `vpxorq` each
/// for Q8_0's bias and a `vinserti64x4` to join them), and with two blocks at once
/// ([`pair_blocks`]) that left too few registers. Measured on this project's Intel Xeon
/// (AVX-512 VNNI), 2026-11-28, 1 thread, a 576x1536 Q8_0 matrix against 512 activation rows (the
/// `kernel_bench` example), best of 20 calls, 3 interleaved rounds, billion multiply-adds a
/// second: a block at a time read as packed 156 / 157 / 155, staged 153 / 153 / 88; two blocks at
/// once read as packed 147 / 114 / 90, staged 202 / 197 / 115 (the third round's host was
/// slower).
#[derive(Default)]
pub struct StagedPair {
    chunks: Vec<__m512i>,
    scales: Vec<__m512>,
}

impl StagedPair {
    /// The registers a block takes.
    const fn per_block<F: PackedAvx2>() -> usize {
        if F::HALVES { 2 * F::CHUNKS } else { F::CHUNKS }
    }

    /// Stage groups `quants[0]` and `quants[1]` (with their `scales`), in place of what was.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vnni,avx512vl")]
    pub fn stage<F: PackedAvx2, S: Scale>(&mut self, scales: [&[S]; 2], quants: [&[u8]; 2]) {
        let (blocks, bytes) = checked_group::<F, _>(scales[0], quants[0], &[]);
        assert_eq!(
            checked_group::<F, _>(scales[1], quants[1], &[]),
            (blocks, bytes)
        );
        let join = |a: __m256i, b: __m256i| _mm512_inserti64x4::<1>(_mm512_castsi256_si512(a), b);
        self.chunks.clear();
        self.scales.clear();
        for b in 0..blocks {
            // SAFETY: both groups hold `blocks * bytes` bytes and `blocks * 8` scales (asserted
            // above).
            unsafe {
                for k in 0..F::CHUNKS {
                    let (low, high) = (
                        F::vnni_chunk(quants[0].as_ptr().add(b * bytes), k),
                        F::vnni_chunk(quants[1].as_ptr().add(b * bytes), k),
                    );
                    self.chunks.push(join(low[0], high[0]));
                    if F::HALVES {
                        self.chunks.push(join(low[1], high[1]));
                    }
                }
                self.scales.push(_mm512_castsi512_ps(join(
                    _mm256_castps_si256(S::eight(scales[0].as_ptr().add(b * GROUP))),
                    _mm256_castps_si256(S::eight(scales[1].as_ptr().add(b * GROUP))),
                )));
            }
        }
    }

    /// The staged pair against the activation rows `x` (1 to 8), in AVX-512's 16 lanes.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vnni,avx512vl")]
    pub fn tile<F: PackedAvx2>(&self, x: &[Act], out: &mut [[f32; 2 * GROUP]]) {
        macro_rules! rows {
            ($($n:literal)*) => {
                match x.len() {
                    $($n => out.copy_from_slice(&dot_vnni_pair::<$n, F>(self, std::array::from_fn(|j| x[j]))),)*
                    _ => panic!("a VNNI packed tile holds 1 to 8 activation rows"),
                }
            };
        }
        rows!(1 2 3 4 5 6 7 8)
    }
}

/// [`dot_vnni`] over two groups at once in AVX-512's 16 lanes (staged in `pair`): lanes 0..8 are
/// group 0's rows and lanes 8..16 group 1's, so each `vpdpbusd` makes twice the products (one core
/// issues two of them a cycle at either width: 0.18 ns each, 256 or 512 bits, on this project's
/// Intel Xeon). The integers and their scaling are [`dot_vnni`]'s, lane by lane, so the results
/// are the same bits.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vnni,avx512vl")]
fn dot_vnni_pair<const N: usize, F: PackedAvx2>(
    pair: &StagedPair,
    x: [Act; N],
) -> [[f32; 2 * GROUP]; N] {
    let blocks = pair.scales.len();
    let per_block = StagedPair::per_block::<F>();
    assert_eq!(pair.chunks.len(), blocks * per_block);
    assert!(x.iter().all(|x| x.quants.len() >= blocks * BLOCK
        && x.scales.len() >= blocks
        && x.offsets.len() >= blocks));
    let mut acc = [_mm512_setzero_ps(); N];
    let mut b = 0;
    while b + 2 <= blocks {
        // SAFETY: blocks `b` and `b + 1` are the pair's and each activation row's (asserted above).
        unsafe { pair_blocks::<N, F, 2>(pair, &x, b, &mut acc) };
        b += 2;
    }
    if b < blocks {
        // SAFETY: as above, block `b`.
        unsafe { pair_blocks::<N, F, 1>(pair, &x, b, &mut acc) };
    }
    let mut lanes = [[0.0f32; 2 * GROUP]; N];
    for (lanes, acc) in lanes.iter_mut().zip(acc) {
        // SAFETY: `lanes` holds 16 f32.
        unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), acc) };
    }
    lanes
}

/// Blocks `b..b + B` of the staged `pair` against the activation rows `x`, added to `acc` one
/// block after another. Each `vpdpbusd` waits for the one before it on the same sum: a block's 8
/// rows keep 8 sums going, two blocks at once 16. Measured on this project's Intel Xeon, one
/// core, independent sums of 512-bit `vpdpbusd`s: 4 sums 2.06 billion a second, 8 3.96, 12 5.85,
/// 16 5.87 (so about 6 cycles each, two issued a cycle). The 8-lane kernel for decode
/// ([`dot_vnni`]) measured slower with two blocks at once (91 against 102 billion multiply-adds a
/// second, 8 rows of a 1536x576 Q8_0 matrix), and is left a block at a time.
///
/// # Safety
/// The pair and every row of `x` hold blocks `b..b + B`; a machine with AVX-512 VNNI.
#[inline(always)]
unsafe fn pair_blocks<const N: usize, F: PackedAvx2, const B: usize>(
    pair: &StagedPair,
    x: &[Act; N],
    b: usize,
    acc: &mut [__m512; N],
) {
    let per_block = StagedPair::per_block::<F>();
    // SAFETY: the caller's.
    unsafe {
        let mut ints = [[_mm512_setzero_si512(); N]; B];
        for (i, ints) in ints.iter_mut().enumerate() {
            for (sum, x) in ints.iter_mut().zip(x) {
                *sum = _mm512_set1_epi32(*x.offsets.get_unchecked(b + i));
            }
        }
        let chunk = |i: usize, c: usize| *pair.chunks.get_unchecked((b + i) * per_block + c);
        for k in 0..F::CHUNKS {
            for (j, x) in x.iter().enumerate() {
                for (i, ints) in ints.iter_mut().enumerate() {
                    if F::HALVES {
                        let low = _mm512_set1_epi32(four_i32(x, b + i, k));
                        let high = _mm512_set1_epi32(four_i32(x, b + i, k + 4));
                        ints[j] = _mm512_dpbusd_epi32(ints[j], chunk(i, 2 * k), low);
                        ints[j] = _mm512_dpbusd_epi32(ints[j], chunk(i, 2 * k + 1), high);
                    } else {
                        let four = _mm512_set1_epi32(four_i32(x, b + i, k));
                        ints[j] = _mm512_dpbusd_epi32(ints[j], chunk(i, k), four);
                    }
                }
            }
        }
        for (i, ints) in ints.iter().enumerate() {
            let w_scales = *pair.scales.get_unchecked(b + i);
            for ((acc, sum), x) in acc.iter_mut().zip(ints).zip(x) {
                let scale = _mm512_mul_ps(w_scales, _mm512_set1_ps(*x.scales.get_unchecked(b + i)));
                *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(*sum), scale, *acc);
            }
        }
    }
}
