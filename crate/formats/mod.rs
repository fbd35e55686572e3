//! GGUF's tensor types, one file each: how a block lies in a file, and a scalar reference that
//! widens it to f32. This is the bottom layer (docs/architecture.md): it knows nothing of models,
//! machines or kernels, and every kernel above is tested against it.
//!
//! Two traits, as llama.cpp's type-traits table and candle's `GgmlType` have it:
//! - [`BlockFormat`]: every GGUF type: its id, name, values and bytes per block, and the reference
//!   dequantization of one block. [`TYPES`] holds one row per type.
//! - [`RunFormat`]: the types the kernels multiply from as they are stored ([`Format`]): each
//!   block kept as its payload and an f32 scale (browsers without `shader-f16` cannot read f16),
//!   with a reference quantizer and a reference integer dot product against int8 activations.
//!
//! Adding a GGUF type is one new file implementing [`BlockFormat`] and one row in [`TYPES`];
//! a type the kernels run as stored also implements [`RunFormat`] and gets a [`Format`] variant
//! (and an arm in [`with_format!`]), and then kernels per instruction set beside the others in
//! `cpu/`.

mod bf16;
pub mod block;
mod blocks;
mod f16;
mod f32;
mod format;
mod q2_k;
mod q3_k;
pub mod q4_0;
mod q4_1;
mod q4_k;
pub mod q5_0;
mod q5_1;
mod q5_k;
pub mod q6_k;
pub mod q8_0;

pub use crate::with_format;
pub use bf16::Bf16;
pub use block::{BLOCK, BlockFormat, Format, RunFormat, RunsAs};
pub use blocks::{Activations, Blocks};
pub use f16::F16;
pub use f32::F32;
pub use q2_k::Q2K;
pub use q3_k::Q3K;
pub use q4_0::Q4_0;
pub use q4_1::Q4_1;
pub use q4_k::Q4K;
pub use q5_0::{Q5_0, Q5_0Run};
pub use q5_1::Q5_1;
pub use q5_k::Q5K;
pub use q6_k::{Q6K, Q6KRun};
pub use q8_0::Q8_0;

/// One row of the type table.
#[derive(Debug)]
pub struct TypeTraits {
    pub id: u32,
    pub name: &'static str,
    pub block_values: usize,
    pub block_bytes: usize,
    /// How the kernels run the type as stored ([`RunsAs`]); `None`: it is widened at load.
    pub runs: Option<Runs>,
    dequantize_block: fn(&[u8], &mut [f32]),
}

/// A row's [`RunsAs`]: the format whose kernels run the type, and its block splitter.
#[derive(Debug, Clone, Copy)]
pub struct Runs {
    pub format: Format,
    run_block: RunBlock,
}

/// [`RunsAs::run_block`]: one stored block as calls of `push(payload, scale, offset)`.
type RunBlock = fn(&[u8], &mut dyn FnMut(&[u8], f32, f32));

const fn row<T: BlockFormat>() -> TypeTraits {
    TypeTraits {
        id: T::ID,
        name: T::NAME,
        block_values: T::BLOCK_VALUES,
        block_bytes: T::BLOCK_BYTES,
        runs: None,
        dequantize_block: T::dequantize_block,
    }
}

const fn running<T: RunsAs>() -> TypeTraits {
    TypeTraits {
        runs: Some(Runs {
            format: T::AS,
            run_block: T::run_block,
        }),
        ..row::<T>()
    }
}

/// Every GGUF type this engine reads, one row each.
pub static TYPES: [TypeTraits; 13] = [
    row::<F32>(),
    row::<F16>(),
    row::<Bf16>(),
    running::<Q8_0>(),
    running::<Q4_0>(),
    running::<Q4_1>(),
    running::<Q5_0>(),
    running::<Q5_1>(),
    row::<Q2K>(),
    row::<Q3K>(),
    running::<Q4K>(),
    running::<Q5K>(),
    running::<Q6K>(),
];

/// GGUF types known by name but not read here, for the error that names them.
const NOT_READ: [(u32, &str); 2] = [(9, "Q8_1"), (15, "Q8_K")];

/// llama.cpp's IQ (codebook) and TQ (ternary) types, named in the error that refuses them.
const IQ: [(u32, &str); 11] = [
    (16, "IQ2_XXS"),
    (17, "IQ2_XS"),
    (18, "IQ3_XXS"),
    (19, "IQ1_S"),
    (20, "IQ4_NL"),
    (21, "IQ3_S"),
    (22, "IQ2_S"),
    (23, "IQ4_XS"),
    (29, "IQ1_M"),
    (34, "TQ1_0"),
    (35, "TQ2_0"),
];

/// A GGUF tensor type this engine reads: a handle on its row of [`TYPES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TensorType {
    id: u32,
}

