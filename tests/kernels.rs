//! The CPU kernels against plain f32 arithmetic: every instruction set this machine runs (the
//! scalar one always), f32, Q8_0 and Q4_0 weights, one activation row (decode) and several
//! (prefill), widths with and without a tail. Natively (AVX2) and in headless Chromium (SIMD128:
//! as a module of tests/web.rs, whose binary runs it, so the page's engine is linked once for both).

use tokenometer::cpu::{self as kernels, Isa, Q8Rows};

#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);
use tokenometer::cpu::HostMatrix;
use tokenometer::formats::{Activations, Blocks, Format, Q4_0, Q5_0Run, Q6KRun, Q8_0, RunFormat};

/// The kernels' check values (a deterministic spread in -1..1 with a few large ones).
fn values(n: usize, seed: u64) -> Vec<f32> {
    kernels::check_values(n, seed)
}

/// `x`'s rows of `cols` values as int8 Q8_0 activation blocks.
fn q8_rows(x: &[f32], cols: usize) -> Q8Rows {
    let mut xq = Q8Rows::default();
    kernels::quantize_rows_q8(x, cols, &mut xq);
    xq
}

fn reference(w: &[f32], x: &[f32], rows: usize, cols: usize, t: usize) -> Vec<f32> {
    let mut out = vec![0.0; t * rows];
    for i in 0..t {
        for r in 0..rows {
            out[i * rows + r] = (0..cols)
                .map(|c| w[r * cols + c] as f64 * x[i * cols + c] as f64)
                .sum::<f64>() as f32;
        }
    }
    out
}

fn run(isa: Isa, m: &HostMatrix, x: &[f32], rows: usize, cols: usize, t: usize) -> Vec<f32> {
    let mut xq = Q8Rows::default();
    if !matches!(m, HostMatrix::F32(_)) {
        kernels::quantize_rows_q8(x, cols, &mut xq);
    }
    let mut out = vec![f32::NAN; t * rows];
    kernels::matmul(isa, m.rows(), rows, cols, x, &xq, t, &mut out);
    out
}

/// The largest error relative to the largest magnitude of the exact result.
fn relative_error(got: &[f32], exact: &[f32]) -> f32 {
    let scale = exact.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let worst = got
        .iter()
        .zip(exact)
        .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
    worst / scale
}

#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
#[cfg_attr(not(target_arch = "wasm32"), test)]
fn every_kernel_matches_f32_arithmetic() {
    for (rows, cols, t) in [(7, 64, 1), (33, 288, 1), (5, 768, 3), (16, 96, 9)] {
        let w = values(rows * cols, 7 + cols as u64);
        let x = values(t * cols, 11 + rows as u64);
        let exact = reference(&w, &x, rows, cols, t);
        for (m, tolerance) in [
            (HostMatrix::F32(w.clone().into()), 1e-5),
            (HostMatrix::q8(&w), 0.02),
            (HostMatrix::q4(&w), 0.15),
        ] {
            // Against the dequantized weights the only error left is the activations' int8 step.
            let dequantized = reference(&m.dequantize(), &x, rows, cols, t);
            for isa in Isa::available() {
                let got = run(isa, &m, &x, rows, cols, t);
                let name = format!("{isa:?} {rows}x{cols} t={t} {m:?}")
                    .chars()
                    .take(60)
                    .collect::<String>();
                assert!(
                    relative_error(&got, &exact) < tolerance,
                    "{name}: {}",
                    relative_error(&got, &exact)
                );
                let step = if matches!(m, HostMatrix::F32(_)) {
                    1e-5
                } else {
                    0.02
                };
                assert!(relative_error(&got, &dequantized) < step, "{name}");
            }
        }
    }
}

#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
#[cfg_attr(not(target_arch = "wasm32"), test)]
fn vector_kernels_equal_the_scalar_ones() {
    let (rows, cols, t) = (64, 288, 2);
    let w = values(rows * cols, 3);
    let x = values(t * cols, 5);
    for m in [
        HostMatrix::F32(w.clone().into()),
        HostMatrix::q8(&w),
        HostMatrix::q4(&w),
    ] {
        let scalar = run(Isa::Scalar, &m, &x, rows, cols, t);
        for isa in Isa::available() {
            let got = run(isa, &m, &x, rows, cols, t);
            // Integer block sums are exact; only the f32 accumulation order differs.
            assert!(relative_error(&got, &scalar) < 1e-5, "{isa:?}");
        }
    }
}

