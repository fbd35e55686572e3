//! GGUF (v2 and v3), llama.cpp's file format: a header of typed key/value metadata and tensor
//! descriptions, then the tensors' data, aligned.
//!
//! We read the architectures of `loading/arch/` (`llama`, `gemma3`, `qwen2`, `qwen3`): the shape
//! from the metadata (`llama.embedding_length`, ...; what an architecture adds, such as
//! `gemma3.attention.sliding_window`, its own file reads), tensors of every non-IQ type
//! (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K), and the tokenizer inside
//! (`tokenizer.ggml.*`). llama.cpp's `llama` architecture rotates adjacent pairs, as llama2.c does,
//! so its q/k rows are used as stored; the others rotate halves (NEOX), so their q/k rows, biases
//! and norms are put in pairs at load. Every count, length and offset is checked against the file's length
//! before anything is allocated: a header can claim anything.
//!
//! Tensors of the types the kernels run (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) are kept in
//! blocks of 32 as those kernels read them (`formats::RunsAs`: scales widened to f32, an offset a
//! block for the types with minimums), exactly; the precision `stored` runs them so, and the
//! others re-encode them (a Q8_0 or Q4_0 tensor re-encoded to its own type would give back its
//! very blocks, so it is used as it is). F32 tensors are used where they lie in the file; F16,
//! BF16, Q2_K and Q3_K are widened to f32 at load.

use std::cell::RefCell;
use std::collections::HashMap;

use crate::error::{Error, Result, clip};
use crate::formats::Made;

pub use crate::formats::TensorType;
use crate::model::config::FieldNames;
use crate::model::{Extras, FileSource, HostWeights, LayerWeights, LlamaConfig, Matrix};

const MAGIC: &[u8; 4] = b"GGUF";
/// Limits no real file comes near; past them a header is corrupt.
const MAX_TENSORS: u64 = 1 << 16;
const MAX_METADATA: u64 = 1 << 16;
const MAX_DEPTH: usize = 4;

/// GGUF's names for the config fields (after `{arch}.`), for errors in the file's own words.
const GGUF_FIELDS: [&str; 8] = [
    "embedding_length",
    "feed_forward_length",
    "block_count",
    "attention.head_count",
    "attention.head_count_kv",
    "vocabulary size (token_embd rows)",
    "context_length",
    "attention.key_length",
];

/// A metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Uint(u64),
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
    Array(Vec<Value>),
}

impl Value {
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::Uint(v) => Some(v),
            Value::Int(v) if v >= 0 => Some(v as u64),
            _ => None,
        }
    }
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::Int(v) => Some(v),
            Value::Uint(v) => i64::try_from(v).ok(),
            _ => None,
        }
    }
    fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::Float(v) => Some(v),
            Value::Uint(v) => Some(v as f64),
            Value::Int(v) => Some(v as f64),
            _ => None,
        }
    }
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// One tensor's description.
#[derive(Debug, Clone)]
pub struct TensorInfo {
    /// GGUF order: `dims[0]` varies fastest (a matrix's columns).
    pub dims: Vec<u64>,
    pub kind: TensorType,
    /// Byte range within the file.
    pub start: usize,
    pub end: usize,
}

