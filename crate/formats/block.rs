//! The two traits every GGUF type implements ([`BlockFormat`], and [`RunFormat`] for the types the
//! kernels run as stored) and the names of the runnable formats ([`Format`]). `format.rs`, above
//! the types' files, ties each name to its type.

/// Values in one block of the formats the kernels run ([`RunFormat`]s).
pub const BLOCK: usize = 32;

/// One GGUF tensor type: its place in the file and its reference dequantization.
pub trait BlockFormat {
    /// GGUF's name for the type ("Q8_0").
    const NAME: &'static str;
    /// GGUF's type id (`ggml_type`).
    const ID: u32;
    /// Values in one block.
    const BLOCK_VALUES: usize;
    /// Bytes one block takes in a GGUF file.
    const BLOCK_BYTES: usize;

    /// The reference: one stored block (`BLOCK_BYTES`) as its `BLOCK_VALUES` values.
    fn dequantize_block(block: &[u8], out: &mut [f32]);
}

/// A type the kernels run as stored, exactly, in the blocks of a [`RunFormat`] (`AS`): each stored
/// block as blocks of 32 values, each a payload of `AS`, an f32 scale and an f32 offset, so that
/// value `i` is `(code_i - AS::BIAS) * scale + offset`. Q8_0 and Q4_0 are their own (offset 0);
/// Q4_1 and Q4_K run as Q4_0 with offsets, Q5_1 and Q5_K as Q5_0 with offsets. The
/// kernels multiply the codes as they do `AS`'s, and add `offset * sum(x)` once a block.
pub trait RunsAs: BlockFormat {
    /// The format whose kernels run this type.
    const AS: Format;

    /// One stored block as `BLOCK_VALUES / 32` calls of `push(payload, scale, offset)`.
    fn run_block(block: &[u8], push: &mut dyn FnMut(&[u8], f32, f32));
}

/// A GGUF block's f16 at byte `at`, widened.
pub fn f16_at(block: &[u8], at: usize) -> f32 {
    half::f16::from_le_bytes([block[at], block[at + 1]]).to_f32()
}

/// A type the kernels multiply from as stored: blocks of [`BLOCK`] values, each kept as its
/// payload (`PAYLOAD` bytes) and its scale widened to f32. A stored code is the value plus
/// `BIAS`, so the kernels multiply codes and take `BIAS * sum(x)` back once a block.
pub trait RunFormat: BlockFormat + 'static {
    /// Which one, for the matrices that hold blocks of several formats.
    const FORMAT: Format;
    /// Bytes of one block's values.
    const PAYLOAD: usize;
    /// What each stored code exceeds its value by.
    const BIAS: i32;
    /// The payload byte of a block of zeros (a group's padding rows).
    const ZERO_BYTE: u8;

    /// The reference quantizer: `values` (one block) as payload bytes; returns the scale.
    fn quantize_block(values: &[f32], payload: &mut [u8]) -> f32;

    /// The stored code of value `i` (0..32) of a block's payload: the value plus `BIAS`.
    fn code(payload: &[u8], i: usize) -> i32;

    /// The reference dot product of one block's payload with 32 int8 activations, in exact
    /// integers (scaled by the caller): the values' codes (before the bias) times the
    /// activations, summed, less `BIAS * sum(x)`.
    fn dot_block(payload: &[u8], x: &[i8]) -> i32;

    /// A GGUF block (an f16 scale, then the payload) as its scale and payload.
    fn split_block(block: &[u8]) -> (f32, &[u8]) {
        let scale = half::f16::from_le_bytes([block[0], block[1]]).to_f32();
        (scale, &block[2..2 + Self::PAYLOAD])
    }
}

/// The block formats the kernels run as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    Q8_0,
    Q4_0,
    /// Q5_0's nibbles and fifth bits (`formats/q5_0.rs`).
    Q5_0,
    /// Q6_K's blocks of 32 with their two 16-value scales (`formats/q6_k.rs`).
    Q6K,
}