#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
#[cfg_attr(not(target_arch = "wasm32"), test)]
fn quantized_blocks_round_trip_within_their_step() {
    let w = values(32 * 40, 9);
    // Q8_0 rounds to the nearest of 127 steps per side; Q4_0 maps the extreme to -8, so a value
    // of the other sign and the same size clamps to 7, one whole step off.
    for (m, step) in [
        (HostMatrix::q8(&w), 0.5 / 127.0),
        (HostMatrix::q4(&w), 1.0 / 8.0),
    ] {
        let back = m.dequantize();
        for (block, restored) in w.chunks(32).zip(back.chunks(32)) {
            let amax = block.iter().fold(0.0f32, |a, v| a.max(v.abs()));
            for (a, b) in block.iter().zip(restored) {
                assert!((a - b).abs() <= amax * step + 1e-6, "{a} vs {b}");
            }
        }
    }
    // Bytes per value: 1 + 4/32 for Q8_0 and 0.5 + 4/32 for Q4_0.
    assert_eq!(HostMatrix::q8(&w).bytes(), 40 * (32 + 4));
    assert_eq!(HostMatrix::q4(&w).bytes(), 40 * (16 + 4));
}

#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
#[cfg_attr(not(target_arch = "wasm32"), test)]
fn a_zero_block_stays_zero() {
    let mut w = values(64, 1);
    w[..32].fill(0.0);
    for m in [HostMatrix::q8(&w), HostMatrix::q4(&w)] {
        assert!(m.dequantize()[..32].iter().all(|&v| v == 0.0));
    }
    let x = vec![0.0; 64];
    for isa in Isa::available() {
        let m = HostMatrix::q8(&w);
        assert_eq!(run(isa, &m, &x, 1, 64, 1), vec![0.0]);
    }
}

/// A batch's rows go through the kernels in tiles; each row's result must be bit for bit what it
/// gets alone, so that batched decode is the same computation as batch 1; 19 rows take a prompt's
/// kernels where they differ (AVX-512's f32 grids from 16 rows).
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
#[cfg_attr(not(target_arch = "wasm32"), test)]
fn a_row_in_a_tile_gets_exactly_its_result_alone() {
    let (rows, cols, t) = (13, 296 - 8, 19);
    let w = values(rows * cols, 5);
    let x = values(t * cols, 9);
    for m in [
        HostMatrix::F32(w.clone().into()),
        HostMatrix::q8(&w),
        HostMatrix::q4(&w),
    ] {
        for isa in Isa::available() {
            let batch = run(isa, &m, &x, rows, cols, t);
            for i in 0..t {
                let alone = run(isa, &m, &x[i * cols..(i + 1) * cols], rows, cols, 1);
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(&batch[i * rows..(i + 1) * rows]),
                    bits(&alone),
                    "{isa:?} row {i} of {t}"
                );
            }
        }
    }
}

