//! Q4_K (GGUF type 12): super-blocks of 256 values in 144 bytes: an f16 scale `d` and an f16
//! `dmin`, 12 bytes of eight 6-bit scales and mins, then 128 bytes of nibbles (bytes `32p..32p+32`
//! hold sub-block `2p` in their low nibbles and `2p + 1` in their high ones); sub-block `j`'s value
//! is `d * scale_j * q - dmin * min_j`. Runs as Q4_0 with offsets, one block a sub-block: the
//! nibbles regrouped into Q4_0's order, scale `d * scale_j` and offset
//! `8 d scale_j - dmin min_j`.

use crate::formats::block::{BLOCK, BlockFormat, Format, RunsAs, f16_at};

pub struct Q4K;

/// The 4-bit codes of sub-block `j` (0..8) of a Q4_K super-block's 128 nibble bytes.
fn codes(qs: &[u8], j: usize) -> impl Iterator<Item = u8> + '_ {
    let shift = 4 * (j % 2);
    qs[32 * (j / 2)..][..BLOCK]
        .iter()
        .map(move |b| (b >> shift) & 0x0f)
}

impl BlockFormat for Q4K {
    const NAME: &'static str = "Q4_K";
    const ID: u32 = 12;
    const BLOCK_VALUES: usize = 256;
    const BLOCK_BYTES: usize = 144;

    fn dequantize_block(b: &[u8], out: &mut [f32]) {
        let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
        for (j, out) in out.chunks_exact_mut(BLOCK).enumerate() {
            let (sc, m) = scale_min_k4(j, &b[4..16]);
            for (out, q) in out.iter_mut().zip(codes(&b[16..144], j)) {
                *out = d * sc as f32 * q as f32 - dmin * m as f32;
            }
        }
    }
}

impl RunsAs for Q4K {
    const AS: Format = Format::Q4_0;

    fn run_block(b: &[u8], push: &mut dyn FnMut(&[u8], f32, f32)) {
        let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
        for j in 0..8 {
            let (sc, m) = scale_min_k4(j, &b[4..16]);
            let q: Vec<u8> = codes(&b[16..144], j).collect();
            let payload: Vec<u8> = (0..BLOCK / 2).map(|k| q[k] | (q[k + 16] << 4)).collect();
            let scale = d * sc as f32;
            push(&payload, scale, 8.0 * scale - dmin * m as f32);
        }
    }
}

/// The 6-bit scale and min of sub-block `j` (of 8) of Q4_K and Q5_K, packed into 12 bytes.
pub(crate) fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}
