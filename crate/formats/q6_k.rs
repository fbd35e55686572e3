//! Q6_K (GGUF type 14): super-blocks of 256 values in 210 bytes: 128 bytes of low nibbles, 64 of
//! high 2-bit pairs, sixteen i8 scales (one per 16 values) and an f16 `d`; value `i` is
//! `d * scale[i / 16] * (q - 32)`.
//!
//! Runs as stored, exactly, by kernels of its own ([`Q6KRun`], `Format::Q6K`): each 32 values as
//! their 6-bit codes `q - 32` in signed bytes, the block's two sub-block scales beside them, and
//! `d` as the block's scale. Its 16-value sub-blocks do not fit one scale a block of 32, so the
//! kernels multiply each half's integer sums by its scale (`(q - 32) * scale` fits 16 bits;
//! a block's sum stays an exact integer).

use crate::formats::block::{BLOCK, BlockFormat, Format, RunFormat, RunsAs, f16_at};

pub struct Q6K;

/// The codes `q - 32` (-32..=31) of a Q6_K super-block, in value order.
fn codes(b: &[u8]) -> [i8; 256] {
    let (ql, qh) = (&b[0..128], &b[128..192]);
    let mut q = [0i8; 256];
    for half in 0..2 {
        let (ql, qh) = (&ql[64 * half..], &qh[32 * half..]);
        let q = &mut q[128 * half..];
        for l in 0..32 {
            let code = |low: u8, shift: u8| (low | (((qh[l] >> shift) & 3) << 4)) as i8 - 32;
            q[l] = code(ql[l] & 0x0f, 0);
            q[l + 32] = code(ql[l + 32] & 0x0f, 2);
            q[l + 64] = code(ql[l] >> 4, 4);
            q[l + 96] = code(ql[l + 32] >> 4, 6);
        }
    }
    q
}

impl BlockFormat for Q6K {
    const NAME: &'static str = "Q6_K";
    const ID: u32 = 14;
    const BLOCK_VALUES: usize = 256;
    const BLOCK_BYTES: usize = 210;

    fn dequantize_block(b: &[u8], out: &mut [f32]) {
        let d = f16_at(b, 208);
        for (i, (out, q)) in out.iter_mut().zip(codes(b)).enumerate() {
            *out = d * (b[192 + i / 16] as i8) as f32 * q as f32;
        }
    }
}

impl RunsAs for Q6K {
    const AS: Format = Format::Q6K;

    fn run_block(b: &[u8], push: &mut dyn FnMut(&[u8], f32, f32)) {
        let d = f16_at(b, 208);
        let q = codes(b);
        let mut payload = [0u8; Q6KRun::PAYLOAD];
        for (j, q) in q.chunks_exact(BLOCK).enumerate() {
            for (p, &q) in payload.iter_mut().zip(q) {
                *p = q as u8;
            }
            payload[BLOCK] = b[192 + 2 * j];
            payload[BLOCK + 1] = b[192 + 2 * j + 1];
            push(&payload, d, 0.0);
        }
    }
}

/// Q6_K's values as its kernels run them, 32 at a time (`Format::Q6K`): a payload of 36 bytes,
/// the 32 codes `q - 32` as signed bytes in value order, then the scales of values 0..16 and
/// 16..32 as signed bytes, then two zero bytes (whole 4-byte pieces, as the packed layout moves
/// them); the block's scale is Q6_K's `d`. Value `i` is `d * code_i * scale_(i / 16)`.
///
/// Not a GGUF type: as a [`BlockFormat`] it is this block behind an f16 `d` (38 bytes), which
/// only the reference tests read.
pub struct Q6KRun;

impl BlockFormat for Q6KRun {
    const NAME: &'static str = "Q6_K";
    const ID: u32 = 14;
    const BLOCK_VALUES: usize = BLOCK;
    const BLOCK_BYTES: usize = 2 + Self::PAYLOAD;

    fn dequantize_block(block: &[u8], out: &mut [f32]) {
        let (d, payload) = Self::split_block(block);
        for (i, out) in out.iter_mut().enumerate() {
            *out = Self::code(payload, i) as f32 * d;
        }
    }
}

impl RunFormat for Q6KRun {
    const FORMAT: Format = Format::Q6K;
    const PAYLOAD: usize = BLOCK + 4;
    const BIAS: i32 = 0;
    const ZERO_BYTE: u8 = 0;

    /// Each half's scale `amax / 31` as a multiple (1..=127) of `d = max(scales) / 127`, the
    /// codes rounded to -32..=31 with it. (llama.cpp's own quantizer searches for better scales;
    /// this one is for the tests' random values.)
    fn quantize_block(values: &[f32], payload: &mut [u8]) -> f32 {
        let amax = |half: &[f32]| half.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let steps = [amax(&values[..16]) / 31.0, amax(&values[16..]) / 31.0];
        let d = steps[0].max(steps[1]) / 127.0;
        payload.fill(0);
        if d == 0.0 {
            return 0.0;
        }
        for (h, step) in steps.into_iter().enumerate() {
            let scale = (step / d).round().clamp(1.0, 127.0);
            payload[BLOCK + h] = scale as i8 as u8;
            for i in 16 * h..16 * (h + 1) {
                payload[i] = (values[i] / (d * scale)).round().clamp(-32.0, 31.0) as i8 as u8;
            }
        }
        d
    }

    #[inline(always)]
    fn code(payload: &[u8], i: usize) -> i32 {
        payload[i] as i8 as i32 * payload[BLOCK + i / 16] as i8 as i32
    }

    /// Each half's integer sum times its scale.
    fn dot_block(payload: &[u8], x: &[i8]) -> i32 {
        (0..2)
            .map(|h| {
                let sum: i32 = (16 * h..16 * (h + 1))
                    .map(|i| payload[i] as i8 as i32 * x[i] as i32)
                    .sum();
                sum * payload[BLOCK + h] as i8 as i32
            })
            .sum()
    }
}
