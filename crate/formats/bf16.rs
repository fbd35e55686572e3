//! BF16 (GGUF type 30): the top half of an f32 a value.

use crate::formats::block::BlockFormat;

pub struct Bf16;

impl BlockFormat for Bf16 {
    const NAME: &'static str = "BF16";
    const ID: u32 = 30;
    const BLOCK_VALUES: usize = 1;
    const BLOCK_BYTES: usize = 2;

    fn dequantize_block(block: &[u8], out: &mut [f32]) {
        out[0] = half::bf16::from_le_bytes([block[0], block[1]]).to_f32();
    }
}