/// One query's attention over a head's cached rows (keys and values interleaved with other heads'
/// at a stride, as in the cache): scores and the weighted sum of values, for every instruction
/// set, against plain arithmetic; head sizes with and without a tail of each vector width.
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
#[cfg_attr(not(target_arch = "wasm32"), test)]
fn attention_kernels_match_plain_arithmetic() {
    for (hs, positions) in [
        (48, 37),
        (64, 5),
        (8, 1),
        (36, 130),
        (3, 4),
        (72, 9),
        (120, 20),
    ] {
        let stride = hs * 3 + 5;
        let query = values(hs, hs as u64);
        let cache = values(positions * stride, 13 + positions as u64);
        let at = hs + 2;
        let head = &cache[at..];
        let exact_scores: Vec<f64> = (0..positions)
            .map(|j| {
                (0..hs)
                    .map(|c| query[c] as f64 * head[j * stride + c] as f64)
                    .sum::<f64>()
                    * 0.125
            })
            .collect();
        let p: Vec<f32> = values(positions, 3).iter().map(|v| v.abs()).collect();
        let exact_sum: Vec<f64> = (0..hs)
            .map(|c| {
                (0..positions)
                    .map(|j| p[j] as f64 * head[j * stride + c] as f64)
                    .sum()
            })
            .collect();
        for isa in Isa::available() {
            let mut scores = vec![f32::NAN; positions];
            kernels::attention_scores(isa, &query, head, stride, 0.125, &mut scores);
            for (got, want) in scores.iter().zip(&exact_scores) {
                assert!(
                    (*got as f64 - want).abs() < 1e-4,
                    "{isa:?} hs {hs}: {got} vs {want}"
                );
            }
            let mut out = vec![f32::NAN; hs];
            kernels::weighted_sum(isa, &p, head, stride, &mut out);
            for (got, want) in out.iter().zip(&exact_sum) {
                assert!(
                    (*got as f64 - want).abs() < 1e-4,
                    "{isa:?} hs {hs}: {got} vs {want}"
                );
            }
        }
    }
}

/// The attention kernels' arithmetic does not depend on how they group their work: each score is
/// `dot(query, key) * scale` bit for bit, however many positions are scored together, and each
/// lane of a weighted sum is the same bits whether the head is summed whole or 8 lanes at a time.
/// (Teacher-forced agreement and the goldens rest on every path summing in one order.)
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
#[cfg_attr(not(target_arch = "wasm32"), test)]
fn attention_kernels_group_without_changing_a_bit() {
    for hs in [3, 8, 16, 36, 48, 64, 72, 128] {
        for positions in [1, 7, 8, 9, 17, 130] {
            let stride = hs * 2 + 3;
            let query = values(hs, hs as u64 + 1);
            let head = values(positions * stride, positions as u64 + 7);
            let p: Vec<f32> = values(positions, 5).iter().map(|v| v.abs()).collect();
            for isa in Isa::available() {
                let mut scores = vec![f32::NAN; positions];
                kernels::attention_scores(isa, &query, &head, stride, 0.3, &mut scores);
                for (j, got) in scores.iter().enumerate() {
                    let alone = kernels::dot(isa, &query, &head[j * stride..][..hs]) * 0.3;
                    assert_eq!(
                        got.to_bits(),
                        alone.to_bits(),
                        "{isa:?} hs {hs}, {positions} positions, score {j}"
                    );
                }
                let mut whole = vec![f32::NAN; hs];
                kernels::weighted_sum(isa, &p, &head, stride, &mut whole);
                for at in (0..hs).step_by(8) {
                    let lanes = (hs - at).min(8);
                    let mut part = vec![f32::NAN; lanes];
                    kernels::weighted_sum(isa, &p, &head[at..], stride, &mut part);
                    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                    assert_eq!(
                        bits(&whole[at..at + lanes]),
                        bits(&part),
                        "{isa:?} hs {hs}, {positions} positions, lanes {at}.."
                    );
                }
            }
        }
    }
}

/// On x86 the VNNI block tiles sum the same integer lanes as the AVX2 ones, so every quantized
/// product is bit for bit the same whichever of the two a machine picks.
#[cfg(target_arch = "x86_64")]
#[test]
fn vnni_and_avx2_tiles_agree_bit_for_bit() {
    if !Isa::available().contains(&Isa::Avx512Vnni) {
        // Skipped only where the CPU truly lacks it: a CPU whose flags (Linux's /proc/cpuinfo)
        // name every feature the VNNI kernels need is a detection that failed, and so a failure.
        let flags = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let line = flags.lines().find(|l| l.starts_with("flags")).unwrap_or("");
        let has = |f: &str| line.split_whitespace().any(|w| w == f);
        let needed = [
            "avx2",
            "fma",
            "f16c",
            "avx512f",
            "avx512bw",
            "avx512vl",
            "avx512_vnni",
        ];
        assert!(
            !needed.iter().all(|f| has(f)),
            "this CPU reports {needed:?} but the engine did not pick AVX-512 VNNI"
        );
        eprintln!("this machine has no AVX-512 VNNI; nothing to compare");
        return;
    }
    let (rows, cols, t) = (19, 288, 6);
    let w = values(rows * cols, 21);
    let x = values(t * cols, 23);
    let q6k = HostMatrix::Blocks(Blocks::quantize(Format::Q6K, &w));
    let q5_0 = HostMatrix::Blocks(Blocks::quantize(Format::Q5_0, &w));
    for m in [HostMatrix::q8(&w), HostMatrix::q4(&w), q5_0, q6k] {
        for t in 1..=t {
            let bits = |isa| {
                run(isa, &m, &x[..t * cols], rows, cols, t)
                    .iter()
                    .map(|f| f.to_bits())
                    .collect::<Vec<_>>()
            };
            assert_eq!(bits(Isa::Avx2), bits(Isa::Avx512Vnni), "{m:?} t={t}");
        }
    }
}

