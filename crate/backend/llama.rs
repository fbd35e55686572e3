//! A model on the backend it was loaded on: the one forward pass (`model/forward.rs`) over the
//! CPU's operations (`cpu/`) or the GPU's (`gpu/`), and the KV caches that belong to it.

use crate::cpu::{HostLinear, HostOps, Isa, Rows, Threads};
#[cfg(feature = "gpu")]
use crate::gpu::DeviceOps;
use crate::model::forward::{Positions, Transformer, Weights};
use crate::model::ops::{Heads, Kernels, Ops};
use crate::model::phases::PhaseClock;
use crate::model::quant::pad_hidden_to_blocks;
use crate::model::{HostWeights, LlamaConfig, Logits, Quant, QuantPlan};

/// The GPU device (one a process, never given back).
#[cfg(feature = "gpu")]
pub type Device = &'static crate::gpu::Gpu;

/// This build has no GPU backend (the `gpu` feature is off: the page's threaded build), so no
/// device can exist.
#[cfg(not(feature = "gpu"))]
#[derive(Debug, Clone)]
pub enum Device {}

enum Body {
    #[cfg(feature = "gpu")]
    Device(Box<Weights<DeviceOps>>),
    Host(Box<Weights<HostOps>>),
}

/// The model, ready to run on one device.
pub struct Llama {
    pub config: LlamaConfig,
    model: Transformer,
    body: Body,
    /// What the quantization did, tensor by tensor, and the bytes that resulted.
    pub quant: QuantPlan,
}

/// Keys and values of every layer, filled up to `len()`.
///
/// The cache grows with use (doubling from 64 positions, up to the context length) instead of
/// holding the whole context from the start: a model that claims a 2^20-token context with 512
/// layers would otherwise ask for gigabytes before its first token.
pub struct KvCache {
    positions: Positions,
    store: Store,
}

enum Store {
    #[cfg(feature = "gpu")]
    Device(<DeviceOps as Ops>::Cache),
    Host(<HostOps as Ops>::Cache),
}

impl Store {
    #[cfg(feature = "gpu")]
    fn device(&mut self) -> &mut <DeviceOps as Ops>::Cache {
        match self {
            Store::Device(cache) => cache,
            Store::Host(_) => panic!("a KV cache from a model on another backend"),
        }
    }

    fn host(&mut self) -> &mut <HostOps as Ops>::Cache {
        match self {
            Store::Host(cache) => cache,
            #[cfg(feature = "gpu")]
            Store::Device(_) => panic!("a KV cache from a model on another backend"),
        }
    }
}

/// Each segment's positions and its cache in one backend's form (`store` picks it).
fn caches<'s, C>(
    segments: &'s mut [Segment],
    store: fn(&mut Store) -> &mut C,
) -> (Vec<&'s mut Positions>, Vec<&'s mut C>) {
    segments
        .iter_mut()
        .map(|s| {
            let KvCache {
                positions,
                store: st,
            } = &mut *s.cache;
            (positions, store(st))
        })
        .unzip()
}

impl KvCache {
    /// Positions filled.
    pub fn len(&self) -> usize {
        self.positions.len
    }

    pub fn is_empty(&self) -> bool {
        self.positions.len == 0
    }

    /// Forget positions from `len` on (what speculative decoding needs to reject a draft).
    pub fn truncate(&mut self, len: usize) {
        self.positions.len = self.positions.len.min(len);
    }

    /// Positions the cache can hold without growing.
    pub fn capacity(&self) -> usize {
        self.positions.capacity
    }

    /// Grow to at most `positions` (a sequence that will never need more: its prompt and its
    /// max tokens), so that a cache growing by doubling holds no more than that.
    pub fn limit_to(&mut self, positions: usize) {
        self.positions.limit = self.positions.limit.min(positions.max(1));
    }
}

/// One sequence's tokens in a batched pass, with its cache.
pub struct Segment<'a> {
    pub tokens: &'a [u32],
    pub cache: &'a mut KvCache,
}