/// A parsed GGUF header; tensor data stays in the file's bytes.
#[derive(Debug)]
pub struct Gguf {
    pub version: u32,
    pub metadata: HashMap<String, Value>,
    pub tensors: HashMap<String, TensorInfo>,
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    /// The file's length, of which `bytes` may be the start.
    file_len: u64,
    /// Whether reading stopped for want of bytes that the file holds past `bytes`.
    short: bool,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8], file_len: usize) -> Reader<'a> {
        Reader {
            bytes,
            at: 0,
            file_len: file_len as u64,
            short: false,
        }
    }

    fn take(&mut self, n: u64, what: &str) -> Result<&'a [u8]> {
        let left = (self.bytes.len() - self.at) as u64;
        if n > left {
            self.short = (self.at as u64).saturating_add(n) <= self.file_len;
            return Err(Error::BadModel(format!(
                "GGUF {what} at byte {} needs {n} bytes but the file has {} left: truncated \
                 or not a GGUF file",
                self.at,
                self.file_len - self.at as u64
            )));
        }
        let s = &self.bytes[self.at..self.at + n as usize];
        self.at += n as usize;
        Ok(s)
    }
    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4, what)?.try_into().unwrap()))
    }
    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8, what)?.try_into().unwrap()))
    }
    fn string(&mut self, what: &str) -> Result<String> {
        let n = self.u64(what)?;
        Ok(String::from_utf8_lossy(self.take(n, what)?).into_owned())
    }

    fn value(&mut self, kind: u32, key: &str, depth: usize) -> Result<Value> {
        let mut fixed = |n: u64| self.take(n, key).map(|b| b.to_vec());
        Ok(match kind {
            0 => Value::Uint(fixed(1)?[0] as u64),
            1 => Value::Int(fixed(1)?[0] as i8 as i64),
            2 => Value::Uint(u16::from_le_bytes(fixed(2)?.try_into().unwrap()) as u64),
            3 => Value::Int(i16::from_le_bytes(fixed(2)?.try_into().unwrap()) as i64),
            4 => Value::Uint(u32::from_le_bytes(fixed(4)?.try_into().unwrap()) as u64),
            5 => Value::Int(i32::from_le_bytes(fixed(4)?.try_into().unwrap()) as i64),
            6 => Value::Float(f32::from_le_bytes(fixed(4)?.try_into().unwrap()) as f64),
            7 => Value::Bool(fixed(1)?[0] != 0),
            8 => Value::Str(self.string(key)?),
            9 => {
                if depth >= MAX_DEPTH {
                    return Err(Error::BadModel(format!(
                        "GGUF metadata {key} nests arrays more than {MAX_DEPTH} deep"
                    )));
                }
                let inner = self.u32(key)?;
                let count = self.u64(key)?;
                // Every element takes at least one byte: a count past the bytes left is a lie,
                // caught before anything is allocated.
                let left = (self.bytes.len() - self.at) as u64;
                if count > left {
                    self.short = (self.at as u64).saturating_add(count) <= self.file_len;
                    return Err(Error::BadModel(format!(
                        "GGUF metadata {key} claims {count} elements but the file has {} bytes left",
                        self.file_len - self.at as u64
                    )));
                }
                let mut items = Vec::with_capacity(count as usize);
                for _ in 0..count {
                    items.push(self.value(inner, key, depth + 1)?);
                }
                Value::Array(items)
            }
            10 => Value::Uint(u64::from_le_bytes(fixed(8)?.try_into().unwrap())),
            11 => Value::Int(i64::from_le_bytes(fixed(8)?.try_into().unwrap())),
            12 => Value::Float(f64::from_le_bytes(fixed(8)?.try_into().unwrap())),
            other => {
                return Err(Error::BadModel(format!(
                    "GGUF metadata {key} has value type {other}, which GGUF does not define"
                )));
            }
        })
    }
}

/// Whether `bytes` start like a GGUF file.
pub fn is_gguf(bytes: &[u8]) -> bool {
    bytes.starts_with(MAGIC)
}

impl Gguf {
    /// Parse the header and check every tensor's place against the file.
    pub fn parse(bytes: &[u8]) -> Result<Gguf> {
        Gguf::parse_prefix(bytes, bytes.len())
    }

    /// Parse the header of a file of `file_len` bytes from its first bytes, `bytes` (which need
    /// only hold the header), and check every tensor's place against the file.
    pub fn parse_prefix(bytes: &[u8], file_len: usize) -> Result<Gguf> {
        Gguf::parse_reader(&mut Reader::new(bytes, file_len))
    }

    /// [`parse_prefix`](Self::parse_prefix), or `None` where `bytes` end before the header does:
    /// the start of a file arriving, `file_len` bytes long (`usize::MAX` where that is not known).
    pub fn parse_start(bytes: &[u8], file_len: usize) -> Result<Option<Gguf>> {
        let mut r = Reader::new(bytes, file_len);
        match Gguf::parse_reader(&mut r) {
            Err(_) if r.short => Ok(None),
            parsed => parsed.map(Some),
        }
    }

