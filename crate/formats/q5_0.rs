//! Q5_0 (GGUF type 6): blocks of 32 values in 22 bytes: an f16 scale `d`, 4 bytes holding each
//! value's fifth bit (bit `i` for value `i`), then 16 bytes of low nibbles in Q4_0's order; value
//! `i` is `(q_i - 16) * d`.
//!
//! Runs as stored, exactly, by kernels of its own ([`Q5_0Run`], `Format::Q5_0`): Q4_0's nibbles,
//! and the fifth bits regrouped so that a kernel finds the bits of the nibbles it holds with one
//! shift. Q5_1 and Q5_K run as it with an offset a block.

use crate::formats::block::{BLOCK, BlockFormat, Format, RunFormat, RunsAs, f16_at};

pub struct Q5_0;

/// The 5-bit codes (0..=31) of a Q5_0 or Q5_1 block's high bits `qh` and nibbles `qs`.
pub(crate) fn codes5(qh: &[u8], qs: &[u8]) -> [u8; BLOCK] {
    let high = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
    let mut q = [0u8; BLOCK];
    for (j, &byte) in qs.iter().enumerate() {
        q[j] = (byte & 0x0f) | (((high >> j) & 1) << 4) as u8;
        q[j + BLOCK / 2] = (byte >> 4) | (((high >> (j + BLOCK / 2)) & 1) << 4) as u8;
    }
    q
}

impl BlockFormat for Q5_0 {
    const NAME: &'static str = "Q5_0";
    const ID: u32 = 6;
    const BLOCK_VALUES: usize = BLOCK;
    const BLOCK_BYTES: usize = 22;

    fn dequantize_block(block: &[u8], out: &mut [f32]) {
        let d = f16_at(block, 0);
        for (out, q) in out.iter_mut().zip(codes5(&block[2..6], &block[6..22])) {
            *out = (q as i32 - 16) as f32 * d;
        }
    }
}

impl RunsAs for Q5_0 {
    const AS: Format = Format::Q5_0;

    fn run_block(block: &[u8], push: &mut dyn FnMut(&[u8], f32, f32)) {
        push(
            &stored_run_payload(&block[2..6], &block[6..22]),
            f16_at(block, 0),
            0.0,
        );
    }
}

/// Where the fifth bit of value `i` lies in [`Q5_0Run`]'s 4 bytes of them: (byte, bit).
#[inline(always)]
const fn high_bit(i: usize) -> (usize, usize) {
    let (half, j) = (i / (BLOCK / 2), i % (BLOCK / 2));
    (j % 4, 2 * (j / 4) + half)
}

/// The fifth bits of values 0..32 (bit `i` of `high` for value `i`, GGUF's order) as
/// [`Q5_0Run`]'s 4 bytes of them.
fn regrouped(high: u32) -> [u8; 4] {
    let mut out = [0u8; 4];
    for i in 0..BLOCK {
        let (byte, bit) = high_bit(i);
        out[byte] |= (((high >> i) & 1) as u8) << bit;
    }
    out
}

/// 32 codes (0..=31, in value order) as [`Q5_0Run`]'s payload.
pub(crate) fn run_payload(q: [u8; BLOCK]) -> [u8; Q5_0Run::PAYLOAD] {
    let mut payload = [0u8; Q5_0Run::PAYLOAD];
    for j in 0..BLOCK / 2 {
        payload[j] = (q[j] & 0x0f) | (q[j + BLOCK / 2] << 4);
    }
    let high = q
        .iter()
        .enumerate()
        .fold(0u32, |high, (i, &q)| high | (((q >> 4) & 1) as u32) << i);
    payload[BLOCK / 2..].copy_from_slice(&regrouped(high));
    payload
}

/// A stored Q5_0 or Q5_1 block's fifth bits `qh` and nibbles `qs` as [`Q5_0Run`]'s payload: the
/// nibbles as they lie (Q4_0's order, as GGUF's), the bits regrouped.
pub(crate) fn stored_run_payload(qh: &[u8], qs: &[u8]) -> [u8; Q5_0Run::PAYLOAD] {
    let mut payload = [0u8; Q5_0Run::PAYLOAD];
    payload[..BLOCK / 2].copy_from_slice(&qs[..BLOCK / 2]);
    let high = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
    payload[BLOCK / 2..].copy_from_slice(&regrouped(high));
    payload
}

/// Q5_0's values as its kernels run them (`Format::Q5_0`): a payload of 20 bytes, Q4_0's 16 bytes
/// of low nibbles (byte `j`: value `j` low, value `j + 16` high) then 4 bytes of fifth bits, and
/// the block's scale `d`; value `i` is `(q_i - 16) * d`, `q_i` in 0..=31. The fifth bits lie where
/// the 4-byte pieces of the nibbles find them: the nibbles of piece `k` (byte `j` of it: values
/// `4 k + j` and `16 + 4 k + j`) take bits `2 k` and `2 k + 1` of fifth-bit byte `j`, so a packed
/// kernel shifts that piece of fifth bits right by `2 k` and has bit 0 for the low nibbles and
/// bit 1 for the high ones in every byte (`formats/q5_0.rs`'s `high_bit`).
///
/// Not a GGUF type: as a [`BlockFormat`] it is this block behind an f16 `d` (22 bytes, GGUF's
/// size but not its order), which only the reference tests read.
pub struct Q5_0Run;

impl BlockFormat for Q5_0Run {
    const NAME: &'static str = "Q5_0";
    const ID: u32 = 6;
    const BLOCK_VALUES: usize = BLOCK;
    const BLOCK_BYTES: usize = 2 + Self::PAYLOAD;

    fn dequantize_block(block: &[u8], out: &mut [f32]) {
        let (d, payload) = Self::split_block(block);
        for (i, out) in out.iter_mut().enumerate() {
            *out = (Self::code(payload, i) - Self::BIAS) as f32 * d;
        }
    }
}

impl RunFormat for Q5_0Run {
    const FORMAT: Format = Format::Q5_0;
    const PAYLOAD: usize = BLOCK / 2 + 4;
    const BIAS: i32 = 16;
    /// Padding rows have scale 0: any byte gives them 0.
    const ZERO_BYTE: u8 = 0;

    /// llama.cpp's `quantize_row_q5_0_ref`: the value of largest magnitude maps to -16, so
    /// `d = value / -16`, and each code is `x / d + 16.5` truncated, at most 31.
    fn quantize_block(values: &[f32], payload: &mut [u8]) -> f32 {
        let extreme = values
            .iter()
            .copied()
            .fold(0.0f32, |m, v| if v.abs() > m.abs() { v } else { m });
        let d = extreme / -16.0;
        let inv = if d != 0.0 { 1.0 / d } else { 0.0 };
        let codes = std::array::from_fn(|i| ((values[i] * inv + 16.5) as u8).min(31));
        payload.copy_from_slice(&run_payload(codes));
        d
    }

    #[inline(always)]
    fn code(payload: &[u8], i: usize) -> i32 {
        let byte = payload[i % (BLOCK / 2)];
        let low = if i < BLOCK / 2 {
            byte & 0x0f
        } else {
            byte >> 4
        };
        let (at, bit) = high_bit(i);
        (low | (((payload[BLOCK / 2 + at] >> bit) & 1) << 4)) as i32
    }

    fn dot_block(payload: &[u8], x: &[i8]) -> i32 {
        let codes: i32 = (0..BLOCK)
            .map(|i| Self::code(payload, i) * x[i] as i32)
            .sum();
        codes - Self::BIAS * x[..BLOCK].iter().map(|&v| v as i32).sum::<i32>()
    }
}
