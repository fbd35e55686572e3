//! AVX2 (and AVX-512 VNNI's 256-bit byte products) kernels, chosen at run time: f32 grids,
//! activation quantization, attention, and row-major block tiles per format ([`Avx2Block`]).

use std::arch::x86_64::*;

use crate::cpu::tile::{
    BlockRow, Kernels, Matmul, Q8Rows, TILE, checked_blocks, grid_len, row_by_row,
};
use crate::formats::{BLOCK, Q4_0, Q5_0Run, Q6KRun, Q8_0, RunFormat};

/// A format's weight block as 32 signed values in one register: AVX2's share of each
/// [`RunFormat`] (one implementation a format, beside the others).
pub(crate) trait Avx2Block: RunFormat {
    /// By default signed bytes as they lie (Q8_0's).
    ///
    /// # Safety
    /// `pw` points to the block's `PAYLOAD` readable bytes, on a machine with AVX2.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn weight_block(pw: *const u8) -> __m256i {
        // SAFETY: the caller's.
        unsafe { _mm256_loadu_si256(pw as *const __m256i) }
    }

    /// Whether a block's two halves have scales of their own ([`multipliers`](Self::multipliers)).
    const HALF_SCALES: bool = false;

    /// What the block's 16-bit pair sums are multiplied by as they widen (lanes 0..8: values
    /// 0..16; lanes 8..16: values 16..32): 1 where a block has one scale.
    ///
    /// # Safety
    /// `pw` points to the block's `PAYLOAD` readable bytes, on a machine with AVX2.
    #[inline(always)]
    unsafe fn multipliers(_pw: *const u8) -> __m256i {
        // SAFETY: the caller's.
        unsafe { _mm256_set1_epi16(1) }
    }
}

impl Avx2Block for Q8_0 {}

/// Q6_K: the codes as Q8_0's; each half's pair sums times its scale (bytes 32 and 33).
impl Avx2Block for Q6KRun {
    const HALF_SCALES: bool = true;

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn multipliers(pw: *const u8) -> __m256i {
        // SAFETY: the caller's: bytes 32 and 33 are the halves' scales.
        let (low, high) = unsafe { (*pw.add(BLOCK) as i8, *pw.add(BLOCK + 1) as i8) };
        _mm256_set_m128i(_mm_set1_epi16(high as i16), _mm_set1_epi16(low as i16))
    }
}

impl Avx2Block for Q4_0 {
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn weight_block(pw: *const u8) -> __m256i {
        unpack_q4(pw)
    }
}

/// Q5_0: the nibbles as Q4_0's, each value's fifth bit (bytes 16..20, `formats/q5_0.rs`) found by
/// a mask a byte in the four bytes repeated, and the codes' bias taken off: -16..=15.
impl Avx2Block for Q5_0Run {
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn weight_block(pw: *const u8) -> __m256i {
        // SAFETY: the caller's: bytes 16..20 are the fifth bits.
        let high = unsafe { (pw.add(BLOCK / 2) as *const i32).read_unaligned() };
        // Value `i`'s bit: byte `i % 4` of the four, bit `2 (i % 16 / 4) + i / 16`.
        let masks = _mm256_setr_epi8(
            1, 1, 1, 1, 4, 4, 4, 4, 16, 16, 16, 16, 64, 64, 64, 64, 2, 2, 2, 2, 8, 8, 8, 8, 32, 32,
            32, 32, -128, -128, -128, -128,
        );
        let set = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_set1_epi32(high), masks), masks);
        let codes = _mm256_or_si256(nibbles(pw), _mm256_and_si256(set, _mm256_set1_epi8(16)));
        _mm256_sub_epi8(codes, _mm256_set1_epi8(16))
    }
}

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

