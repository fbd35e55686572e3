//! The Llama-2 transformer, read top to bottom like llama2.c's `forward()`: embedding, then per
//! layer RMSNorm, attention with RoPE and a KV cache, a residual, RMSNorm, SwiGLU feed-forward, a
//! residual; last, the final norm and the classifier.
//!
//! The pass is written once, over the operations of `Ops`; each backend supplies them:
//! - `device_ops.rs`: burn tensors (wgpu, natively and in WebGPU) and tokenometer's own kernels,
//!   f32, Q8_0 or Q4_0.
//! - `host_ops.rs`: the CPU, on host arrays with the kernels of `kernels.rs`, f32, Q8_0 or Q4_0.
//!
//! The token embedding stays on the host for both: a step reads one row of it, not the whole table.

use std::ops::Range;

use burn::prelude::*;

use crate::device_ops::DeviceOps;
use crate::host_ops::{HostOps, Rows};
use crate::kernels::Isa;
use crate::quant::{HostLinear, Quant, QuantPlan, pad_hidden_to_blocks};
use crate::sampling::Logits;
use crate::weights::{HostWeights, LlamaConfig, Matrix, rope_angles};

/// The shape of attention, which every backend's operations need.
#[derive(Debug, Clone, Copy)]
pub struct Heads {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_size: usize,
}

/// One sequence's rows in a pass: positions `start..start + len` of its own KV cache. A prefill is
/// one span of the whole prompt; a batched decode step is one span of one row per sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub start: usize,
    pub len: usize,
}

/// What the forward pass asks of a backend. `Act` is a batch of activations `[t, width]`: the
/// rows of every span of the pass, one after another.
pub(crate) trait Ops {
    type Act: Clone;
    /// A norm's weight.
    type Vector;
    /// A projection `y = W x` with `W` of `[out, in]`, in whatever form the backend stores.
    type Linear;
    /// What one pass needs beyond the weights: RoPE's angles for its positions, a causal mask.
    type Pass;
    /// Every layer's keys and values.
    type Cache;

    fn vector(&self, v: &[f32]) -> Self::Vector;
    fn linear(&self, name: &str, m: Matrix, plan: &mut QuantPlan) -> Self::Linear;
    fn new_cache(&self, layers: usize) -> Self::Cache;
    /// Make the cache hold `capacity` positions, keeping the first `filled`.
    fn grow(&self, cache: &mut Self::Cache, capacity: usize, filled: usize);

    /// `t` embedding rows `[t, dim]` as activations.
    fn embed(&self, rows: Vec<f32>, t: usize) -> Self::Act;
    /// Prepare the spans' positions (cos and sin are `[t, head_size / 2]`, every span's rows).
    fn pass(&self, spans: &[Span], cos: Vec<f32>, sin: Vec<f32>) -> Self::Pass;
    fn rms_norm(&self, x: &Self::Act, weight: &Self::Vector, eps: f32) -> Self::Act;
    fn matmul(&self, x: &Self::Act, w: &Self::Linear) -> Self::Act;
    /// Rotate adjacent pairs (2i, 2i+1) of each head of `x` `[t, heads * head_size]` by the
    /// position's angle, as llama2.c does.
    fn rope(&self, x: Self::Act, pass: &Self::Pass) -> Self::Act;
    /// Store each span's `k` and `v` in `layer` of its own cache (`caches[i]` for span `i`), then
    /// attend: each query row over its sequence's keys `0..=` its position, query heads grouped
    /// onto KV heads. Returns `[t, dim]`.
    fn attention(
        &self,
        q: Self::Act,
        k: Self::Act,
        v: Self::Act,
        caches: &mut [&mut Self::Cache],
        layer: usize,
        pass: &Self::Pass,
    ) -> Self::Act;
    fn add(&self, x: Self::Act, y: Self::Act) -> Self::Act;
    /// `silu(gate) * up`.
    fn swiglu(&self, gate: Self::Act, up: Self::Act) -> Self::Act;
    fn rows(&self, x: Self::Act, rows: Range<usize>) -> Self::Act;
    fn cat(&self, parts: Vec<Self::Act>) -> Self::Act;
    /// The activations as logits, for sampling.
    fn logits(&self, x: Self::Act) -> Logits;
}