/// Activations quantize to the same bits whichever instruction set does it: ordinary values, a
/// block of zeros, halves that round away from zero, and a block whose largest value is
/// negative.
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
#[cfg_attr(not(target_arch = "wasm32"), test)]
fn activations_quantize_to_the_same_bits_on_every_instruction_set() {
    let mut x = values(32 * 24, 17);
    x[32..64].fill(0.0);
    for (k, v) in x[64..96].iter_mut().enumerate() {
        // With the block's largest value 127, these are k + 0.5 or -(k + 0.5) steps.
        *v = if k == 0 {
            127.0
        } else {
            (k as f32 + 0.5) * if k % 2 == 0 { 1.0 } else { -1.0 }
        };
    }
    x[96] = -50.0;
    let mut scalar = Q8Rows::default();
    kernels::quantize_rows_q8_with(Isa::Scalar, &x, 96, &mut scalar);
    // Ties to even, as llama.cpp's x86 quantizers (`_mm256_round_ps`, `nearest_int`).
    assert_eq!(scalar.quants[64 + 1], -2, "-1.5 rounds to -2");
    assert_eq!(scalar.quants[64 + 2], 2, "2.5 rounds to 2");
    assert_eq!(scalar.quants[64 + 3], -4, "-3.5 rounds to -4");
    assert_eq!(scalar.quants[96], -127);
    for isa in Isa::available() {
        let mut got = Q8Rows::default();
        kernels::quantize_rows_q8_with(isa, &x, 96, &mut got);
        assert_eq!(got.quants, scalar.quants, "{isa:?}");
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got.scales), bits(&scalar.scales), "{isa:?}");
    }
}