impl TensorType {
    pub const F32: TensorType = TensorType::of::<F32>();
    pub const F16: TensorType = TensorType::of::<F16>();
    pub const BF16: TensorType = TensorType::of::<Bf16>();
    pub const Q8_0: TensorType = TensorType::of::<Q8_0>();
    pub const Q4_0: TensorType = TensorType::of::<Q4_0>();
    pub const Q4_1: TensorType = TensorType::of::<Q4_1>();
    pub const Q5_0: TensorType = TensorType::of::<Q5_0>();
    pub const Q5_1: TensorType = TensorType::of::<Q5_1>();
    pub const Q2K: TensorType = TensorType::of::<Q2K>();
    pub const Q3K: TensorType = TensorType::of::<Q3K>();
    pub const Q4K: TensorType = TensorType::of::<Q4K>();
    pub const Q5K: TensorType = TensorType::of::<Q5K>();
    pub const Q6K: TensorType = TensorType::of::<Q6K>();

    const fn of<T: BlockFormat>() -> TensorType {
        TensorType { id: T::ID }
    }

    /// The type with GGUF id `id`, or a sentence naming it and what is read instead.
    pub fn from_id(id: u32) -> Result<TensorType, String> {
        if TYPES.iter().any(|t| t.id == id) {
            return Ok(TensorType { id });
        }
        let name = match NOT_READ.iter().find(|(known, _)| *known == id) {
            Some((_, name)) => name,
            None => IQ
                .iter()
                .find(|(known, _)| *known == id)
                .map_or("an unknown type", |(_, name)| name),
        };
        let read: Vec<&str> = TYPES.iter().map(|t| t.name).collect();
        Err(format!(
            "GGUF tensor type {id} ({name}) is not supported: this engine loads {}; convert the \
             file (llama-quantize) to one of them",
            read.join(", ")
        ))
    }

    /// Its row of the table.
    pub fn traits(self) -> &'static TypeTraits {
        TYPES
            .iter()
            .find(|t| t.id == self.id)
            .expect("a TensorType is made from a row of TYPES")
    }

    pub fn name(self) -> &'static str {
        self.traits().name
    }

    /// Values per block and bytes per block.
    pub fn block(self) -> (u64, u64) {
        let t = self.traits();
        (t.block_values as u64, t.block_bytes as u64)
    }

    /// The [`Format`] the kernels run this type as, when they run it as it is stored.
    pub fn runs_as(self) -> Option<Format> {
        self.traits().runs.map(|r| r.format)
    }

    /// A tensor's bytes as the blocks of the format that runs them ([`RunsAs`]), or `None` for a
    /// type that is widened.
    pub fn run_blocks(self, raw: &[u8]) -> Option<Blocks> {
        self.traits().runs?;
        match self.made(raw) {
            Made::Blocks(blocks) => Some(blocks),
            Made::Values(_) => unreachable!("a type that runs as stored is made into blocks"),
        }
    }

    /// A tensor's bytes (whole blocks: checked when the file is parsed) as f32, block by block.
    pub fn dequantize(self, raw: &[u8]) -> Vec<f32> {
        let mut out = vec![0.0; raw.len() / self.traits().block_bytes * self.traits().block_values];
        self.dequantize_into(raw, &mut out);
        out
    }

    fn dequantize_into(self, raw: &[u8], out: &mut [f32]) {
        let t = self.traits();
        if self == TensorType::F32 {
            for (b, v) in raw.chunks_exact(4).zip(out) {
                *v = f32::from_le_bytes(b.try_into().unwrap());
            }
            return;
        }
        for (block, values) in raw
            .chunks_exact(t.block_bytes)
            .zip(out.chunks_exact_mut(t.block_values))
        {
            (t.dequantize_block)(block, values);
        }
    }

    /// A tensor's bytes (whole blocks; a tail is left out) as the engine holds it ([`Made`]).
    pub fn made(self, raw: &[u8]) -> Made {
        let whole = raw.len() / self.traits().block_bytes * self.traits().block_bytes;
        let mut builder = self.builder(whole);
        builder.push(&raw[..whole]);
        match builder.finish() {
            Ok(made) => made,
            Err(_) => unreachable!("whole blocks were pushed"),
        }
    }

    /// A [`TensorBuilder`] for a tensor of `len` bytes of this type.
    pub fn builder(self, len: usize) -> TensorBuilder {
        let t = self.traits();
        let blocks = len / t.block_bytes;
        let out = match t.runs {
            Some(runs) => {
                let mut out = Blocks::with_capacity(runs.format, blocks * t.block_values / BLOCK);
                // The K-quants (256-value super-blocks) multiply activations rounded as
                // llama.cpp's Q8_K.
                if t.block_values == Activations::Q8K.span() {
                    out.activations = Activations::Q8K;
                }
                Made::Blocks(out)
            }
            None => Made::Values(Vec::with_capacity(blocks * t.block_values)),
        };
        TensorBuilder {
            ty: self,
            partial: Vec::with_capacity(t.block_bytes),
            out,
        }
    }
}

