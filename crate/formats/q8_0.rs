//! Q8_0 (GGUF type 8): blocks of 32 values, an f16 scale `d` then 32 signed bytes `q`; value `i`
//! is `q[i] * d`.

use crate::formats::block::{BLOCK, BlockFormat, Format, RunFormat, RunsAs};

pub struct Q8_0;

impl BlockFormat for Q8_0 {
    const NAME: &'static str = "Q8_0";
    const ID: u32 = 8;
    const BLOCK_VALUES: usize = BLOCK;
    const BLOCK_BYTES: usize = 34;

    fn dequantize_block(block: &[u8], out: &mut [f32]) {
        let (d, q) = Self::split_block(block);
        for (out, &q) in out.iter_mut().zip(q) {
            *out = q as i8 as f32 * d;
        }
    }
}

impl RunsAs for Q8_0 {
    const AS: Format = Format::Q8_0;

    fn run_block(block: &[u8], push: &mut dyn FnMut(&[u8], f32, f32)) {
        let (scale, payload) = Self::split_block(block);
        push(payload, scale, 0.0);
    }
}

impl RunFormat for Q8_0 {
    const FORMAT: Format = Format::Q8_0;
    const PAYLOAD: usize = BLOCK;
    const BIAS: i32 = 0;
    const ZERO_BYTE: u8 = 0;

    /// scale = max |x| / 127, each value rounded half away from zero (`f32::round`'s rule,
    /// written as `+0.5` with the value's sign and a truncating cast: |v / scale| <= 127, so
    /// the cast is exact). The CPU's vector quantizers of activations give these very bits.
    fn quantize_block(values: &[f32], payload: &mut [u8]) -> f32 {
        let amax = values.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let scale = amax / 127.0;
        let inv = if scale > 0.0 { 1.0 / scale } else { 0.0 };
        for (p, v) in payload.iter_mut().zip(values) {
            let r = v * inv;
            *p = (r + 0.5f32.copysign(r)) as i8 as u8;
        }
        scale
    }

    #[inline(always)]
    fn code(payload: &[u8], i: usize) -> i32 {
        payload[i] as i8 as i32
    }

    fn dot_block(payload: &[u8], x: &[i8]) -> i32 {
        payload[..BLOCK]
            .iter()
            .zip(x)
            .map(|(&w, &x)| w as i8 as i32 * x as i32)
            .sum()
    }
}
