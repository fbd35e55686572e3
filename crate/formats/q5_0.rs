//! Q5_0 (GGUF type 6): blocks of 32 values in 22 bytes: an f16 scale `d`, 4 bytes holding each
//! value's fifth bit (bit `i` for value `i`), then 16 bytes of low nibbles in Q4_0's order; value
//! `i` is `(q_i - 16) * d`. Runs as Q8_0, exactly: each value's code `q - 16` (-16..=15) is a byte.

use crate::formats::block::{BLOCK, BlockFormat, Format, RunsAs, f16_at};

pub struct Q5_0;

/// The 5-bit codes (0..=31) of a Q5_0 or Q5_1 block's high bits `qh` and nibbles `qs`.
pub(crate) fn codes5(qh: &[u8], qs: &[u8]) -> [u8; BLOCK] {
    let high = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
    let mut q = [0u8; BLOCK];
    for (j, &byte) in qs.iter().enumerate() {
        q[j] = (byte & 0x0f) | (((high >> j) & 1) << 4) as u8;
        q[j + BLOCK / 2] = (byte >> 4) | (((high >> (j + BLOCK / 2)) & 1) << 4) as u8;
    }
    q
}

/// 5-bit codes as Q8_0's payload: each `q - 16`, a signed byte.
pub(crate) fn centred(q: [u8; BLOCK]) -> [u8; BLOCK] {
    q.map(|q| (q as i8 - 16) as u8)
}

impl BlockFormat for Q5_0 {
    const NAME: &'static str = "Q5_0";
    const ID: u32 = 6;
    const BLOCK_VALUES: usize = BLOCK;
    const BLOCK_BYTES: usize = 22;

    fn dequantize_block(block: &[u8], out: &mut [f32]) {
        let d = f16_at(block, 0);
        for (out, q) in out.iter_mut().zip(codes5(&block[2..6], &block[6..22])) {
            *out = (q as i32 - 16) as f32 * d;
        }
    }
}

impl RunsAs for Q5_0 {
    const AS: Format = Format::Q8_0;

    fn run_block(block: &[u8], push: &mut dyn FnMut(&[u8], f32, f32)) {
        push(
            &centred(codes5(&block[2..6], &block[6..22])),
            f16_at(block, 0),
            0.0,
        );
    }
}
