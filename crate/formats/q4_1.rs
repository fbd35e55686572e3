//! Q4_1 (GGUF type 3): blocks of 32 values in 20 bytes: an f16 scale `d`, an f16 minimum `m`,
//! then 16 bytes of nibbles in Q4_0's order (byte `j`: value `j` low, value `j + 16` high); value
//! `i` is `q_i * d + m`. Runs as Q4_0 with an offset: the very same nibbles, read as `q - 8`, with
//! scale `d` and offset `m + 8 d`, since `q d + m = (q - 8) d + (m + 8 d)`.

use crate::formats::block::{BLOCK, BlockFormat, Format, RunsAs, f16_at};

pub struct Q4_1;

impl BlockFormat for Q4_1 {
    const NAME: &'static str = "Q4_1";
    const ID: u32 = 3;
    const BLOCK_VALUES: usize = BLOCK;
    const BLOCK_BYTES: usize = 20;

    fn dequantize_block(block: &[u8], out: &mut [f32]) {
        let (d, m) = (f16_at(block, 0), f16_at(block, 2));
        for (j, &byte) in block[4..20].iter().enumerate() {
            out[j] = (byte & 0x0f) as f32 * d + m;
            out[j + BLOCK / 2] = (byte >> 4) as f32 * d + m;
        }
    }
}

impl RunsAs for Q4_1 {
    const AS: Format = Format::Q4_0;

    fn run_block(block: &[u8], push: &mut dyn FnMut(&[u8], f32, f32)) {
        let (d, m) = (f16_at(block, 0), f16_at(block, 2));
        push(&block[4..20], d, m + 8.0 * d);
    }
}