/// The K-quants' activations as llama.cpp's `quantize_row_q8_K_ref` makes them: per 256 values,
/// `iscale = -127 / max` (the value of largest magnitude, with its sign), codes
/// `nearest_int(iscale * x)` at most 127, scale `1 / iscale`. Ours keep the opposite signs where
/// that value is positive: each value's scale times code must be llama.cpp's exactly, and
/// the eight blocks of a super-block share one scale.
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
#[cfg_attr(not(target_arch = "wasm32"), test)]
fn k_quant_activations_are_llama_cpp_s_q8_k() {
    let mut x = values(256 * 6, 29);
    x[256..512].fill(0.0);
    x[600] = 3.0; // a positive largest value
    x[800] = -3.0; // a negative one
    for (k, v) in x[1024..1280].iter_mut().enumerate() {
        // Ties: with the largest value 127, halves of a step.
        *v = if k == 0 { 127.0 } else { (k % 20) as f32 - 9.5 };
    }
    for isa in Isa::available() {
        let mut got = Q8Rows::default();
        kernels::quantize_activations(isa, Activations::Q8K, &x, 512, &mut got);
        assert_eq!(got.activations, Activations::Q8K);
        for (s, span) in x.chunks_exact(256).enumerate() {
            let max = span
                .iter()
                .fold(0.0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
            let scales = &got.scales[s * 8..][..8];
            assert!(scales.iter().all(|&d| d == scales[0]), "{isa:?}: one scale");
            for (j, &v) in span.iter().enumerate() {
                let (d, q) = if max == 0.0 {
                    (0.0, 0)
                } else {
                    let iscale = -127.0 / max;
                    // nearest_int: ties to even.
                    (
                        1.0 / iscale,
                        ((iscale * v).round_ties_even() as i32).min(127),
                    )
                };
                let code = got.quants[s * 256 + j];
                // (Equal as numbers: llama.cpp's 0 codes times a negative scale are -0.)
                assert_eq!(
                    scales[0] * code as f32,
                    d * q as f32,
                    "{isa:?}: value {v} of super-block {s}"
                );
            }
        }
    }
}

/// Random blocks of `format` (any payload the format can hold, scales of either sign), row-major.
fn random_blocks(format: Format, rows: usize, cols: usize, seed: u64) -> Blocks {
    let mut s = seed.max(1);
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let blocks = rows * cols / 32;
    let payload = format.payload();
    let quants = (0..blocks * payload)
        .map(|i| match format {
            // Q8_0 holds -127..=127: llama.cpp never writes -128, and the kernels rely on it.
            Format::Q8_0 => ((next() % 255) as i32 - 127) as i8 as u8,
            // Q4_0's nibbles, Q5_0's nibbles and fifth bits: any byte.
            Format::Q4_0 | Format::Q5_0 => next() as u8,
            // Q6_K: codes -32..=31, then the halves' scales (any i8), then two zero bytes.
            Format::Q6K => match i % payload {
                0..32 => ((next() % 64) as i32 - 32) as i8 as u8,
                32 | 33 => next() as u8,
                _ => 0,
            },
        })
        .collect();
    let scales = (0..blocks)
        .map(|_| (next() % 2001) as f32 / 1000.0 - 1.0)
        .collect();
    Blocks {
        format,
        quants,
        scales,
        offsets: Vec::new(),
        activations: Default::default(),
    }
}

/// [`random_blocks`] with an offset a block (as Q4_1, Q5_1, Q4_K and Q5_K run).
fn random_blocks_with_offsets(format: Format, rows: usize, cols: usize, seed: u64) -> Blocks {
    let mut blocks = random_blocks(format, rows, cols, seed);
    blocks.offsets = (0..blocks.len())
        .map(|b| ((b * 7919 + seed as usize) % 2001) as f32 / 4000.0 - 0.25)
        .collect();
    blocks
}

/// The product by the format's reference alone (`formats/`): each block's integer dot product
/// of stored codes, scaled, summed block by block.
fn format_reference<F: RunFormat>(
    w: &Blocks,
    rows: usize,
    cols: usize,
    values: &[f32],
    xq: &Q8Rows,
) -> (Vec<f32>, Vec<f32>) {
    let per_row = cols / 32;
    let t = xq.scales.len() / per_row;
    let mut out = vec![0.0; t * rows];
    let mut magnitude = vec![0.0; t * rows];
    for i in 0..t {
        for r in 0..rows {
            let (mut sum, mut size) = (0.0f32, 0.0f32);
            for b in 0..per_row {
                let block = r * per_row + b;
                let payload = &w.quants[block * F::PAYLOAD..][..F::PAYLOAD];
                let x = &xq.quants[(i * per_row + b) * 32..][..32];
                let xs = xq.scales[i * per_row + b];
                sum += w.scales[block] * xs * F::dot_block(payload, x) as f32;
                let products: i32 = (0..32)
                    .map(|k| ((F::code(payload, k) - F::BIAS) * x[k] as i32).abs())
                    .sum();
                size += (w.scales[block] * xs).abs() * products as f32;
                if let Some(offset) = w.offsets.get(block) {
                    // The block's values sum to sum(codes) * max |x| / 127 (the unrounded scale),
                    // kept rounded to f16 as llama.cpp's Q8_1 blocks (cpu::matmul).
                    let codes: i32 = x.iter().map(|&c| c as i32).sum();
                    let amax = values[(i * per_row + b) * 32..][..32]
                        .iter()
                        .fold(0.0f32, |m, v| m.max(v.abs()));
                    let part = offset * half::f16::from_f32(codes as f32 * (amax / 127.0)).to_f32();
                    sum += part;
                    size += part.abs();
                }
            }
            out[i * rows + r] = sum;
            magnitude[i * rows + r] = size;
        }
    }
    (out, magnitude)
}

/// Every instruction set's block kernels, row-major and packed, against the formats' scalar
/// reference on random blocks, for every format the kernels run, with and without offsets. The
/// vector kernels scale each lane's partial sum before adding the lanes, so where the products
/// cancel the results differ by a few roundings of the products' size, not of the result's.
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
#[cfg_attr(not(target_arch = "wasm32"), test)]
fn every_block_kernel_matches_the_format_reference() {
    for format in [Format::Q8_0, Format::Q4_0, Format::Q5_0, Format::Q6K] {
        for (k, (rows, cols, t)) in [
            (1, 32, 1),
            (7, 64, 3),
            (67, 288, 5),
            (16, 96, 8),
            (9, 576, 1),
            (13, 1536, 2),
        ]
        .into_iter()
        .enumerate()
        {
            let w = if k % 2 == 1 {
                random_blocks_with_offsets(format, rows, cols, 17 + rows as u64)
            } else {
                random_blocks(format, rows, cols, 17 + rows as u64)
            };
            let x = values(t * cols, 23);
            let xq = q8_rows(&x, cols);
            let (expected, magnitude) = match format {
                Format::Q8_0 => format_reference::<Q8_0>(&w, rows, cols, &x, &xq),
                Format::Q4_0 => format_reference::<Q4_0>(&w, rows, cols, &x, &xq),
                Format::Q5_0 => format_reference::<Q5_0Run>(&w, rows, cols, &x, &xq),
                Format::Q6K => format_reference::<Q6KRun>(&w, rows, cols, &x, &xq),
            };
            for isa in Isa::available() {
                for m in [
                    HostMatrix::Blocks(w.clone()),
                    HostMatrix::Blocks(w.clone()).packed_for(isa, rows, cols),
                ] {
                    let mut got = vec![f32::NAN; t * rows];
                    kernels::matmul(isa, m.rows(), rows, cols, &x, &xq, t, &mut got);
                    for ((a, b), size) in got.iter().zip(&expected).zip(&magnitude) {
                        assert!(
                            (a - b).abs() <= 1e-6 * size + 1e-6,
                            "{isa:?} {format:?} {rows}x{cols} offsets {} packed {}: {a} vs {b}",
                            !w.offsets.is_empty(),
                            matches!(m, HostMatrix::Packed(_))
                        );
                    }
                }
            }
        }
    }
}

#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
#[cfg_attr(not(target_arch = "wasm32"), test)]
fn packing_keeps_every_block() {
    for format in [Format::Q4_0, Format::Q8_0, Format::Q5_0, Format::Q6K] {
        for rows in [1, 7, 8, 9, 67] {
            let row_major = Blocks::quantize(format, &values(rows * 96, 11));
            let packed = tokenometer::cpu::packed::Packed::pack(rows, 96, row_major.clone());
            assert_eq!(packed.blocks(), row_major, "{format:?}, {rows} rows");
            // A row read back (a tied classifier as the token embedding), with offsets too.
            let with_offsets = random_blocks_with_offsets(format, rows, 96, 3);
            let packed =
                HostMatrix::Blocks(with_offsets.clone()).packed_for(Isa::detect(), rows, 96);
            for r in 0..rows {
                let (mut got, mut expected) = (Vec::new(), Vec::new());
                packed.extend_row(r, 96, &mut got);
                with_offsets.dequantize_into(r * 3..(r + 1) * 3, &mut expected);
                assert_eq!(got, expected, "{format:?}, row {r} of {rows}");
            }
        }
    }
}

/// Every instruction set's packed kernel against the row-major scalar kernel, each activation row
/// of a batch against the row alone, and (x86) VNNI's packed tiles against AVX2's, bit for bit: 11
/// rows, more than one tile of either (4 and 8 rows).
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
#[cfg_attr(not(target_arch = "wasm32"), test)]
fn packed_products_match_the_row_major_ones() {
    let (rows, cols, t) = (67, 288, 11);
    let x = values(t * cols, 5);
    let xq = q8_rows(&x, cols);
    for format in [Format::Q4_0, Format::Q8_0, Format::Q5_0, Format::Q6K] {
        let row_major = Blocks::quantize(format, &values(rows * cols, 11));
        let packed = tokenometer::cpu::packed::Packed::pack(rows, cols, row_major.clone());
        let mut expected = vec![0.0; t * rows];
        let row_major = HostMatrix::Blocks(row_major);
        kernels::matmul(
            Isa::Scalar,
            row_major.rows(),
            rows,
            cols,
            &x,
            &xq,
            t,
            &mut expected,
        );
        let top = expected.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let mut by_isa = Vec::new();
        for isa in Isa::available() {
            let mut got = vec![f32::NAN; t * rows];
            tokenometer::cpu::packed::matmul(isa, &packed, &xq, t, &mut got);
            by_isa.push((isa, got.clone()));
            for (a, b) in got.iter().zip(&expected) {
                assert!(
                    (a - b).abs() <= 1e-5 * top,
                    "{isa:?} {format:?}: {a} vs {b}"
                );
            }
            for i in 0..t {
                let one = q8_rows(&x[i * cols..(i + 1) * cols], cols);
                let mut alone = vec![f32::NAN; rows];
                tokenometer::cpu::packed::matmul(isa, &packed, &one, 1, &mut alone);
                assert_eq!(
                    alone,
                    got[i * rows..(i + 1) * rows],
                    "{isa:?} {format:?} row {i}"
                );
            }
        }
        #[cfg(target_arch = "x86_64")]
        {
            let of = |isa| by_isa.iter().find(|(i, _)| *i == isa).map(|(_, got)| got);
            if let (Some(avx2), Some(vnni)) = (of(Isa::Avx2), of(Isa::Avx512Vnni)) {
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(avx2), bits(vnni), "{format:?}: VNNI's packed tiles");
            }
        }
    }
}

