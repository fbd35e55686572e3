//! Q5_1 (GGUF type 7): blocks of 32 values in 24 bytes: an f16 scale `d`, an f16 minimum `m`, the
//! fifth bits and nibbles as Q5_0 has them; value `i` is `q_i * d + m`. Runs as Q5_0 with an
//! offset: the very same 5-bit codes, read as `q - 16`, with scale `d` and offset `m + 16 d`.

use crate::formats::block::{BLOCK, BlockFormat, Format, RunsAs, f16_at};
use crate::formats::q5_0::{codes5, stored_run_payload};

pub struct Q5_1;

impl BlockFormat for Q5_1 {
    const NAME: &'static str = "Q5_1";
    const ID: u32 = 7;
    const BLOCK_VALUES: usize = BLOCK;
    const BLOCK_BYTES: usize = 24;

    fn dequantize_block(block: &[u8], out: &mut [f32]) {
        let (d, m) = (f16_at(block, 0), f16_at(block, 2));
        for (out, q) in out.iter_mut().zip(codes5(&block[4..8], &block[8..24])) {
            *out = q as f32 * d + m;
        }
    }
}

impl RunsAs for Q5_1 {
    const AS: Format = Format::Q5_0;

    fn run_block(block: &[u8], push: &mut dyn FnMut(&[u8], f32, f32)) {
        let (d, m) = (f16_at(block, 0), f16_at(block, 2));
        push(
            &stored_run_payload(&block[4..8], &block[8..24]),
            d,
            m + 16.0 * d,
        );
    }
}