/// [`crate::cpu::quantize::quantize_rows_q8_with`], 32 values (a block) at a time.
#[target_feature(enable = "avx2,fma")]
pub fn quantize_q8(x: &[f32], out: &mut Q8Rows) {
    let sign = _mm256_set1_ps(-0.0);
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
        let inv = _mm256_set1_ps(crate::cpu::tile::inverse(amax));
        out.scales
            .push(crate::cpu::tile::activation_scale(amax / 127.0));
        // To the nearest, ties to even: the conversion's rounding (MXCSR's default, which Rust
        // leaves), as llama.cpp's x86 quantizer and the scalar one.
        let ints = v.map(|v| _mm256_cvtps_epi32(_mm256_mul_ps(v, inv)));
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

/// [`crate::cpu::attention::attention_scores`]: `dot_f32(q, key) * scale` for every position, bit for bit.
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
    match hs {
        64 => return scores_of_width::<2>(q, keys, stride, scale, s),
        128 => return scores_of_width::<4>(q, keys, stride, scale, s),
        _ => {}
    }
    let mut j = 0;
    if hs.is_multiple_of(8) {
        while j + 8 <= s.len() {
            // Marked to inline: left a call, the closure took 9.5% of Gemma 3's prefill (head
            // size 256) against 3.6% inlined, when an unrelated kernel changed the inlining.
            let v = std::array::from_fn(
                #[inline(always)]
                |p| dot_lanes(q, &keys[(j + p) * stride..][..hs], hs).0,
            );
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

/// [`attention_scores`] for a head of `32 C` values, the query held in registers and the loops
/// unrolled: each key's lanes are [`dot_lanes`]' (4 accumulators, chunk `k` of each 32 into the
/// `k`-th, added as `(a0 + a1) + (a2 + a3)`), so the scores are the same bits. Measured (SmolLM2
/// Q8_0, 1,981-token prompt, 1 thread): the general loop, reloading the query and counting its
/// way through every key, was 30% of the prefill's profile. With this kernel and a block's
/// largest score, exponentials and sum 8 lanes at a time (`exponentials`), 3 interleaved pairs of
/// runs, prefill tok/s: 1,981 tokens 257 / 272 / 263 -> 329 / 338 / 328 (decode after them 42 ->
/// 50), 530 tokens 549 / 535 / 546 -> 612 / 614 / 591.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn scores_of_width<const C: usize>(
    q: &[f32],
    keys: &[f32],
    stride: usize,
    scale: f32,
    s: &mut [f32],
) {
    let hs = 32 * C;
    assert!(q.len() == hs && (s.is_empty() || keys.len() >= (s.len() - 1) * stride + hs));
    // SAFETY: the query holds `hs` values (asserted).
    let qv: [[__m256; 4]; C] = std::array::from_fn(|c| {
        std::array::from_fn(|k| unsafe { _mm256_loadu_ps(q.as_ptr().add(32 * c + 8 * k)) })
    });
    let lanes = |j: usize| {
        // SAFETY: key `j < s.len()` lies within `keys` (asserted).
        let key = unsafe { keys.as_ptr().add(j * stride) };
        let mut acc = [_mm256_setzero_ps(); 4];
        for (c, qv) in qv.iter().enumerate() {
            for (k, acc) in acc.iter_mut().enumerate() {
                // SAFETY: as above.
                let kv = unsafe { _mm256_loadu_ps(key.add(32 * c + 8 * k)) };
                *acc = _mm256_fmadd_ps(qv[k], kv, *acc);
            }
        }
        _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]))
    };
    let mut j = 0;
    while j + 8 <= s.len() {
        let v: [__m256; 8] = std::array::from_fn(|p| lanes(j + p));
        let sums = _mm256_mul_ps(hsum8(v), _mm256_set1_ps(scale));
        // SAFETY: positions j..j + 8 are within `s`.
        unsafe { _mm256_storeu_ps(s.as_mut_ptr().add(j), sums) };
        j += 8;
    }
    for (j, s) in s.iter_mut().enumerate().skip(j) {
        *s = hsum(lanes(j)) * scale;
    }
}

/// [`crate::cpu::attention::weighted_sum`]: up to 64 lanes of the output at a time, 8 registers held over
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
    crate::cpu::scalar::weighted_sum_from(i + (hs - i) / 8 * 8, p, values, stride, out);
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

/// The products of 32 signed weights and 32 signed activations, as 8 i32 partial sums, their
/// 16-bit pair sums multiplied by `mult` (1, or a half's scale).
#[target_feature(enable = "avx2,fma")]
fn block_dot(w: __m256i, x: __m256i, mult: __m256i) -> __m256i {
    // maddubs multiplies unsigned by signed bytes: move w's sign onto x.
    let aw = _mm256_sign_epi8(w, w);
    let sx = _mm256_sign_epi8(x, w);
    let pairs = _mm256_maddubs_epi16(aw, sx);
    _mm256_madd_epi16(pairs, mult)
}

