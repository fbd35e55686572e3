//! Will it fit, before the download: from a GGUF's header alone (the page reads its first bytes
//! with a range request), the memory a model would take as this engine holds it, at each
//! quantization, against the limits the page can know: wasm32's 4 GiB, and on a GPU the largest
//! buffer one binding takes. A model that cannot fit is refused before a byte of its tensors is
//! fetched, in one sentence that names what would fit.
//!
//! The weights are counted as loading holds them (`model::QuantPlan::apply`, `backend::Llama`):
//! a matrix kept in the blocks its kernels run (as stored, or re-encoded to q8 or q4 with an f32
//! scale a block), or widened to f32; norms in f32; the token embedding apart from a tied
//! classifier except where the CPU reads one copy. Keys and values are f32, every layer, at the
//! positions the run can reach (its prompt and its tokens). Scratch is what loading and a pass
//! hold beside them: one matrix's f32 copy while it is re-encoded, the prefill's largest chunk
//! (64 MiB at most) and the logits. The estimate is checked against what loading holds
//! (tests/fit.rs).

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::formats::{BLOCK, Made, TensorType};
use crate::loading::gguf::Gguf;
use crate::meter::human_bytes;
use crate::model::Quant;

/// wasm32's memory: 65,536 pages of 64 KiB.
pub const WASM_MEMORY_BYTES: u64 = 4 << 30;

/// The most a prefill chunk's intermediates take (`model::forward`'s `PREFILL_CHUNK_BYTES`).
const PREFILL_SCRATCH_BYTES: u64 = 64 << 20;

/// What the page knows of where the model would run.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Limits {
    /// The most memory the engine can hold (the page: wasm32's 4 GiB).
    pub memory_bytes: Option<u64>,
    /// On a GPU: the adapter's `maxStorageBufferBindingSize` and `maxBufferSize`.
    pub max_binding_bytes: Option<u64>,
    pub max_buffer_bytes: Option<u64>,
    /// `navigator.deviceMemory`, in GB (coarse, at most 8), where the browser gives it.
    pub device_memory_gb: Option<f64>,
}

/// The memory one quantization would take.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Need {
    pub quant: Quant,
    pub weight_bytes: u64,
    pub kv_bytes: u64,
    pub scratch_bytes: u64,
    pub total_bytes: u64,
    /// The largest layer as held: the GPU uploads a layer's matrices as one buffer, which one
    /// binding must take (its classifier it cuts in parts that do).
    pub largest_layer_bytes: u64,
    pub fits: bool,
}

/// The answer: the chosen quantization's need, every quantization's, and a sentence.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fit {
    pub fits: bool,
    pub chosen: Need,
    pub choices: Vec<Need>,
    /// The positions the run could reach (keys and values counted for these).
    pub positions: usize,
    /// The most positions that would fit at the chosen quantization, where fewer would.
    pub positions_that_fit: Option<usize>,
    pub sentence: String,
    /// A note that is not a refusal (the device's memory, as the browser reports it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// One block of `kind` as the engine makes it, from bytes that give it a scale and a minimum
/// (a block of zeros would hide its offsets: blocks whose offsets are all 0 drop them).
fn sample_block(kind: TensorType) -> Made {
    kind.made(&vec![0x3c; kind.block().1 as usize])
}

/// Bytes of `values` values of `kind` as the kernels hold it as stored: its blocks as made (a
/// type's blocks of 32 with their scales and offsets), or f32 where it is widened.
fn as_stored(kind: TensorType, values: u64) -> u64 {
    let (block_values, _) = kind.block();
    match sample_block(kind) {
        Made::Blocks(b) => values / block_values * b.bytes(),
        Made::Values(_) => 4 * values,
    }
}

/// Whether a matrix of `kind` keeps its values at `quant` (`QuantPlan::keeps_values`): as stored
/// or widened to f32, or in the blocks of the chosen format already (without offsets).
fn keeps_values(kind: TensorType, quant: Quant) -> bool {
    match quant.format() {
        None => true,
        Some(format) => {
            kind.runs_as() == Some(format)
                && matches!(sample_block(kind), Made::Blocks(b) if b.offsets.is_empty())
        }
    }
}

/// A matrix `[rows, cols]` of `kind` as held at `quant`.
fn held(kind: TensorType, rows: u64, cols: u64, quant: Quant) -> u64 {
    let values = rows * cols;
    match quant.format() {
        None if quant == Quant::Stored => as_stored(kind, values),
        None => 4 * values,
        Some(_) if keeps_values(kind, quant) => as_stored(kind, values),
        Some(_) if !cols.is_multiple_of(BLOCK as u64) => 4 * values,
        Some(format) => values / BLOCK as u64 * (format.payload() as u64 + 4),
    }
}

