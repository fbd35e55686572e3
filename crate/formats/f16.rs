//! F16 (GGUF type 1): one IEEE half a value.

use crate::formats::block::BlockFormat;

pub struct F16;

impl BlockFormat for F16 {
    const NAME: &'static str = "F16";
    const ID: u32 = 1;
    const BLOCK_VALUES: usize = 1;
    const BLOCK_BYTES: usize = 2;

    fn dequantize_block(block: &[u8], out: &mut [f32]) {
        out[0] = half::f16::from_le_bytes([block[0], block[1]]).to_f32();
    }
}
