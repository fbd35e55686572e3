//! Q2_K (GGUF type 10): super-blocks of 256 values in 84 bytes: sixteen bytes of 4-bit scales (low)
//! and mins (high), 64 bytes of 2-bit codes, an f16 `d` and an f16 `dmin`; each 16 values share a
//! scale and a min: `d * scale * q - dmin * min`. Its sub-blocks of 16 do not fit the kernels'
//! blocks of 32, so it is widened at load (and stored as the chosen precision).

use crate::formats::block::{BlockFormat, f16_at};

pub struct Q2K;

impl BlockFormat for Q2K {
    const NAME: &'static str = "Q2_K";
    const ID: u32 = 10;
    const BLOCK_VALUES: usize = 256;
    const BLOCK_BYTES: usize = 84;

    fn dequantize_block(b: &[u8], out: &mut [f32]) {
        let (scales, qs) = (&b[0..16], &b[16..80]);
        let (d, dmin) = (f16_at(b, 80), f16_at(b, 82));
        // Value 128 h + 32 k + 16 s + l (half h, shift k, sub-half s) is bits 2k.. of byte
        // 32 h + 16 s + l, with scale byte 8 h + 2 k + s.
        for (i, out) in out.iter_mut().enumerate() {
            let (h, k, s, l) = (i / 128, i / 32 % 4, i / 16 % 2, i % 16);
            let sc = scales[8 * h + 2 * k + s];
            let q = (qs[32 * h + 16 * s + l] >> (2 * k)) & 3;
            *out = d * (sc & 0x0f) as f32 * q as f32 - dmin * (sc >> 4) as f32;
        }
    }
}