/// The memory `gguf` would take at `quant`, its keys and values at `positions`, on a GPU or not.
pub fn need(gguf: &Gguf, quant: Quant, positions: usize, gpu: bool) -> Result<Need> {
    let config = gguf.config()?;
    let (mut weights, mut transient) = (0u64, 0u64);
    let mut layers: std::collections::HashMap<&str, u64> = Default::default();
    let embedding = gguf.tensors.get("token_embd.weight");
    let tied = !gguf.tensors.contains_key("output.weight");
    for (name, t) in &gguf.tensors {
        let values: u64 = t.dims.iter().product();
        if t.dims.len() < 2 {
            weights += 4 * values;
            continue;
        }
        let (cols, rows) = (t.dims[0], values / t.dims[0].max(1));
        let matrix = held(t.kind, rows, cols, quant);
        // Re-encoding holds the matrix's f32 copy for a moment.
        if !keeps_values(t.kind, quant) {
            transient = transient.max(4 * values);
        }
        if name == "token_embd.weight" {
            // The table as the file holds it (on the host), and a tied classifier's own copy
            // unless the CPU reads the one table (it does where the classifier keeps its values).
            let table = as_stored(t.kind, values);
            weights += match (tied, gpu || !keeps_values(t.kind, quant)) {
                (true, false) => matrix,
                (true, true) => table + matrix,
                (false, _) => table,
            };
        } else {
            weights += matrix;
        }
        if let Some(layer) = name.strip_prefix("blk.").and_then(|n| n.split('.').next()) {
            *layers.entry(layer).or_default() += matrix;
        }
    }
    if embedding.is_none() {
        return Err(crate::error::Error::BadModel(
            "the GGUF has no token_embd.weight".into(),
        ));
    }
    let positions = positions.clamp(1, config.seq_len.max(1));
    let kv = (config.n_layers * 2 * config.n_kv_heads * config.head_size() * 4) as u64
        * positions as u64;
    let scratch = transient + PREFILL_SCRATCH_BYTES + 4 * config.vocab_size as u64;
    Ok(Need {
        quant,
        weight_bytes: weights,
        kv_bytes: kv,
        scratch_bytes: scratch,
        total_bytes: weights + kv + scratch,
        largest_layer_bytes: layers.values().copied().max().unwrap_or(0),
        fits: false,
    })
}

/// Whether `need` fits `limits`, and if not, why, in words after "it".
fn refusal(need: &Need, limits: &Limits, gpu: bool) -> Option<String> {
    let memory = limits.memory_bytes.unwrap_or(WASM_MEMORY_BYTES);
    if need.total_bytes > memory {
        return Some(format!(
            "the engine holds at most {} (wasm32's memory)",
            human_bytes(memory)
        ));
    }
    let binding = [limits.max_binding_bytes, limits.max_buffer_bytes]
        .into_iter()
        .flatten()
        .min();
    match binding {
        Some(most) if gpu && need.largest_layer_bytes > most => Some(format!(
            "a layer ({}) is more than this GPU binds at once ({})",
            human_bytes(need.largest_layer_bytes),
            human_bytes(most)
        )),
        _ => None,
    }
}

/// Will `gguf` fit at `quant` with `positions` on this device: every quantization's need, and a
/// sentence that refuses the chosen one where it cannot fit and says what would.
pub fn fit(gguf: &Gguf, quant: Quant, positions: usize, gpu: bool, limits: &Limits) -> Result<Fit> {
    // Keys and values grow no further than the model's context.
    let positions = positions.clamp(1, gguf.config()?.seq_len.max(1));
    let mut choices = Vec::new();
    for q in [Quant::Stored, Quant::F32, Quant::Q8, Quant::Q4] {
        let mut n = need(gguf, q, positions, gpu)?;
        n.fits = refusal(&n, limits, gpu).is_none();
        choices.push(n);
    }
    let chosen = choices
        .iter()
        .find(|n| n.quant == quant)
        .cloned()
        .expect("every quant");
    let why = refusal(&chosen, limits, gpu);
    let parts = format!(
        "weights {}, keys and values {} at {positions} positions, scratch {}",
        human_bytes(chosen.weight_bytes),
        human_bytes(chosen.kv_bytes),
        human_bytes(chosen.scratch_bytes)
    );
    // Fewer positions, where the weights fit and the keys and values are what does not.
    let positions_that_fit = why.as_ref().and_then(|_| {
        let memory = limits.memory_bytes.unwrap_or(WASM_MEMORY_BYTES);
        let fixed = chosen.weight_bytes + chosen.scratch_bytes;
        let per_position = chosen.kv_bytes / positions as u64;
        (fixed < memory && per_position > 0)
            .then(|| ((memory - fixed) / per_position) as usize)
            .filter(|&p| p >= 64 && p < positions)
    });
    let at = |q: Quant| match q {
        Quant::Stored => "as stored".to_string(),
        q => format!("at {q}"),
    };
    let sentence = match &why {
        None => format!(
            "{} it takes about {} ({parts}), within {}",
            at(quant),
            human_bytes(chosen.total_bytes),
            human_bytes(limits.memory_bytes.unwrap_or(WASM_MEMORY_BYTES))
        ),
        Some(why) => {
            let fitting: Vec<String> = choices
                .iter()
                .filter(|n| n.fits)
                .map(|n| format!("{} ({})", n.quant, human_bytes(n.total_bytes)))
                .collect();
            let instead = match (fitting.is_empty(), positions_that_fit) {
                (false, _) => format!("choose {}", fitting.join(" or ")),
                (true, Some(p)) => format!("ask for fewer tokens (at most {p} positions fit)"),
                (true, None) => "no quantization fits: choose a smaller model".to_string(),
            };
            format!(
                "{} it would take {} ({parts}), but {why}: {instead}; only its header was downloaded",
                at(quant),
                human_bytes(chosen.total_bytes)
            )
        }
    };
    let note = limits.device_memory_gb.and_then(|gb| {
        let device = (gb * 1e9) as u64;
        (why.is_none() && chosen.total_bytes > device / 2).then(|| {
            format!(
                "this device reports about {gb} GB of memory, and the model would take {} of it",
                human_bytes(chosen.total_bytes)
            )
        })
    });
    Ok(Fit {
        fits: why.is_none(),
        chosen,
        choices,
        positions,
        positions_that_fit,
        sentence,
        note,
    })
}