/// A transformer block's weights in a backend's form.
struct Layer<O: Ops> {
    rms_att: O::Vector,
    wq: O::Linear,
    wk: O::Linear,
    wv: O::Linear,
    wo: O::Linear,
    rms_ffn: O::Vector,
    w1: O::Linear,
    w2: O::Linear,
    w3: O::Linear,
}

/// The weights a backend runs, with its operations.
struct Weights<O: Ops> {
    ops: O,
    layers: Vec<Layer<O>>,
    rms_final: O::Vector,
    /// `[vocab, dim]`.
    classifier: O::Linear,
}

enum Body {
    Device(Box<Weights<DeviceOps>>),
    Host(Box<Weights<HostOps>>),
}

/// The model, ready to run on one device.
pub struct Llama {
    pub config: LlamaConfig,
    /// `[vocab, dim]`, often lying in the file's bytes, or in the file's Q8_0/Q4_0 blocks (a step
    /// widens only the rows it reads: SmolLM2-135M's table is 113 MB as f32, 30 MB as Q8_0).
    embedding: Matrix,
    body: Body,
    /// RoPE's frequency per pair; the angles are computed per pass for its positions.
    rope_freqs: Vec<f32>,
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

/// How far a cache is filled and how far it can grow.
struct Positions {
    /// Positions filled.
    len: usize,
    /// Positions each layer can hold now.
    capacity: usize,
    /// The context length: the most the cache may grow to.
    limit: usize,
}

enum Store {
    Device(<DeviceOps as Ops>::Cache),
    Host(<HostOps as Ops>::Cache),
}

/// The smallest capacity a cache allocates, so that short runs grow it once or twice at most.
const MIN_CACHE_POSITIONS: usize = 64;

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
}

impl Positions {
    /// The capacity needed to hold positions up to `end`, when that means growing.
    fn growth(&self, end: usize) -> Option<usize> {
        (end > self.capacity).then(|| {
            end.max(2 * self.capacity)
                .max(MIN_CACHE_POSITIONS)
                .min(self.limit)
        })
    }
}

/// The most bytes one prefill chunk's largest intermediate (attention scores, or the feed-forward
/// activations) may take; longer prompts are run in several chunks. 64 MiB keeps a 512-token prompt
/// of the models the page offers in one chunk, and a 100,000-token prompt on a model claiming a
/// 2^20-token context from building a multi-gigabyte `t x t` mask.
const PREFILL_CHUNK_BYTES: u64 = 64 << 20;

