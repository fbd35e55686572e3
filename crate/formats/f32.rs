//! F32 (GGUF type 0): one little-endian f32 a value.

use crate::formats::block::BlockFormat;

pub struct F32;

impl BlockFormat for F32 {
    const NAME: &'static str = "F32";
    const ID: u32 = 0;
    const BLOCK_VALUES: usize = 1;
    const BLOCK_BYTES: usize = 4;

    fn dequantize_block(block: &[u8], out: &mut [f32]) {
        out[0] = f32::from_le_bytes([block[0], block[1], block[2], block[3]]);
    }
}
