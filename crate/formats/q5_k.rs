//! Q5_K (GGUF type 13): super-blocks of 256 values in 176 bytes: an f16 scale `d` and an f16
//! `dmin`, eight 6-bit scales and mins packed as Q4_K's, 32 bytes of fifth bits (bit `j` of byte
//! `l` for value `l` of sub-block `j`), then 128 bytes of nibbles as Q4_K lays them out; sub-block
//! `j`'s value is `d * scale_j * q - dmin * min_j` with `q` in 0..=31. Runs as Q5_0 with offsets,
//! one block a sub-block: code `q`, scale `d * scale_j`, offset `16 d scale_j - dmin min_j`.

use crate::formats::block::{BLOCK, BlockFormat, Format, RunsAs, f16_at};
use crate::formats::q4_k::scale_min_k4;
use crate::formats::q5_0::run_payload;

pub struct Q5K;

/// The 5-bit codes of sub-block `j` (0..8) of a Q5_K super-block.
fn codes(b: &[u8], j: usize) -> impl Iterator<Item = u8> + '_ {
    let (qh, qs) = (&b[16..48], &b[48 + 32 * (j / 2)..][..BLOCK]);
    let shift = 4 * (j % 2);
    qs.iter()
        .zip(qh)
        .map(move |(low, high)| ((low >> shift) & 0x0f) | (((high >> j) & 1) << 4))
}

impl BlockFormat for Q5K {
    const NAME: &'static str = "Q5_K";
    const ID: u32 = 13;
    const BLOCK_VALUES: usize = 256;
    const BLOCK_BYTES: usize = 176;

    fn dequantize_block(b: &[u8], out: &mut [f32]) {
        let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
        for (j, out) in out.chunks_exact_mut(BLOCK).enumerate() {
            let (sc, m) = scale_min_k4(j, &b[4..16]);
            for (out, q) in out.iter_mut().zip(codes(b, j)) {
                *out = d * sc as f32 * q as f32 - dmin * m as f32;
            }
        }
    }
}

impl RunsAs for Q5K {
    const AS: Format = Format::Q5_0;

    fn run_block(b: &[u8], push: &mut dyn FnMut(&[u8], f32, f32)) {
        let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
        for j in 0..8 {
            let (sc, m) = scale_min_k4(j, &b[4..16]);
            let mut q = [0u8; BLOCK];
            for (q, code) in q.iter_mut().zip(codes(b, j)) {
                *q = code;
            }
            let scale = d * sc as f32;
            push(&run_payload(q), scale, 16.0 * scale - dmin * m as f32);
        }
    }
}