/// Q4_0's 16 bytes as 32 signed values in -8..=7, in value order.
#[target_feature(enable = "avx2,fma")]
fn unpack_q4(p: *const u8) -> __m256i {
    _mm256_sub_epi8(nibbles(p), _mm256_set1_epi8(8))
}

/// 16 bytes of nibbles in GGUF's order (byte `j`: value `j` low, `j + 16` high) as 32 bytes in
/// 0..=15, in value order.
#[target_feature(enable = "avx2,fma")]
fn nibbles(p: *const u8) -> __m256i {
    // SAFETY: the caller passes a pointer to 16 readable bytes.
    let bytes = unsafe { _mm_loadu_si128(p as *const __m128i) };
    let mask = _mm_set1_epi8(0x0f);
    let lo = _mm_and_si128(bytes, mask);
    let hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
    _mm256_set_m128i(hi, lo)
}

/// `M` f32 weight rows against `N` activation rows, `out[k][j] = w[k] . x[j]`, with one
/// 8-lane accumulator a pair (fused multiply-adds): each 8-wide piece of a weight row is
/// loaded once for all `N` activation rows and each piece of an activation row once for all
/// `M` weight rows, and every pair is summed in one order whatever `M` and `N` (as SIMD128's
/// grid, which measured the shapes).
#[inline]
#[target_feature(enable = "avx2,fma")]
fn dot_f32_grid<const M: usize, const N: usize>(w: &[&[f32]; M], x: &[&[f32]; N]) -> [[f32; N]; M] {
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

/// `N` int8 activation rows against one weight row of `F` blocks, each summed block by block
/// in the same order whatever `N`; a weight block is loaded (and Q4_0 unpacked) once for all
/// `N`.
#[target_feature(enable = "avx2,fma")]
fn dot_q_tile<const N: usize, F: Avx2Block>(w: BlockRow, x: [BlockRow; N]) -> [f32; N] {
    let (blocks, step) = checked_blocks::<F>(&[w], &x, BLOCK);
    let mut acc = [_mm256_setzero_ps(); N];
    for b in 0..blocks {
        // SAFETY: the weight row holds `blocks * step` bytes and each activation row
        // `blocks * 32` (checked by `checked_blocks`).
        let (wv, mult) = unsafe {
            let pw = w.quants.as_ptr().add(b * step);
            (F::weight_block(pw), F::multipliers(pw))
        };
        for (acc, x) in acc.iter_mut().zip(&x) {
            // SAFETY: as above.
            let xv =
                unsafe { _mm256_loadu_si256(x.quants.as_ptr().add(b * BLOCK) as *const __m256i) };
            let scale = w.scales[b] * x.scales[b];
            let ints = _mm256_cvtepi32_ps(block_dot(wv, xv, mult));
            *acc = _mm256_fmadd_ps(_mm256_set1_ps(scale), ints, *acc);
        }
    }
    acc.map(|a| hsum(a))
}

/// A product's loops and a block kernel's tiles of up to 4 rows (`$tile`), compiled with
/// `$features` so that the tiles inline into the loops. The weight format is a type in each tile
/// (measured: q4 decode at batch 1 lost a tenth of its speed when the format was tested block by
/// block).
macro_rules! block_matmul {
    ($(#[$doc:meta])* $matmul:ident, $tiles:ident, $dot:ident, $features:literal) => {
        #[target_feature(enable = $features)]
        fn $tiles<F: Avx2Block>(w: BlockRow, x: &[BlockRow], o: &mut [f32]) {
            match *x {
                [a] => o.copy_from_slice(&$dot::<1, F>(w, [a])),
                [a, b] => o.copy_from_slice(&$dot::<2, F>(w, [a, b])),
                [a, b, c] => o.copy_from_slice(&$dot::<3, F>(w, [a, b, c])),
                [a, b, c, d] => o.copy_from_slice(&$dot::<4, F>(w, [a, b, c, d])),
                _ => panic!("a block tile holds 1 to 4 rows"),
            }
        }

        $(#[$doc])*
        #[target_feature(enable = $features)]
        pub fn $matmul<F: Avx2Block>(m: &Matmul, w: BlockRow, prepared: &[u8], out: &mut [f32]) {
            // The format's tile, as a closure each use inlines.
            macro_rules! tile {
                () => {
                    #[inline(always)]
                    |w: BlockRow, x: &[BlockRow], o: &mut [f32]| $tiles::<F>(w, x, o)
                };
            }
            m.blocks_tiled::<F>(
                w,
                out,
                prepared,
                Kernels::new(row_by_row(tile!()), (1, 1), row_by_row(tile!()), (1, TILE)),
            );
        }
    };
}

/// The whole product of f32 weights for AVX2: f32 grids (4 weight rows at batch 1, 2 x 4
/// activation rows in a batch).
#[target_feature(enable = "avx2,fma")]
pub fn matmul_f32(m: &Matmul, data: &[f32], out: &mut [f32]) {
    let grid = |w: &[&[f32]], x: &[&[f32]], o: &mut [f32]| f32_grid(w, x, o);
    m.f32_tiled(data, out, Kernels::new(grid, (4, 1), grid, (2, 4)));
}

/// Every row of `w` against every row of `x` as [`f32_grid`], up to 4 x 4, compiled with AVX-512
/// VL: EVEX's 32 vector registers hold a 4 x 4 grid's 16 accumulators, its 4 weight pieces and an
/// activation piece, 8 loads for 16 multiply-adds where AVX2's 2 x 4 takes 6 for 8. Measured (SmolLM2
/// F32, 530-token prompt, 1 thread, 3 rounds interleaved, prefill tok/s): 274 / 278 / 266 with
/// AVX2's 2 x 4 against 303 / 293 / 306.
#[target_feature(enable = "avx2,fma,avx512f,avx512vl")]
fn f32_grid_evex(w: &[&[f32]], x: &[&[f32]], out: &mut [f32]) {
    f32_grid_shapes!(@all dot_f32_grid, w, x, out)
}

/// The product of f32 weights for a prompt on an AVX-512 machine: 4 x 4 grids ([`f32_grid_evex`];
/// the same sums in the same order as [`matmul_f32`]'s, so the same bits).
#[target_feature(enable = "avx2,fma,avx512f,avx512vl")]
pub fn matmul_f32_evex(m: &Matmul, data: &[f32], out: &mut [f32]) {
    let grid = |w: &[&[f32]], x: &[&[f32]], o: &mut [f32]| f32_grid_evex(w, x, o);
    m.f32_tiled(data, out, Kernels::new(grid, (4, 1), grid, (4, 4)));
}

block_matmul!(
    /// The whole product of blocks for AVX2: block tiles of up to 4 activation rows (`prepared`
    /// is empty: the tiles read the activations as they are).
    matmul_blocks,
    blocks_tile,
    dot_q_tile,
    "avx2,fma"
);

/// `N` activation rows, as unsigned bytes `x + 128`, against one weight row of blocks,
/// with AVX-512 VNNI's `vpdpbusd`: each i32 lane gets the sum of 4 adjacent byte products
/// added to it, the lanes AVX2's `maddubs` + `madd` make, without the 16-bit step or the sign
/// moves. `(x + 128) . w = x . w + 128 * sum(w)`, so every row's lanes start from
/// `-128 * sum(w)`, taken once per weight block for the whole tile. The lanes are the same
/// exact integers as the AVX2 tile's, so the results are bit for bit the same (Q6_K's lanes
/// multiplied by their half's scale after).
#[target_feature(enable = "avx2,fma,avx512vnni,avx512vl")]
fn dot_q_tile_vnni<const N: usize, F: Avx2Block>(w: BlockRow, x: [BlockRow; N]) -> [f32; N] {
    let (blocks, step) = checked_blocks::<F>(&[w], &x, BLOCK);
    let zero = _mm256_setzero_si256();
    let offset = _mm256_set1_epi8(-128);
    let mut acc = [_mm256_setzero_ps(); N];
    for b in 0..blocks {
        // SAFETY: the weight row holds `blocks * step` bytes and each activation row
        // `blocks * 32` (checked by `checked_blocks`).
        let (wv, lane_scales) = unsafe {
            let pw = w.quants.as_ptr().add(b * step);
            // A half's scale as the i32 lanes of its values (`multipliers`' pairs, once each).
            let lanes = if F::HALF_SCALES {
                _mm256_madd_epi16(F::multipliers(pw), _mm256_set1_epi32(1))
            } else {
                zero
            };
            (F::weight_block(pw), lanes)
        };
        let start = _mm256_sub_epi32(zero, _mm256_dpbusd_epi32(zero, offset, wv));
        for (acc, x) in acc.iter_mut().zip(&x) {
            // SAFETY: as above.
            let xv =
                unsafe { _mm256_loadu_si256(x.quants.as_ptr().add(b * BLOCK) as *const __m256i) };
            let ints = _mm256_dpbusd_epi32(start, xv, wv);
            let ints = if F::HALF_SCALES {
                _mm256_mullo_epi32(ints, lane_scales)
            } else {
                ints
            };
            let scale = w.scales[b] * x.scales[b];
            *acc = _mm256_fmadd_ps(_mm256_set1_ps(scale), _mm256_cvtepi32_ps(ints), *acc);
        }
    }
    acc.map(|a| hsum(a))
}

block_matmul!(
    /// The whole product for quantized weights, with the VNNI block tiles, the activations
    /// `prepared` as unsigned bytes (f32 weights take [`matmul_f32`]).
    matmul_vnni,
    blocks_tile_vnni,
    dot_q_tile_vnni,
    "avx2,fma,avx512vnni,avx512vl"
);

/// [`crate::cpu::attention`]'s block of scores: the largest of the first `n` of `x` and `max`,
/// `exp(score - largest)` of each in place ([`exp_shifted`]), and their sum, 8 lanes at a time
/// (the lanes past `n` padded with -inf for the largest, then 0).
#[target_feature(enable = "avx2,fma")]
pub fn exponentials(x: &mut [f32], n: usize, max: f32) -> (f32, f32) {
    let whole = n.next_multiple_of(8);
    assert!(whole <= x.len());
    x[n..whole].fill(f32::NEG_INFINITY);
    let load = |x: &[f32], i: usize| {
        // SAFETY: `i + 8 <= whole <= x.len()`.
        unsafe { _mm256_loadu_ps(x.as_ptr().add(i)) }
    };
    let mut top = _mm256_set1_ps(max);
    for i in (0..whole).step_by(8) {
        top = _mm256_max_ps(top, load(x, i));
    }
    let top = _mm_max_ps(_mm256_castps256_ps128(top), _mm256_extractf128_ps(top, 1));
    let top = _mm_max_ps(top, _mm_movehl_ps(top, top));
    let max = _mm_cvtss_f32(_mm_max_ss(top, _mm_movehdup_ps(top)));
    exp_shifted(&mut x[..whole], max);
    x[n..whole].fill(0.0);
    // Summed in f64, as llama.cpp sums its softmax (in f32 lanes, one of SmolLM2 Q8_0's
    // teacher-forced positions against llama.cpp's ids went the other way at a near tie).
    let mut sum = _mm256_setzero_pd();
    for i in (0..whole).step_by(8) {
        let v = load(x, i);
        sum = _mm256_add_pd(sum, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
        sum = _mm256_add_pd(sum, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
    }
    let pair = _mm_add_pd(_mm256_castpd256_pd128(sum), _mm256_extractf128_pd(sum, 1));
    let total = _mm_cvtsd_f64(_mm_add_sd(pair, _mm_unpackhi_pd(pair, pair)));
    (max, total as f32)
}

/// `exp(x - max)` of every value of `x` in place, 8 at a time ([`exp8`]), within 2 units in the
/// last place of `f32::exp` for what attention gives it (`x - max <= 0`; below -87.3 the result
/// is the smallest normal number, not 0). Measured as libm's `expf`, one call a score, it was 6.5%
/// of a 530-token prefill's profile; with this one, prefill 1.08-1.13x (SmolLM2 Q8_0, 530 tokens,
/// 1 thread, 3 rounds interleaved: 518 / 512 / 525 -> 580 / 577 / 569).
#[target_feature(enable = "avx2,fma")]
pub fn exp_shifted(x: &mut [f32], max: f32) {
    assert!(x.len().is_multiple_of(8));
    let shift = _mm256_set1_ps(max);
    for chunk in x.chunks_exact_mut(8) {
        // SAFETY: the chunk holds 8 values.
        let v = unsafe { _mm256_loadu_ps(chunk.as_ptr()) };
        let e = exp8(_mm256_sub_ps(v, shift));
        // SAFETY: as above.
        unsafe { _mm256_storeu_ps(chunk.as_mut_ptr(), e) };
    }
}

/// `exp` of 8 values: Cephes' `expf` (the exponent's integer part as `n ln 2`, the rest by a
/// degree-6 polynomial, `2^n` made in the exponent bits), the input held within -87.3..=88.3 (so
/// `2^n` stays a normal number: below, the smallest normal; above, about 2e38, not infinity).
#[inline]
#[target_feature(enable = "avx2,fma")]
fn exp8(v: __m256) -> __m256 {
    let (log2e, ln2_hi, ln2_lo) = (
        _mm256_set1_ps(std::f32::consts::LOG2_E),
        _mm256_set1_ps(0.693_359_4),
        _mm256_set1_ps(-2.121_944_4e-4),
    );
    let c = [
        1.987_569_1e-4,
        1.398_199_9e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        0.166_666_65,
        0.5,
    ]
    .map(|c| _mm256_set1_ps(c));
    let v = _mm256_min_ps(
        _mm256_max_ps(v, _mm256_set1_ps(-87.33654)),
        _mm256_set1_ps(88.3),
    );
    let n = _mm256_round_ps(
        _mm256_mul_ps(v, log2e),
        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC,
    );
    let r = _mm256_fnmadd_ps(n, ln2_lo, _mm256_fnmadd_ps(n, ln2_hi, v));
    let mut p = c[0];
    for c in &c[1..] {
        p = _mm256_fmadd_ps(p, r, *c);
    }
    let y = _mm256_add_ps(
        _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, r),
        _mm256_set1_ps(1.0),
    );
    let pow2 = _mm256_castsi256_ps(_mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)),
        23,
    ));
    _mm256_mul_ps(y, pow2)
}

/// `gate = silu(gate) * up` (`silu(g) = g / (1 + exp(-g))`), 8 at a time with [`exp8`], a tail of
/// fewer than 8 through the same lanes (so each value's bits do not depend on where it falls: a
/// prompt's rows and decode's one row agree). Where `-g` passes 88 the result is 0, within
/// `88 / 1.6e38` of libm's.
#[target_feature(enable = "avx2,fma")]
pub fn silu_mul(gate: &mut [f32], up: &[f32]) {
    assert_eq!(gate.len(), up.len());
    let (one, far) = (_mm256_set1_ps(1.0), _mm256_set1_ps(88.0));
    let eight = |g: &mut [f32], u: &[f32]| {
        // SAFETY: each holds 8 values (the callers' chunks).
        let (gv, uv) = unsafe { (_mm256_loadu_ps(g.as_ptr()), _mm256_loadu_ps(u.as_ptr())) };
        let minus = _mm256_sub_ps(_mm256_setzero_ps(), gv);
        let silu = _mm256_div_ps(gv, _mm256_add_ps(one, exp8(minus)));
        // 0 where `exp(-g)` passes 1.6e38 (libm's gives `g / 1.6e38` up to 3.4e38, then 0).
        let silu = _mm256_andnot_ps(_mm256_cmp_ps(minus, far, _CMP_GT_OQ), silu);
        // SAFETY: as above.
        unsafe { _mm256_storeu_ps(g.as_mut_ptr(), _mm256_mul_ps(silu, uv)) };
    };
    let mut gates = gate.chunks_exact_mut(8);
    let mut ups = up.chunks_exact(8);
    for (g, u) in (&mut gates).zip(&mut ups) {
        eight(g, u);
    }
    let (g, u) = (gates.into_remainder(), ups.remainder());
    if !g.is_empty() {
        let (mut g8, mut u8) = ([0.0f32; 8], [0.0f32; 8]);
        g8[..g.len()].copy_from_slice(g);
        u8[..u.len()].copy_from_slice(u);
        eight(&mut g8, &u8);
        g.copy_from_slice(&g8[..g.len()]);
    }
}
