//! Q3_K (GGUF type 11): super-blocks of 256 values in 110 bytes: 32 bytes of high bits, 64 bytes of
//! 2-bit low codes, twelve bytes of sixteen 6-bit scales, an f16 `d`; each 16 values share a scale:
//! `d * (scale - 32) * (q - 4)`, where `q` is the 2-bit code plus 4 when the high bit is set. Its
//! sub-blocks of 16 do not fit the kernels' blocks of 32, so it is widened at load.

use crate::formats::block::{BlockFormat, f16_at};

pub struct Q3K;

/// The sixteen 6-bit scales of twelve bytes: scale `j`'s low 4 bits are nibble `j / 8` of byte
/// `j % 8`, its high 2 bits are bits `2 (j / 4)..` of byte `8 + j % 4`.
fn scales(packed: &[u8]) -> [i32; 16] {
    std::array::from_fn(|j| {
        let low = (packed[j % 8] >> (4 * (j / 8))) & 0x0f;
        let high = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
        (low | (high << 4)) as i32 - 32
    })
}

impl BlockFormat for Q3K {
    const NAME: &'static str = "Q3_K";
    const ID: u32 = 11;
    const BLOCK_VALUES: usize = 256;
    const BLOCK_BYTES: usize = 110;

    fn dequantize_block(b: &[u8], out: &mut [f32]) {
        let (hmask, qs) = (&b[0..32], &b[32..96]);
        let scales = scales(&b[96..108]);
        let d = f16_at(b, 108);
        // Value 128 h + 32 k + 16 s + l is bits 2k.. of byte 32 h + 16 s + l, its high bit is bit
        // 4 h + k of hmask[16 s + l], and its scale is number 8 h + 2 k + s.
        for (i, out) in out.iter_mut().enumerate() {
            let (h, k, s, l) = (i / 128, i / 32 % 4, i / 16 % 2, i % 16);
            let low = ((qs[32 * h + 16 * s + l] >> (2 * k)) & 3) as i32;
            let high = (hmask[16 * s + l] >> (4 * h + k)) & 1;
            let q = low - if high == 1 { 0 } else { 4 };
            *out = d * scales[8 * h + 2 * k + s] as f32 * q as f32;
        }
    }
}
