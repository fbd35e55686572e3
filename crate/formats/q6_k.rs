//! Q6_K (GGUF type 14): super-blocks of 256 values in 210 bytes: 128 bytes of low nibbles, 64 of
//! high 2-bit pairs, sixteen i8 scales and an f16 `d`; value `i` is `d * scale * (q - 32)`.
//! Widened to f32 at load.

use crate::formats::block::BlockFormat;

pub struct Q6K;

impl BlockFormat for Q6K {
    const NAME: &'static str = "Q6_K";
    const ID: u32 = 14;
    const BLOCK_VALUES: usize = 256;
    const BLOCK_BYTES: usize = 210;

    fn dequantize_block(b: &[u8], out: &mut [f32]) {
        let (ql, qh, sc) = (&b[0..128], &b[128..192], &b[192..208]);
        let d = half::f16::from_le_bytes([b[208], b[209]]).to_f32();
        for half_block in 0..2 {
            let (ql, qh) = (&ql[64 * half_block..], &qh[32 * half_block..]);
            let sc = &sc[8 * half_block..];
            let y = &mut out[128 * half_block..128 * (half_block + 1)];
            for l in 0..32 {
                let is = l / 16;
                let q =
                    |low: u8, shift: u8| (low as i32 | ((((qh[l] >> shift) & 3) as i32) << 4)) - 32;
                let scale = |k: usize| d * (sc[is + k] as i8) as f32;
                y[l] = scale(0) * q(ql[l] & 0x0f, 0) as f32;
                y[l + 32] = scale(2) * q(ql[l + 32] & 0x0f, 2) as f32;
                y[l + 64] = scale(4) * q(ql[l] >> 4, 4) as f32;
                y[l + 96] = scale(6) * q(ql[l + 32] >> 4, 6) as f32;
            }
        }
    }
}