/// A tensor as the engine holds it: the blocks of the format whose kernels run its type as
/// stored ([`TensorType::runs_as`]), or f32 values (F32, and the types widened at load).
pub enum Made {
    Values(Vec<f32>),
    Blocks(Blocks),
}

/// A tensor made from its bytes as they arrive, in pieces of any size: block by block, so that its
/// bytes are never held whole beside what is made of them (the page reads a GGUF as it downloads,
/// and the CLI's page-less loaders read a MiB at a time).
pub struct TensorBuilder {
    ty: TensorType,
    /// The start of a block whose end has not arrived yet.
    partial: Vec<u8>,
    out: Made,
}

impl TensorBuilder {
    /// The tensor's next bytes.
    pub fn push(&mut self, mut bytes: &[u8]) {
        let block_bytes = self.ty.traits().block_bytes;
        if !self.partial.is_empty() {
            let take = (block_bytes - self.partial.len()).min(bytes.len());
            self.partial.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if self.partial.len() < block_bytes {
                return;
            }
            let block = std::mem::take(&mut self.partial);
            self.blocks(&block);
            self.partial = block;
            self.partial.clear();
        }
        let whole = bytes.len() / block_bytes * block_bytes;
        self.blocks(&bytes[..whole]);
        self.partial.extend_from_slice(&bytes[whole..]);
    }

    /// Whole blocks.
    fn blocks(&mut self, raw: &[u8]) {
        let t = self.ty.traits();
        match &mut self.out {
            Made::Blocks(out) => {
                let run_block = t
                    .runs
                    .expect("blocks are made of a type that runs")
                    .run_block;
                for block in raw.chunks_exact(t.block_bytes) {
                    run_block(block, &mut |payload, scale, offset| {
                        out.push(payload, scale, offset)
                    });
                }
            }
            Made::Values(values) => {
                let at = values.len();
                values.resize(at + raw.len() / t.block_bytes * t.block_values, 0.0);
                self.ty.dequantize_into(raw, &mut values[at..]);
            }
        }
    }