/// Attention with its keys taken a block at a time (the softmax online) against the softmax of
/// all the scores at once in f64, for every instruction set: positions over several blocks and
/// a part of one, from position 0 and from a window's first key inside a block.
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
#[cfg_attr(not(target_arch = "wasm32"), test)]
fn attention_in_key_blocks_matches_one_softmax() {
    use kernels::attention::{HeadCache, KEY_BLOCK, Running};
    let (hs, stride) = (64, 64 * 3);
    for (first, seen) in [(0, 1), (0, 100), (37, 130), (40, 41)] {
        // Scores large enough that the largest moves from block to block.
        let query: Vec<f32> = values(hs, 3).iter().map(|v| v * 4.0).collect();
        let keys = values(seen * stride, 4);
        let vals = values(seen * stride, 5);
        let scale = 1.0 / (hs as f64).sqrt();
        let scores: Vec<f64> = (first..seen)
            .map(|j| {
                (0..hs)
                    .map(|d| query[d] as f64 * keys[j * stride + d] as f64)
                    .sum::<f64>()
                    * scale
            })
            .collect();
        let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
        let total: f64 = weights.iter().sum();
        let exact: Vec<f32> = (0..hs)
            .map(|d| {
                (first..seen)
                    .zip(&weights)
                    .map(|(j, w)| w * vals[j * stride + d] as f64)
                    .sum::<f64>()
                    / total
            })
            .map(|v| v as f32)
            .collect();
        for isa in Isa::available() {
            let head = HeadCache {
                keys: &keys,
                values: &vals,
                stride,
            };
            let (mut running, mut out, mut part) =
                (Running::default(), vec![f32::NAN; hs], vec![0.0; hs]);
            for block in (first / KEY_BLOCK)..seen.div_ceil(KEY_BLOCK) {
                let positions = (block * KEY_BLOCK).max(first)..((block + 1) * KEY_BLOCK).min(seen);
                running.add(
                    isa,
                    &query,
                    head,
                    positions,
                    scale as f32,
                    &mut out,
                    &mut part,
                );
            }
            running.finish(&mut out);
            let error = relative_error(&out, &exact);
            assert!(error < 1e-5, "{isa:?} keys {first}..{seen}: {error}");
        }
    }
}