impl Llama {
    /// Put host weights in the form their device runs, quantized to `quant`'s blocks: GPU buffers
    /// on a wgpu `device`, or, with no device, host arrays for the CPU kernels in `isa` on
    /// `threads`.
    pub fn new(
        mut weights: HostWeights,
        quant: Quant,
        device: Option<&Device>,
        isa: Isa,
        threads: &Threads,
    ) -> Self {
        let hidden = weights.config.hidden_dim;
        // As stored, a matrix is in blocks only where its width is whole blocks already.
        if quant.format().is_some() {
            pad_hidden_to_blocks(&mut weights);
        }
        let config = weights.config.clone();
        let heads = Heads {
            n_heads: config.n_heads,
            n_kv_heads: config.n_kv_heads,
            head_size: config.head_size(),
        };
        let mut plan = QuantPlan::new(quant);
        if config.hidden_dim != hidden {
            plan.exceptions.push(format!(
                "hidden size {hidden} padded to {} with zero units for blocks of 32 (exact)",
                config.hidden_dim
            ));
        }
        plan.note_tensor_types(&weights.tensor_types);
        let HostWeights {
            token_embedding,
            layers,
            rms_final,
            classifier,
            ..
        } = weights;
        // A shared classifier is the embedding again, in the classifier's form. On the host, where
        // that form holds the same values (as stored, or widened to f32), the classifier is the
        // only copy and the embedding's rows are read from it; the GPU keeps the table on the
        // host beside the classifier on the device.
        let (classifier, token_embedding) = match classifier {
            Some(classifier) => (classifier, Some(token_embedding)),
            None if device.is_none() && plan.keeps_values(&token_embedding) => {
                (token_embedding, None)
            }
            None => (token_embedding.clone(), Some(token_embedding)),
        };
        let body = match device {
            None => {
                let ops = HostOps::new(isa, heads, threads.clone());
                Body::Host(Box::new(Weights::new(
                    ops, layers, &rms_final, classifier, &mut plan,
                )))
            }
            #[cfg(feature = "gpu")]
            Some(device) => {
                let ops = DeviceOps::new(&config, device);
                Body::Device(Box::new(Weights::new(
                    ops, layers, &rms_final, classifier, &mut plan,
                )))
            }
            #[cfg(not(feature = "gpu"))]
            Some(device) => match *device {},
        };
        Self {
            model: Transformer::new(config.clone(), token_embedding),
            config,
            body,
            quant: plan,
        }
    }

    /// Bytes of the token embedding as held (f32, or the file's blocks): 0 where the tied
    /// classifier holds the table (counted with the other projections).
    pub fn embedding_bytes(&self) -> u64 {
        self.model
            .embedding
            .as_ref()
            .map_or(0, crate::model::Matrix::bytes)
    }

    /// What the model has done on the GPU since it was loaded (dispatches, submits, buffers and
    /// bind groups made, host time): `None` on the CPU.
    #[cfg(feature = "gpu")]
    pub fn gpu_counts(&self) -> Option<crate::gpu::Counts> {
        match &self.body {
            Body::Device(w) => Some(w.ops.counts()),
            Body::Host(_) => None,
        }
    }

    /// Bytes the GPU holds for this model now, and of them its KV pool's: `None` on the CPU.
    #[cfg(feature = "gpu")]
    pub fn gpu_memory(&self) -> Option<(u64, u64)> {
        match &self.body {
            Body::Device(w) => Some((w.ops.memory_bytes(), w.ops.kv_bytes())),
            Body::Host(_) => None,
        }
    }

    /// The engine's phase clock (`model/phases.rs`): the CPU's, or the GPU's where the device
    /// has timestamps to time its dispatches with (`gpu/timer.rs`), else `None`.
    pub fn phases(&self) -> Option<&PhaseClock> {
        match &self.body {
            Body::Host(w) => Some(&w.ops.phases),
            #[cfg(feature = "gpu")]
            Body::Device(w) => w.ops.phases(),
        }
    }

    /// The bytes a sequence's KV cache holds a position: keys and values of every layer, in f32.
    pub fn kv_bytes_per_position(&self) -> usize {
        let c = &self.config;
        c.n_layers * 2 * c.n_kv_heads * c.head_size() * 4
    }

    /// An empty cache; it allocates as positions are written.
    pub fn new_cache(&self) -> KvCache {
        let layers = self.config.n_layers;
        KvCache {
            positions: Positions {
                len: 0,
                capacity: 0,
                limit: self.config.seq_len,
            },
            store: match &self.body {
                #[cfg(feature = "gpu")]
                Body::Device(w) => Store::Device(w.ops.new_cache(layers)),
                Body::Host(w) => Store::Host(w.ops.new_cache(layers)),
            },
        }
    }

