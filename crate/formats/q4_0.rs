//! Q4_0 (GGUF type 2): blocks of 32 values, an f16 scale `d` then 16 bytes; byte `j` holds value
//! `j` in its low nibble and value `j + 16` in its high nibble, each stored as `value + 8`, so
//! value `i` is `(nibble - 8) * d`.

use crate::formats::block::{BLOCK, BlockFormat, Format, RunFormat, RunsAs};

pub struct Q4_0;

impl BlockFormat for Q4_0 {
    const NAME: &'static str = "Q4_0";
    const ID: u32 = 2;
    const BLOCK_VALUES: usize = BLOCK;
    const BLOCK_BYTES: usize = 18;

    fn dequantize_block(block: &[u8], out: &mut [f32]) {
        let (d, q) = Self::split_block(block);
        for (j, &byte) in q.iter().enumerate() {
            out[j] = ((byte & 0x0f) as f32 - 8.0) * d;
            out[j + BLOCK / 2] = ((byte >> 4) as f32 - 8.0) * d;
        }
    }
}

impl RunsAs for Q4_0 {
    const AS: Format = Format::Q4_0;

    fn run_block(block: &[u8], push: &mut dyn FnMut(&[u8], f32, f32)) {
        let (scale, payload) = Self::split_block(block);
        push(payload, scale, 0.0);
    }
}

impl RunFormat for Q4_0 {
    const FORMAT: Format = Format::Q4_0;
    const PAYLOAD: usize = BLOCK / 2;
    const BIAS: i32 = 8;
    const ZERO_BYTE: u8 = 0x88;

    /// The value of largest magnitude maps to -8, so scale = that value / -8, and the others
    /// round to -8..=7.
    fn quantize_block(values: &[f32], payload: &mut [u8]) -> f32 {
        let extreme = values
            .iter()
            .copied()
            .fold(0.0f32, |m, v| if v.abs() > m.abs() { v } else { m });
        let scale = extreme / -8.0;
        let inv = if scale != 0.0 { 1.0 / scale } else { 0.0 };
        let code = |v: f32| ((v * inv).round() + 8.0).clamp(0.0, 15.0) as u8;
        let (lo, hi) = values.split_at(BLOCK / 2);
        for ((p, &l), &h) in payload.iter_mut().zip(lo).zip(hi) {
            *p = code(l) | (code(h) << 4);
        }
        scale
    }

    #[inline(always)]
    fn code(payload: &[u8], i: usize) -> i32 {
        let byte = payload[i % (BLOCK / 2)];
        (if i < BLOCK / 2 {
            byte & 0x0f
        } else {
            byte >> 4
        }) as i32
    }

    fn dot_block(payload: &[u8], x: &[i8]) -> i32 {
        let codes: i32 = payload[..BLOCK / 2]
            .iter()
            .enumerate()
            .map(|(p, &byte)| {
                (byte & 0x0f) as i32 * x[p] as i32 + (byte >> 4) as i32 * x[p + BLOCK / 2] as i32
            })
            .sum();
        codes - Self::BIAS * x[..BLOCK].iter().map(|&v| v as i32).sum::<i32>()
    }
}