/// SwiGLU's `silu(gate) * up` on every instruction set against f64 arithmetic: within 8 units in
/// the last place of the result (libm's `expf` and AVX2's polynomial each round), over the gates
/// a model gives and far past them, where `exp(-g)` overflows f32 (the result is then 0 within
/// 1e-34, not NaN), and on lengths with and without a tail of fewer than 8.
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
#[cfg_attr(not(target_arch = "wasm32"), test)]
fn silu_times_up_matches_plain_arithmetic() {
    let mut gates: Vec<f32> = (-2000..=2000).map(|i| i as f32 * 0.05).collect();
    gates.extend([
        -500.0, -120.0, -89.0, -88.5, 88.5, 89.0, 120.0, 1e30, -1e30, 0.0, -0.0,
    ]);
    gates.extend(values(333, 7).iter().map(|v| v * 30.0));
    let ups: Vec<f32> = values(gates.len(), 11).iter().map(|v| v * 4.0).collect();
    for isa in Isa::available() {
        for len in [gates.len(), 8, 7, 1] {
            let mut got = gates[..len].to_vec();
            kernels::silu_mul(isa, &mut got, &ups[..len]);
            for ((&got, &g), &u) in got.iter().zip(&gates).zip(&ups) {
                let (g64, u64) = (g as f64, u as f64);
                let want = g64 / (1.0 + (-g64).exp()) * u64;
                let tolerance = want.abs() * 8.0 * f32::EPSILON as f64 + 1e-34;
                assert!(
                    (got as f64 - want).abs() <= tolerance,
                    "{isa:?}: silu({g}) * {u} gave {got}, not {want}"
                );
            }
        }
    }
}