impl Llama {
    /// Put host weights in the form their device runs, quantized to `quant`'s blocks: burn tensors
    /// on a wgpu `device`, or, with no device, host arrays for the CPU kernels in `isa`.
    pub fn new(mut weights: HostWeights, quant: Quant, device: Option<&Device>, isa: Isa) -> Self {
        let hidden = weights.config.hidden_dim;
        if quant != Quant::F32 {
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
        plan.exceptions.extend(weights.conversions.iter().cloned());
        let HostWeights {
            token_embedding,
            layers,
            rms_final,
            classifier,
            ..
        } = weights;
        // A shared classifier is the embedding again, in the classifier's form.
        let classifier = classifier.unwrap_or_else(|| token_embedding.clone());
        let body = match device {
            None => {
                let ops = HostOps::new(isa, heads);
                Body::Host(Box::new(Weights::new(
                    ops, layers, &rms_final, classifier, &mut plan, config.dim,
                )))
            }
            Some(device) => {
                let ops = DeviceOps::new(heads, device.clone());
                Body::Device(Box::new(Weights::new(
                    ops, layers, &rms_final, classifier, &mut plan, config.dim,
                )))
            }
        };
        Self {
            rope_freqs: config.rope_frequencies(),
            embedding: token_embedding,
            config,
            body,
            quant: plan,
        }
    }

    /// Bytes of the token embedding as held (f32, or the file's blocks).
    pub fn embedding_bytes(&self) -> u64 {
        self.embedding.bytes()
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

    /// How many positions one pass may run when the longest sequence ends at `end`: the largest
    /// intermediates per position are a row of attention scores per head over every key, and the
    /// feed-forward's three hidden-width rows. (In u64: n_heads * end can pass 2^32, wasm's usize.)
    pub fn prefill_chunk(&self, end: usize) -> usize {
        let c = &self.config;
        let per_position =
            4 * (c.n_heads as u64 * end as u64).max(3 * c.hidden_dim as u64 + 4 * c.dim as u64);
        (PREFILL_CHUNK_BYTES / per_position).max(1) as usize
    }

    /// [`forward`](Self::forward) with `tokens` run `chunk` at a time (tests compare chunkings).
    pub fn forward_in_chunks(
        &self,
        tokens: &[u32],
        cache: &mut KvCache,
        all_logits: bool,
        chunk: usize,
    ) -> Logits {
        match &self.body {
            Body::Device(w) => self.chunks(w, tokens, cache, device_store, all_logits, chunk),
            Body::Host(w) => self.chunks(w, tokens, cache, host_store, all_logits, chunk),
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
        match &self.body {
            Body::Device(w) => self.batch(w, segments, device_store),
            Body::Host(w) => self.batch(w, segments, host_store),
        }
    }

    /// The matrix products of a decode step of `rows` sequences, and nothing else: every
    /// projection of every layer and the classifier, once each, on `rows` activation rows, as
    /// [`forward_batch`](Self::forward_batch) runs them (each weight row read once for all rows).
    /// Returns the weight bytes and the multiply-adds of the pass, for the ceiling
    /// ([`crate::meter::Products`]) that `bench` and the page's lab report beside a level.
    ///
    /// The CPU backend only (`None` on a GPU, where products are queued rather than run, so their
    /// time is not theirs alone).
    pub fn products_alone(&self, rows: usize) -> Option<(u64, u64)> {
        let Body::Host(w) = &self.body else {
            return None;
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

    fn chunks<O: Ops>(
        &self,
        w: &Weights<O>,
        tokens: &[u32],
        cache: &mut KvCache,
        store: fn(&mut Store) -> &mut O::Cache,
        all_logits: bool,
        chunk: usize,
    ) -> Logits {
        let mut hidden = Vec::new();
        for piece in tokens.chunks(chunk.max(1)) {
            let KvCache {
                positions,
                store: s,
            } = &mut *cache;
            let x = self.pass(w, &[piece], vec![positions], vec![store(s)]);
            let t = piece.len();
            hidden.push(if all_logits {
                x
            } else {
                w.ops.rows(x, t - 1..t)
            });
        }
        let x = if all_logits {
            w.ops.cat(hidden)
        } else {
            hidden.pop().expect("forward needs at least one token")
        };
        self.classify(w, x)
    }

    fn batch<O: Ops>(
        &self,
        w: &Weights<O>,
        segments: &mut [Segment],
        store: fn(&mut Store) -> &mut O::Cache,
    ) -> Logits {
        let tokens: Vec<&[u32]> = segments.iter().map(|s| s.tokens).collect();
        let (positions, stores) = segments
            .iter_mut()
            .map(|s| {
                let KvCache {
                    positions,
                    store: s,
                } = &mut *s.cache;
                (positions, store(s))
            })
            .unzip();
        let x = self.pass(w, &tokens, positions, stores);
        // Each segment's last row; a decode step's rows are all last rows already.
        let x = if tokens.iter().all(|t| t.len() == 1) {
            x
        } else {
            let mut end = 0;
            let last = tokens.iter().map(|t| {
                end += t.len();
                w.ops.rows(x.clone(), end - 1..end)
            });
            w.ops.cat(last.collect())
        };
        self.classify(w, x)
    }

    /// Grow each cache for its tokens, run the layers over all of them, and advance the caches.
    /// Returns the hidden states `[T, dim]` before the final norm.
    fn pass<O: Ops>(
        &self,
        w: &Weights<O>,
        tokens: &[&[u32]],
        mut positions: Vec<&mut Positions>,
        mut stores: Vec<&mut O::Cache>,
    ) -> O::Act {
        let mut spans = Vec::with_capacity(tokens.len());
        for ((t, p), s) in tokens.iter().zip(&mut positions).zip(&mut stores) {
            let end = p.len + t.len();
            if let Some(capacity) = p.growth(end) {
                w.ops.grow(s, capacity, p.len);
                p.capacity = capacity;
            }
            spans.push(Span {
                start: p.len,
                len: t.len(),
            });
        }
        let x = self.transformer(w, &tokens.concat(), &spans, &mut stores);
        for (p, span) in positions.into_iter().zip(&spans) {
            p.len = span.start + span.len;
        }
        x
    }

    /// The final norm and the classifier.
    fn classify<O: Ops>(&self, w: &Weights<O>, x: O::Act) -> Logits {
        let x = w.ops.rms_norm(&x, &w.rms_final, self.config.norm_eps);
        w.ops.logits(w.ops.matmul(&x, &w.classifier))
    }

    /// Every layer for `tokens` (the spans' rows, one after another) in one batched pass, storing
    /// their keys and values in each span's cache (which holds room for them). Returns the hidden
    /// states `[T, dim]` before the final norm.
    fn transformer<O: Ops>(
        &self,
        w: &Weights<O>,
        tokens: &[u32],
        spans: &[Span],
        caches: &mut [&mut O::Cache],
    ) -> O::Act {
        let (c, ops) = (&self.config, &w.ops);
        let (t, dim) = (tokens.len(), c.dim);
        assert!(t > 0, "a pass needs at least one token");

        // Token embedding: copy the rows on the host.
        let mut rows = Vec::with_capacity(t * dim);
        for &id in tokens {
            self.embedding.extend_row(id as usize, &mut rows);
        }
        let mut x = ops.embed(rows, t);
        let (mut cos, mut sin) = (Vec::new(), Vec::new());
        for span in spans {
            let end = span.start + span.len;
            assert!(
                end <= c.seq_len,
                "positions {}..{end} outside the context",
                span.start
            );
            let (c, s) = rope_angles(&self.rope_freqs, span.start, end);
            cos.extend(c);
            sin.extend(s);
        }
        let pass = ops.pass(spans, cos, sin);

        for (l, layer) in w.layers.iter().enumerate() {
            // Attention: project, rotate, store in the caches, attend over each sequence's past.
            let h = ops.rms_norm(&x, &layer.rms_att, c.norm_eps);
            let q = ops.rope(ops.matmul(&h, &layer.wq), &pass);
            let k = ops.rope(ops.matmul(&h, &layer.wk), &pass);
            let v = ops.matmul(&h, &layer.wv);
            let attention = ops.attention(q, k, v, caches, l, &pass);
            x = ops.add(x, ops.matmul(&attention, &layer.wo));

            // Feed-forward: w2(silu(w1 x) * w3 x).
            let h = ops.rms_norm(&x, &layer.rms_ffn, c.norm_eps);
            let hidden = ops.swiglu(ops.matmul(&h, &layer.w1), ops.matmul(&h, &layer.w3));
            x = ops.add(x, ops.matmul(&hidden, &layer.w2));
        }
        x
    }
}

/// One sequence's tokens in a batched pass, with its cache.
pub struct Segment<'a> {
    pub tokens: &'a [u32],
    pub cache: &'a mut KvCache,
}

fn device_store(store: &mut Store) -> &mut <DeviceOps as Ops>::Cache {
    match store {
        Store::Device(cache) => cache,
        Store::Host(_) => panic!("a KV cache from a model on another backend"),
    }
}

fn host_store(store: &mut Store) -> &mut <HostOps as Ops>::Cache {
    match store {
        Store::Host(cache) => cache,
        Store::Device(_) => panic!("a KV cache from a model on another backend"),
    }
}

impl<O: Ops> Weights<O> {
    /// Convert every matrix (consuming its f32 copy as it goes) into `ops`' form.
    fn new(
        ops: O,
        layers: Vec<crate::weights::LayerWeights>,
        rms_final: &[f32],
        classifier: Matrix,
        plan: &mut QuantPlan,
        dim: usize,
    ) -> Self {
        let mut out = Vec::with_capacity(layers.len());
        for (i, l) in layers.into_iter().enumerate() {
            let name = |w: &str| format!("layers.{i}.{w}");
            let mut linear = |w: &str, m: Matrix| ops.linear(&name(w), m, plan);
            out.push(Layer {
                wq: linear("wq", l.wq),
                wk: linear("wk", l.wk),
                wv: linear("wv", l.wv),
                wo: linear("wo", l.wo),
                w1: linear("w1", l.w1),
                w2: linear("w2", l.w2),
                w3: linear("w3", l.w3),
                rms_att: ops.vector(&l.rms_att),
                rms_ffn: ops.vector(&l.rms_ffn),
            });
            plan.add_f32(2 * dim);
        }
        let classifier = ops.linear("classifier", classifier, plan);
        plan.add_f32(dim);
        Self {
            rms_final: ops.vector(rms_final),
            layers: out,
            classifier,
            ops,
        }
    }
}