    fn parse_reader(r: &mut Reader) -> Result<Gguf> {
        if !is_gguf(r.bytes) {
            r.short = r.bytes.len() < MAGIC.len() && MAGIC.starts_with(r.bytes);
            return Err(Error::BadModel(
                "not a GGUF file (it does not start with \"GGUF\")".into(),
            ));
        }
        r.at = 4;
        let version = r.u32("version")?;
        let swapped = version.swap_bytes();
        if !(2..=3).contains(&version) && (2..=3).contains(&swapped) {
            return Err(Error::BadModel(format!(
                "this GGUF (version {swapped}) is big-endian, written for big-endian machines; \
                 this engine reads little-endian GGUF, as llama.cpp does here: convert the model \
                 again on a little-endian machine"
            )));
        }
        if !(2..=3).contains(&version) {
            return Err(Error::BadModel(format!(
                "GGUF version {version} is not supported (versions 2 and 3 are)"
            )));
        }
        let n_tensors = r.u64("tensor count")?;
        let n_metadata = r.u64("metadata count")?;
        if n_tensors > MAX_TENSORS || n_metadata > MAX_METADATA {
            return Err(Error::BadModel(format!(
                "GGUF header claims {n_tensors} tensors and {n_metadata} metadata entries: corrupt"
            )));
        }
        let mut metadata = HashMap::new();
        for _ in 0..n_metadata {
            let key = r.string("metadata key")?;
            let kind = r.u32(&key)?;
            let value = r.value(kind, &key, 0)?;
            // Which of two values would count is anyone's guess; llama.cpp refuses such a file too.
            if metadata.contains_key(&key) {
                return Err(Error::BadModel(format!(
                    "GGUF metadata holds {key} twice; the file is corrupt"
                )));
            }
            metadata.insert(key, value);
        }
        let mut infos = Vec::with_capacity(n_tensors as usize);
        for _ in 0..n_tensors {
            let name = r.string("tensor name")?;
            let n_dims = r.u32(&name)?;
            if !(1..=4).contains(&n_dims) {
                return Err(Error::BadModel(format!(
                    "GGUF tensor {name} has {n_dims} dimensions (1 to 4 are possible)"
                )));
            }
            let dims = (0..n_dims)
                .map(|_| r.u64(&name))
                .collect::<Result<Vec<u64>>>()?;
            let kind = r.u32(&name)?;
            let offset = r.u64(&name)?;
            infos.push((name, dims, kind, offset));
        }
        let alignment = match metadata.get("general.alignment") {
            None => 32,
            Some(v) => match v.as_u64() {
                Some(a) if a.is_power_of_two() && a <= 1 << 16 => a,
                _ => {
                    return Err(Error::BadModel(format!(
                        "GGUF general.alignment {v:?} is not a power of two"
                    )));
                }
            },
        };
        let data_start = (r.at as u64).div_ceil(alignment) * alignment;
        let file = r.file_len;
        let mut tensors = HashMap::new();
        for (name, dims, kind, offset) in infos {
            let kind =
                TensorType::from_id(kind).map_err(|e| Error::BadModel(format!("{name}: {e}")))?;
            let count = dims
                .iter()
                .try_fold(1u64, |a, &d| a.checked_mul(d))
                .filter(|&c| c > 0 && c <= 1 << 40)
                .ok_or_else(|| {
                    Error::BadModel(format!(
                        "GGUF tensor {name} has dimensions {dims:?}: corrupt"
                    ))
                })?;
            let (per_block, block_bytes) = kind.block();
            if !dims[0].is_multiple_of(per_block) {
                return Err(Error::BadModel(format!(
                    "GGUF tensor {name} is {} with rows of {}, not a multiple of its block of {per_block}",
                    kind.name(),
                    dims[0]
                )));
            }
            let size = count / per_block * block_bytes;
            // Which of two would be read is anyone's guess, as with metadata.
            if tensors.contains_key(&name) {
                return Err(Error::BadModel(format!(
                    "GGUF holds tensor {} twice; the file is corrupt",
                    clip(&name)
                )));
            }
            let start = data_start.checked_add(offset);
            match start.and_then(|s| s.checked_add(size)) {
                Some(end) if end <= file && offset.is_multiple_of(alignment) => {
                    tensors.insert(
                        name,
                        TensorInfo {
                            dims,
                            kind,
                            start: start.unwrap() as usize,
                            end: end as usize,
                        },
                    );
                }
                _ => {
                    return Err(Error::BadModel(format!(
                        "GGUF tensor {name} ({} x {dims:?}) at offset {offset} runs past the \
                         file's {file} bytes (or is misaligned): truncated or corrupt",
                        kind.name()
                    )));
                }
            }
        }
        // Each tensor's bytes are its own: one that reads another's would run on the wrong values.
        let mut places: Vec<(&String, &TensorInfo)> = tensors.iter().collect();
        places.sort_by_key(|(_, t)| (t.start, t.end));
        if let Some(pair) = places.windows(2).find(|w| w[1].1.start < w[0].1.end) {
            return Err(Error::BadModel(format!(
                "GGUF tensors {} and {} overlap in the file (one would read the other's bytes); \
                 the file is corrupt",
                clip(pair[0].0),
                clip(pair[1].0)
            )));
        }
        Ok(Gguf {
            version,
            metadata,
            tensors,
        })
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.get(key)
    }