    /// What the bytes pushed made, or a sentence when they end inside a block.
    pub fn finish(self) -> Result<Made, String> {
        if !self.partial.is_empty() {
            return Err(format!(
                "its bytes end {} bytes into a {}-byte {} block",
                self.partial.len(),
                self.ty.traits().block_bytes,
                self.ty.name()
            ));
        }
        Ok(match self.out {
            Made::Blocks(blocks) => Made::Blocks(blocks.finish()),
            values => values,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The K-quants' matrices multiply activations rounded as llama.cpp's Q8_K (its
    /// `vec_dot_type` for them), every other type's as Q8_0 (Q8_1 for those with minimums).
    #[test]
    fn k_quants_take_q8_k_activations() {
        for (ty, expected) in [
            (TensorType::Q4K, Activations::Q8K),
            (TensorType::Q5K, Activations::Q8K),
            (TensorType::Q6K, Activations::Q8K),
            (TensorType::Q4_1, Activations::Q8_0),
            (TensorType::Q5_0, Activations::Q8_0),
            (TensorType::Q8_0, Activations::Q8_0),
        ] {
            let (values, bytes) = ty.block();
            let raw = vec![0u8; 2 * bytes as usize];
            let blocks = ty.run_blocks(&raw).unwrap();
            assert_eq!(blocks.len(), 2 * values as usize / BLOCK);
            assert_eq!(blocks.activations, expected, "{}", ty.name());
        }
    }

    /// A seeded xorshift32 generator: the same values on every run and machine.
    fn xorshift(mut state: u32) -> impl FnMut() -> u32 {
        move || {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            state
        }
    }

    /// Every type's bytes pushed in pieces of any size (a byte at a time, across blocks' ends)
    /// make what the same bytes make whole, bit for bit; bytes that end inside a block are named.
    #[test]
    fn a_tensor_made_in_pieces_is_the_tensor_made_whole() {
        let mut next = xorshift(0x2545_f491u32);
        let bits = |made: Made| match made {
            Made::Values(v) => (v.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), vec![]),
            Made::Blocks(b) => {
                let mut words: Vec<u32> = b.scales.iter().map(|x| x.to_bits()).collect();
                words.extend(b.offsets.iter().map(|x| x.to_bits()));
                (words, b.quants)
            }
        };
        for row in TYPES.iter() {
            let ty = TensorType::from_id(row.id).unwrap();
            let raw: Vec<u8> = (0..5 * row.block_bytes).map(|_| next() as u8).collect();
            let whole = bits(ty.made(&raw));
            for piece in [1, 3, row.block_bytes + 1, 2 * row.block_bytes - 1] {
                let mut builder = ty.builder(raw.len());
                for bytes in raw.chunks(piece) {
                    builder.push(bytes);
                }
                let made = builder.finish().unwrap();
                assert!(bits(made) == whole, "{} in pieces of {piece}", row.name);
            }
            let mut builder = ty.builder(raw.len());
            builder.push(&raw[..raw.len() - 1]);
            let error = builder.finish().err().unwrap();
            assert!(error.starts_with("its bytes end "), "{error}");
        }
    }

    #[test]
    fn the_table_has_one_row_per_id_and_names_what_it_does_not_read() {
        for (i, a) in TYPES.iter().enumerate() {
            assert!(TYPES[i + 1..].iter().all(|b| b.id != a.id), "{}", a.name);
            assert_eq!(TensorType::from_id(a.id).unwrap().name(), a.name);
        }
        let e = TensorType::from_id(15).unwrap_err();
        assert!(
            e.starts_with("GGUF tensor type 15 (Q8_K) is not supported"),
            "{e}"
        );
        assert!(TensorType::from_id(20).unwrap_err().contains("(IQ4_NL)"));
        assert!(
            TensorType::from_id(999)
                .unwrap_err()
                .contains("an unknown type")
        );
    }

    /// The reference quantizer, dequantizer and dot product of each run format agree: a block
    /// quantized and widened again is within a step of the values (half a step, but for Q4_0's
    /// largest positive values, which clamp at +7 when the extreme is negative), and the integer dot
    /// product equals the widened values' products summed.
    fn reference_agrees<F: RunFormat>() {
        let mut next = xorshift(0x9e37_79b9u32);
        for _ in 0..200 {
            let values: Vec<f32> = (0..BLOCK)
                .map(|_| (next() % 2001) as f32 / 1000.0 - 1.0)
                .collect();
            let mut payload = vec![0u8; F::PAYLOAD];
            let scale = F::quantize_block(&values, &mut payload);
            let mut gguf = half::f16::from_f32(scale).to_le_bytes().to_vec();
            gguf.extend_from_slice(&payload);
            let (stored_scale, stored) = F::split_block(&gguf);
            assert_eq!(stored, &payload[..]);
            assert_eq!(stored_scale, half::f16::from_f32(scale).to_f32());
            let mut widened = vec![0.0; BLOCK];
            F::dequantize_block(&gguf, &mut widened);
            // A code's step: the scale, times the half's scale in Q6_K's blocks.
            let step = |i: usize| match F::FORMAT {
                Format::Q6K => stored_scale.abs() * (payload[BLOCK + i / 16] as i8) as f32,
                _ => stored_scale.abs(),
            };
            for (i, (v, w)) in values.iter().zip(&widened).enumerate() {
                assert!(
                    (v - w).abs() <= step(i) * 1.01 + 1e-3,
                    "{}: {v} vs {w}",
                    F::NAME
                );
            }
            let x: Vec<i8> = (0..BLOCK).map(|_| next() as i8).collect();
            let codes: Vec<f32> = widened.iter().map(|w| w / stored_scale).collect();
            let expected: f32 = codes.iter().zip(&x).map(|(c, &x)| c * x as f32).sum();
            let got = F::dot_block(&payload, &x);
            if stored_scale != 0.0 {
                assert!(
                    (got as f32 - expected).abs() < 0.5,
                    "{}: {got} vs {expected}",
                    F::NAME
                );
            }
        }
    }

    #[test]
    fn q8_0_reference_agrees() {
        reference_agrees::<Q8_0>();
    }

    #[test]
    fn q4_0_reference_agrees() {
        reference_agrees::<Q4_0>();
    }

    #[test]
    fn q5_0_reference_agrees() {
        reference_agrees::<Q5_0Run>();
    }

    /// Q5_0's blocks as they run hold GGUF's values: a stored block and its run form widen alike.
    #[test]
    fn q5_0_runs_as_stored() {
        let mut gguf = half::f16::from_f32(0.25).to_le_bytes().to_vec();
        gguf.extend((0..20).map(|i: u32| (i * 37 + 11) as u8));
        let mut stored = vec![0.0; BLOCK];
        Q5_0::dequantize_block(&gguf, &mut stored);
        let blocks = TensorType::Q5_0.run_blocks(&gguf).unwrap();
        assert_eq!(blocks.format, Format::Q5_0);
        assert_eq!(blocks.dequantize(), stored);
    }

    #[test]
    fn q6_k_reference_agrees() {
        reference_agrees::<Q6KRun>();
    }
}