    /// Run `tokens` at positions `cache.len()..`: the whole prompt in batched passes (prefill, in
    /// chunks when it is long) or one token (decode). Returns logits `[1, vocab]` for the last
    /// position, or `[T, vocab]` for every position when `all_logits` (used to check quantization
    /// along a known sequence).
    pub fn forward(&self, tokens: &[u32], cache: &mut KvCache, all_logits: bool) -> Logits {
        let chunk = self.prefill_chunk(cache.len() + tokens.len());
        self.forward_in_chunks(tokens, cache, all_logits, chunk)
    }

    /// How many positions one pass may run when the longest sequence ends at `end`
    /// ([`Transformer::prefill_chunk`]), and at most what the backend takes in one pass
    /// ([`Ops::max_pass_rows`]).
    pub fn prefill_chunk(&self, end: usize) -> usize {
        let most = match &self.body {
            Body::Host(w) => w.ops.max_pass_rows(end),
            #[cfg(feature = "gpu")]
            Body::Device(w) => w.ops.max_pass_rows(end),
        };
        self.model.prefill_chunk(end).min(most)
    }

    /// [`forward`](Self::forward) with `tokens` run `chunk` at a time (tests compare chunkings).
    pub fn forward_in_chunks(
        &self,
        tokens: &[u32],
        cache: &mut KvCache,
        all_logits: bool,
        chunk: usize,
    ) -> Logits {
        let KvCache { positions, store } = cache;
        match (&self.body, store) {
            #[cfg(feature = "gpu")]
            (Body::Device(w), Store::Device(s)) => self
                .model
                .chunks(w, tokens, positions, s, all_logits, chunk),
            (Body::Host(w), Store::Host(s)) => self
                .model
                .chunks(w, tokens, positions, s, all_logits, chunk),
            #[cfg(feature = "gpu")]
            _ => panic!("a KV cache from a model on another backend"),
        }
    }

    /// One pass over several sequences at once, each at its own positions in its own cache: the
    /// projections and the classifier see all their rows together, so each weight is read once
    /// per step for the whole batch; attention reads each sequence's own cache. Returns logits
    /// `[segments, vocab]`, row `i` for the last position of `segments[i]`.
    ///
    /// Each segment must fit a pass (a prompt longer than [`prefill_chunk`](Self::prefill_chunk)
    /// goes through [`forward`](Self::forward) alone) and the context.
    pub fn forward_batch(&self, segments: &mut [Segment]) -> Logits {
        let tokens: Vec<&[u32]> = segments.iter().map(|s| s.tokens).collect();
        match &self.body {
            #[cfg(feature = "gpu")]
            Body::Device(w) => {
                let (positions, stores) = caches(segments, Store::device);
                self.model.batch(w, &tokens, positions, stores)
            }
            Body::Host(w) => {
                let (positions, stores) = caches(segments, Store::host);
                self.model.batch(w, &tokens, positions, stores)
            }
        }
    }

    /// The matrix products of a decode step of `rows` sequences, and nothing else: every
    /// projection of every layer and the classifier, once each, on `rows` activation rows, as
    /// [`forward_batch`](Self::forward_batch) runs them (each weight row read once for all rows).
    /// Returns the weight bytes and the multiply-adds of the pass, for the ceiling that `bench`
    /// and the page's lab report beside a level.
    ///
    /// The CPU backend only (`None` on a GPU, where products are queued rather than run, so their
    /// time is not theirs alone).
    pub fn products_alone(&self, rows: usize) -> Option<(u64, u64)> {
        // (Without the GPU the match has one arm.)
        #[cfg_attr(not(feature = "gpu"), allow(clippy::infallible_destructuring_match))]
        let w = match &self.body {
            Body::Host(w) => w,
            #[cfg(feature = "gpu")]
            Body::Device(_) => return None,
        };
        let (ops, dim) = (&w.ops, self.config.dim);
        // Small values of no meaning: f32 products take the same time whatever they hold, and a
        // quantized product quantizes its rows as a step does (once for the projections that
        // share them).
        let x = ops.embed(vec![0.01; rows * dim], rows);
        let (mut bytes, mut macs) = (0u64, 0u64);
        let mut product = |x: &Rows, l: &HostLinear| {
            bytes += l.weights.bytes();
            macs += (rows * l.rows * l.cols) as u64;
            std::hint::black_box(ops.matmul(x, l))
        };
        for layer in &w.layers {
            let q = product(&x, &layer.wq);
            product(&x, &layer.wk);
            product(&x, &layer.wv);
            product(&q, &layer.wo);
            let gate = product(&x, &layer.w1);
            product(&x, &layer.w3);
            product(&gate, &layer.w2);
        }
        product(&x, &w.classifier);
        Some((bytes, macs))
    }
}
