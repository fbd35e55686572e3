//! Q4_K (GGUF type 12): super-blocks of 256 values in 144 bytes: an f16 scale `d` and an f16
//! `dmin`, 12 bytes of eight 6-bit scales and mins, then 128 bytes of nibbles; sub-block `j`'s
//! value is `d * scale_j * q - dmin * min_j`. Widened to f32 at load.

use crate::formats::block::BlockFormat;

pub struct Q4K;

impl BlockFormat for Q4K {
    const NAME: &'static str = "Q4_K";
    const ID: u32 = 12;
    const BLOCK_VALUES: usize = 256;
    const BLOCK_BYTES: usize = 144;

    fn dequantize_block(b: &[u8], out: &mut [f32]) {
        let half = |b: &[u8]| half::f16::from_le_bytes([b[0], b[1]]).to_f32();
        let (d, dmin) = (half(&b[0..2]), half(&b[2..4]));
        let scales = &b[4..16];
        let qs = &b[16..144];
        for j in 0..4 {
            let (sc1, m1) = scale_min_k4(2 * j, scales);
            let (sc2, m2) = scale_min_k4(2 * j + 1, scales);
            let q = &qs[32 * j..32 * (j + 1)];
            let out = &mut out[64 * j..64 * (j + 1)];
            for (l, &v) in q.iter().enumerate() {
                out[l] = d * sc1 as f32 * (v & 0x0f) as f32 - dmin * m1 as f32;
                out[l + 32] = d * sc2 as f32 * (v >> 4) as f32 - dmin * m2 as f32;
            }
        }
    }
}

/// Q4_K's 6-bit scale and min of sub-block `j` (of 8), packed into 12 bytes.
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}