/// Scales a GGUF holds in f16 (every one of a matrix's exact in f16) are packed in 2 bytes each
/// natively on x86-64, and give the products the bits that 4-byte scales give: the same blocks
/// with one scale that f16 cannot hold (so all of them stay f32) differ only in that scale's row,
/// on every instruction set, for one activation row (decode) and a tile of several.
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
#[cfg_attr(not(target_arch = "wasm32"), test)]
fn scales_held_in_f16_give_the_bits_of_f32_ones() {
    // 11 activation rows: AVX-512 VNNI takes the first two groups together (16 lanes) for a
    // prompt's rows, in a tile of 8 and one of 3.
    let (rows, cols, t) = (19, 288, 11);
    let x = values(t * cols, 29);
    let xq = q8_rows(&x, cols);
    for format in [Format::Q4_0, Format::Q8_0, Format::Q5_0, Format::Q6K] {
        // As a GGUF holds them: f16 scales, widened.
        let mut exact = Blocks::quantize(format, &values(rows * cols, 31));
        for s in &mut exact.scales {
            *s = half::f16::from_f32(*s).to_f32();
        }
        let mut wide = exact.clone();
        wide.scales[0] = 0.1;
        let (half, full) = (
            tokenometer::cpu::packed::Packed::pack(rows, cols, exact),
            tokenometer::cpu::packed::Packed::pack(rows, cols, wide),
        );
        // 3 groups of 8 rows, 9 blocks a row: 216 scales.
        let saved = if cfg!(target_arch = "x86_64") {
            2 * 216
        } else {
            0
        };
        assert_eq!(half.bytes() + saved, full.bytes(), "{format:?}");
        for isa in Isa::available() {
            for t in [1, t] {
                let product = |m| {
                    let mut out = vec![f32::NAN; t * rows];
                    tokenometer::cpu::packed::matmul(isa, m, &xq, t, &mut out);
                    out
                };
                let (a, b) = (product(&half), product(&full));
                for i in 0..t {
                    let bits = |v: &[f32]| {
                        v[i * rows + 1..(i + 1) * rows]
                            .iter()
                            .map(|f| f.to_bits())
                            .collect::<Vec<_>>()
                    };
                    assert_eq!(bits(&a), bits(&b), "{isa:?} {format:?} t={t} row {i}");
                    assert_ne!(
                        a[i * rows],
                        b[i * rows],
                        "{isa:?} {format:?}: row 0's scale"
                    );
                }
            }
        }
    }
}