    /// The tokenizer's metadata (every `tokenizer.*` key), sorted by key: what another GGUF needs
    /// to carry the same tokenizer (`tokenometer synth --vocab`).
    pub fn into_tokenizer_metadata(self) -> Vec<(String, Value)> {
        let mut keys: Vec<(String, Value)> = self
            .metadata
            .into_iter()
            .filter(|(k, _)| k.starts_with("tokenizer."))
            .collect();
        keys.sort_by(|a, b| a.0.cmp(&b.0));
        keys
    }

    fn count(&self, key: &str) -> Result<Option<usize>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .filter(|&v| v <= u32::MAX as u64)
                .map(|v| Some(v as usize))
                .ok_or_else(|| Error::BadModel(format!("GGUF {key} is {v:?}, not a count"))),
        }
    }

    fn required(&self, key: &str) -> Result<usize> {
        self.count(key)?.ok_or_else(|| {
            Error::BadModel(format!(
                "GGUF metadata has no {key}: incomplete, or not a model file of this kind"
            ))
        })
    }

    /// The model's shape from its metadata: its architecture's keys (`loading/arch/`).
    pub fn config(&self) -> Result<LlamaConfig> {
        let name = self
            .get("general.architecture")
            .and_then(Value::as_str)
            .unwrap_or("(none)");
        let arch = crate::loading::arch::find(name)?;
        let arch_name = arch.name;
        let key = |name: &str| format!("{arch_name}.{name}");
        let embedding = self.tensor("token_embd.weight")?;
        let heads = self.required(&key("attention.head_count"))?;
        let mut recipe = (arch.recipe)(self)?;
        // A head size of its own where the file gives one (Gemma 3, Qwen3); the values' the same.
        let key_length = self.count(&key("attention.key_length"))?;
        if let (Some(k), Some(v)) = (key_length, self.count(&key("attention.value_length"))?)
            && k != v
        {
            return Err(Error::BadModel(format!(
                "GGUF {arch_name}.attention.value_length {v} differs from key_length {k}; this \
                 engine needs them equal"
            )));
        }
        recipe.head_size = key_length;
        if let Some(factor) = self.get(&key("rope.scaling.factor"))
            && factor.as_f64() != Some(1.0)
        {
            return Err(Error::BadModel(format!(
                "GGUF {arch_name}.rope.scaling.factor is {factor:?}; scaled RoPE is not supported"
            )));
        }
        let config = LlamaConfig {
            dim: self.required(&key("embedding_length"))?,
            hidden_dim: self.required(&key("feed_forward_length"))?,
            n_layers: self.required(&key("block_count"))?,
            n_heads: heads,
            n_kv_heads: self
                .count(&key("attention.head_count_kv"))?
                .unwrap_or(heads),
            vocab_size: embedding
                .dims
                .get(1)
                .copied()
                .unwrap_or(0)
                .min(u32::MAX as u64) as usize,
            seq_len: self.required(&key("context_length"))?,
            shared_classifier: !self.tensors.contains_key("output.weight"),
            rope_theta: self.float(&key("rope.freq_base"), 10000.0)?,
            rope_factors: None,
            norm_eps: self.float(&key("attention.layer_norm_rms_epsilon"), arch.default_eps)?,
            recipe,
        };
        config.validate(&FieldNames {
            prefix: "GGUF",
            names: GGUF_FIELDS,
            key_prefix: Some(arch_name),
        })?;
        if let Some(rope) = self.count(&key("rope.dimension_count"))?
            && rope != config.head_size()
        {
            return Err(Error::BadModel(format!(
                "GGUF {arch_name}.rope.dimension_count {rope} differs from the head size {}: partial \
                 rotary embeddings are not supported",
                config.head_size()
            )));
        }
        Ok(config)
    }

    fn float(&self, key: &str, default: f32) -> Result<f32> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v
                .as_f64()
                .map(|f| f as f32)
                .ok_or_else(|| Error::BadModel(format!("GGUF {key} is {v:?}, not a number"))),
        }
    }

    fn tensor(&self, name: &str) -> Result<&TensorInfo> {
        self.tensors
            .get(name)
            .ok_or_else(|| Error::BadModel(format!("GGUF file has no tensor {name}")))
    }

    /// Tensor `name` as f32, checked to be `[rows, cols]` (`[cols]` for a vector, rows 1): an F32
    /// tensor where it lies in `file`, any other type widened.
    fn matrix(&self, tensors: &Tensors, name: &str, rows: usize, cols: usize) -> Result<Matrix> {
        let info = self.tensor(name)?;
        let expected: Vec<u64> = if rows == 1 {
            vec![cols as u64]
        } else {
            vec![cols as u64, rows as u64]
        };
        if info.dims != expected {
            return Err(Error::BadModel(format!(
                "GGUF tensor {name} has dimensions {:?}, expected {expected:?}",
                info.dims
            )));
        }
        // F32 is used where it lies; a format the kernels run as stored keeps its blocks (scales
        // widened); anything else is widened by its format's reference.
        // A NaN or an infinity in a weight (or a block's scale or offset) would run and print
        // garbage: the file is refused where it says so.
        let finite = |values: &[f32], what: &str| match values.iter().position(|v| !v.is_finite()) {
            None => Ok(()),
            Some(at) => Err(Error::BadModel(format!(
                "GGUF tensor {name} holds {} at its {what} {at}; the file is damaged (download or convert it again)",
                if values[at].is_nan() {
                    "NaN"
                } else {
                    "an infinity"
                }
            ))),
        };
        let made = match tensors {
            Tensors::File(file) if info.kind == TensorType::F32 => {
                let values = file.values(info.start, rows * cols);
                finite(&values, "value")?;
                return Ok(Matrix::new(rows, cols, values));
            }
            Tensors::File(file) => {
                // A MiB at a time: a tensor read from outside memory is never held whole beside
                // what is made of it.
                let mut builder = info.kind.builder(info.end - info.start);
                let mut piece = vec![0; (1 << 20).min(info.end - info.start)];
                let mut at = info.start;
                while at < info.end {
                    let piece = &mut piece[..(info.end - at).min(1 << 20)];
                    file.read_into(at, piece);
                    builder.push(piece);
                    at += piece.len();
                }
                builder
                    .finish()
                    .map_err(|e| Error::BadModel(format!("GGUF tensor {name}: {e}")))?
            }
            Tensors::Made(made) => made
                .borrow_mut()
                .remove(name)
                .ok_or_else(|| Error::BadModel(format!("GGUF tensor {name} is read twice")))?,
        };
        Ok(match made {
            Made::Blocks(blocks) => {
                finite(&blocks.scales, "block scale")?;
                finite(&blocks.offsets, "block offset")?;
                Matrix::quantized(rows, cols, blocks)
            }
            Made::Values(values) => {
                finite(&values, "value")?;
                Matrix::new(rows, cols, values)
            }
        })
    }

    /// Every tensor type in the file, for the conditions ("Q8_0 x 43, F32 x 13").
    pub fn types(&self) -> Vec<(TensorType, usize)> {
        let mut counts: Vec<(TensorType, usize)> = Vec::new();
        for info in self.tensors.values() {
            match counts.iter_mut().find(|(k, _)| *k == info.kind) {
                Some((_, n)) => *n += 1,
                None => counts.push((info.kind, 1)),
            }
        }
        counts
    }
}

/// Where a GGUF's tensors are read from: the file, or tensors made as the file streamed in
/// ([`super::gguf_stream::GgufStream`]), each taken once.
pub enum Tensors<'a> {
    File(&'a FileSource),
    Made(&'a RefCell<HashMap<String, Made>>),
}

/// Load a GGUF's weights from `tensors`, whose header `gguf` is: F32 tensors used where they lie, the
/// types the kernels run kept in their blocks ([`TensorType::run_blocks`]), the others widened to
/// f32; the norms and biases its recipe adds under llama.cpp's names.
pub fn load(tensors: &Tensors, gguf: &Gguf) -> Result<HostWeights> {
    let mut config = gguf.config()?;
    // Llama 3's RoPE scaling, as llama.cpp's converter fixes it: a factor a pair of a head
    // (finite: `matrix` checks; above 0, as the pass divides by it).
    if gguf.tensors.contains_key("rope_freqs.weight") {
        let half = config.head_size() / 2;
        let factors = gguf.matrix(tensors, "rope_freqs.weight", 1, half)?;
        let factors = factors.into_values().into_vec();
        if factors.iter().any(|f| *f <= 0.0) {
            return Err(Error::BadModel(
                "GGUF tensor rope_freqs.weight holds a factor of 0 or less; RoPE divides by it"
                    .into(),
            ));
        }
        config.rope_factors = Some(factors);
    }
    let (d, h, v, kv, q, hs) = (
        config.dim,
        config.hidden_dim,
        config.vocab_size,
        config.kv_dim(),
        config.q_dim(),
        config.head_size(),
    );
    let recipe = &config.recipe;
    let vector = |name: &str, len: usize| -> Result<Vec<f32>> {
        Ok(gguf.matrix(tensors, name, 1, len)?.into_values().into_vec())
    };
    // NEOX files' q and k rotate halves of each head: put their rows (biases, norms) in pairs.
    let pairs = |m: Matrix, heads: usize| {
        if recipe.rope_halves {
            m.halves_to_pairs(heads)
        } else {
            m
        }
    };
    // The largest tensor first: read in from outside memory, its bytes are let go before the
    // layers' are (the page's memory never shrinks, so a tensor read last would raise its peak).
    let token_embedding = gguf.matrix(tensors, "token_embd.weight", v, d)?;
    let mut layers = Vec::with_capacity(config.n_layers);
    for i in 0..config.n_layers {
        let m =
            |w: &str, rows, cols| gguf.matrix(tensors, &format!("blk.{i}.{w}.weight"), rows, cols);
        let norm = |w: &str, len| vector(&format!("blk.{i}.{w}.weight"), len);
        // A vector of `heads` heads, as q's and k's rows are.
        let per_head = |name: String, heads: usize| -> Result<Vec<f32>> {
            let values = vector(&name, heads * hs)?;
            Ok(pairs(Matrix::new(heads * hs, 1, values), heads)
                .into_values()
                .into_vec())
        };
        let bias = |w: &str, heads| per_head(format!("blk.{i}.{w}.bias"), heads);
        let head_norm = |w: &str| per_head(format!("blk.{i}.{w}.weight"), 1);
        let mut layer = LayerWeights {
            rms_att: norm("attn_norm", d)?,
            wq: pairs(m("attn_q", q, d)?, config.n_heads),
            wk: pairs(m("attn_k", kv, d)?, config.n_kv_heads),
            wv: m("attn_v", kv, d)?,
            wo: m("attn_output", d, q)?,
            rms_ffn: norm("ffn_norm", d)?,
            w1: m("ffn_gate", h, d)?,
            w2: m("ffn_down", d, h)?,
            w3: m("ffn_up", h, d)?,
            extras: Extras::NONE,
        };
        layer.extras = Extras {
            qkv_bias: match recipe.qkv_bias {
                true => Some([
                    bias("attn_q", config.n_heads)?,
                    bias("attn_k", config.n_kv_heads)?,
                    vector(&format!("blk.{i}.attn_v.bias"), kv)?,
                ]),
                false => None,
            },
            qk_norm: match recipe.qk_norm {
                true => Some([head_norm("attn_q_norm")?, head_norm("attn_k_norm")?]),
                false => None,
            },
            post_norms: match recipe.post_norms {
                true => Some([norm("post_attention_norm", d)?, norm("post_ffw_norm", d)?]),
                false => None,
            },
        };
        layers.push(layer);
    }
    Ok(HostWeights {
        token_embedding,
        layers,
        rms_final: vector("output_norm.weight", d)?,
        classifier: if config.shared_classifier {
            None
        } else {
            Some(gguf.matrix(tensors, "output.weight", v, d)?)
        },
        tensor_types: gguf.types(),
        config,
    })
}

impl crate::loading::arch::Metadata for Gguf {
    fn has(&self, key: &str) -> bool {
        self.get(key).is_some()
    }
    fn count(&self, key: &str) -> Result<Option<usize>> {
        Gguf::count(self, key)
    }
    fn required(&self, key: &str) -> Result<usize> {
        Gguf::required(self, key)
    }
    fn float(&self, key: &str, default: f32) -> Result<f32> {
        Gguf::float(self, key, default)
    }
}
