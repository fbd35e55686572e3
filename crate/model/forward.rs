//! The Llama-2 transformer, read top to bottom like llama2.c's `forward()`: embedding, then per
//! layer RMSNorm, attention with RoPE and a KV cache, a residual, RMSNorm, SwiGLU feed-forward, a
//! residual; last, the final norm and the classifier. Every other architecture is the same pass
//! with what its recipe ([`Recipe`](crate::model::Recipe)) adds, read as fields: embeddings
//! scaled, biases on q, k and v, q and k normed per head, norms after attention and the
//! feed-forward, GELU in place of SiLU, and a sliding window with its own RoPE base on the local
//! layers.
//!
//! The pass is written once: [`Transformer`] walks the layers calling each backend's two halves
//! ([`Ops`]), and [`attention_half`] and [`feed_forward_half`] say what a half computes, once, over
//! [`Kernels`]:
//! - `cpu/ops.rs` runs those definitions as written, on host arrays with the kernels of `cpu/`.
//! - `gpu/` (wgpu, natively and in WebGPU) runs each half as two dispatches of its own WGSL kernels
//!   (`gpu/shaders/`), which follow the same steps in the same order.
//!
//! Both multiply f32 and the kernels' block forms ([`Format`](crate::formats::Format)): Q8_0's
//! bytes, Q4_0's nibbles (Q4_0, and Q4_1 and Q4_K), with each block's offset where the stored
//! type has minimums, Q5_0's (Q5_0, and Q5_1 and Q5_K) and Q6_K's.
//!
//! `backend/llama.rs` holds a model on the backend it was loaded on and calls this pass. The token
//! embedding stays on the host for both: a step reads one row of it, not the whole table.

use crate::model::config::Activation;
use crate::model::config::{LlamaConfig, rope_angles};
use crate::model::logits::Logits;
use crate::model::ops::{Angles, Kernels, LayerAt, LayerOf, LogitRows, Ops, Span};
use crate::model::quant::QuantPlan;
use crate::model::weights::{LayerWeights, Matrix};

/// The weights a backend runs, with its operations.
pub struct Weights<O: Ops> {
    pub ops: O,
    pub layers: Vec<O::Layer>,
    pub rms_final: O::Vector,
    /// `[vocab, dim]`.
    pub classifier: O::Linear,
}

/// How far a cache is filled and how far it can grow.
pub struct Positions {
    /// Positions filled.
    pub len: usize,
    /// Positions each layer can hold now.
    pub capacity: usize,
    /// The most the cache grows to by doubling: the context, or less where the sequence can
    /// never need more (a write past it still grows the cache to what it needs).
    pub limit: usize,
}

/// The smallest capacity a cache allocates, so that short runs grow it once or twice at most.
const MIN_CACHE_POSITIONS: usize = 64;

impl Positions {
    /// The capacity needed to hold positions up to `end`, when that means growing.
    fn growth(&self, end: usize) -> Option<usize> {
        (end > self.capacity).then(|| {
            end.max(2 * self.capacity)
                .max(MIN_CACHE_POSITIONS)
                .min(self.limit.max(end))
        })
    }
}

/// The most bytes one prefill chunk's largest intermediate (attention scores, or the feed-forward
/// activations) may take; longer prompts are run in several chunks. 64 MiB keeps a 512-token prompt
/// of the models the page offers in one chunk, and a 100,000-token prompt on a model claiming a
/// 2^20-token context from building a multi-gigabyte `t x t` mask.
const PREFILL_CHUNK_BYTES: u64 = 64 << 20;

/// What the pass needs whatever the backend: the shape, the token embedding `[vocab, dim]` (often
/// lying in the file's bytes, or in the kernels' blocks: a step widens only the rows it
/// reads; SmolLM2-135M's table is 113 MB as f32, 30 MB as Q8_0), and RoPE's frequency per pair
/// (the angles are computed per pass for its positions).
pub struct Transformer {
    pub config: LlamaConfig,
    /// `None` where the classifier is the same table, held on the host (the CPU's ops read its
    /// rows): a tied table held once, not twice (Gemma 3 270M's is 189 MB of its 483 in Q8_0).
    pub embedding: Option<Matrix>,
    rope_freqs: Vec<f32>,
    /// The local layers' frequencies, where they have a base of their own (Gemma 3).
    local_rope_freqs: Option<Vec<f32>>,
}

impl Transformer {
    pub fn new(config: LlamaConfig, embedding: Option<Matrix>) -> Self {
        let local = (0..config.n_layers)
            .map(|l| config.layer_attention(l))
            .find(|(window, _)| window.is_some());
        Self {
            rope_freqs: config.rope_frequencies(),
            local_rope_freqs: local.map(|(_, theta)| config.rope_frequencies_for(theta)),
            config,
            embedding,
        }
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

    /// `tokens` of one sequence at positions `positions.len..`, `chunk` at a time; logits for the
    /// last position, or for every position when `all_logits`.
    pub fn chunks<O: Ops>(
        &self,
        w: &Weights<O>,
        tokens: &[u32],
        positions: &mut Positions,
        store: &mut O::Cache,
        all_logits: bool,
        chunk: usize,
    ) -> Logits {
        let chunk = chunk.clamp(1, w.ops.max_pass_rows(positions.len + tokens.len()));
        let pieces = tokens.len().div_ceil(chunk);
        let mut logits = Vec::new();
        let mut made = 0;
        for (i, piece) in tokens.chunks(chunk).enumerate() {
            let (x, pass) = self.pass(w, &[piece], vec![&mut *positions], vec![&mut *store]);
            if all_logits || i + 1 == pieces {
                let rows = if all_logits {
                    LogitRows::All
                } else {
                    LogitRows::Last
                };
                logits.push(self.classify(w, x, &pass, rows, made));
                made += if all_logits { piece.len() } else { 1 };
            }
        }
        Logits::cat(logits)
    }

    /// Several sequences in one pass, each `(tokens, positions, cache)`; logits for each one's
    /// last position.
    pub fn batch<O: Ops>(
        &self,
        w: &Weights<O>,
        tokens: &[&[u32]],
        positions: Vec<&mut Positions>,
        stores: Vec<&mut O::Cache>,
    ) -> Logits {
        let (x, pass) = self.pass(w, tokens, positions, stores);
        self.classify(w, x, &pass, LogitRows::Last, 0)
    }

    /// Grow each cache for its tokens, run the layers over all of them, and advance the caches.
    /// Returns the hidden states `[T, dim]` before the final norm.
    fn pass<O: Ops>(
        &self,
        w: &Weights<O>,
        tokens: &[&[u32]],
        mut positions: Vec<&mut Positions>,
        mut stores: Vec<&mut O::Cache>,
    ) -> (O::Act, O::Pass) {
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
        let done = self.transformer(w, &tokens.concat(), &spans, &mut stores);
        for (p, span) in positions.into_iter().zip(&spans) {
            p.len = span.start + span.len;
        }
        done
    }

    /// The final norm and the classifier over `rows` of the pass.
    fn classify<O: Ops>(
        &self,
        w: &Weights<O>,
        x: O::Act,
        pass: &O::Pass,
        rows: LogitRows,
        first: usize,
    ) -> Logits {
        let eps = self.config.norm_eps;
        w.ops
            .classify(x, pass, rows, first, &w.rms_final, &w.classifier, eps)
    }

    /// Every layer for `tokens` (the spans' rows, one after another) in one batched pass, storing
    /// their keys and values in each span's cache (which holds room for them). Returns the hidden
    /// states `[T, dim]` before the final norm, and the pass.
    fn transformer<O: Ops>(
        &self,
        w: &Weights<O>,
        tokens: &[u32],
        spans: &[Span],
        caches: &mut [&mut O::Cache],
    ) -> (O::Act, O::Pass) {
        let (c, ops) = (&self.config, &w.ops);
        let (t, dim) = (tokens.len(), c.dim);
        assert!(t > 0, "a pass needs at least one token");

        // Token embedding: copy the rows on the host (Gemma scales them by sqrt(dim)), from the
        // tied classifier where that holds the table.
        let mut rows = Vec::with_capacity(t * dim);
        for &id in tokens {
            match &self.embedding {
                Some(table) => table.extend_row(id as usize, &mut rows),
                None => {
                    let read = ops.linear_row(&w.classifier, id as usize, &mut rows);
                    assert!(
                        read,
                        "a tied table is left to the classifier on the host only"
                    );
                }
            }
        }
        if let Some(scale) = c.embedding_scale() {
            rows.iter_mut().for_each(|v| *v *= scale);
        }
        let mut x = ops.embed(rows, t);
        let angles = |freqs: &[f32]| {
            let (mut cos, mut sin) = (Vec::new(), Vec::new());
            for span in spans {
                let end = span.start + span.len;
                assert!(
                    end <= c.seq_len,
                    "positions {}..{end} outside the context",
                    span.start
                );
                let (c, s) = rope_angles(freqs, span.start, end);
                cos.extend(c);
                sin.extend(s);
            }
            (cos, sin)
        };
        let (cos, sin) = angles(&self.rope_freqs);
        let local = self.local_rope_freqs.as_deref().map(angles);
        let has_local = local.is_some();
        let pass = ops.pass(spans, Angles { cos, sin, local }, caches);

        for (l, layer) in w.layers.iter().enumerate() {
            let (window, _) = c.layer_attention(l);
            let at = LayerAt {
                index: l,
                window,
                local: window.is_some() && has_local,
            };
            x = ops.attention_half(x, layer, at, caches, &pass, c);
            x = ops.feed_forward_half(x, layer, c);
        }
        (x, pass)
    }
}

/// A layer's first half: `x + attention(norm(x))`. Project the normed rows to queries, keys and
/// values (plus biases, and each head normed, where the recipe says), rotate, store in the caches,
/// attend over each sequence's past (its last `window` positions, on a local layer), project back
/// and add (Gemma norms the projection before adding).
pub fn attention_half<K: Kernels>(
    ops: &K,
    x: K::Act,
    layer: &LayerOf<K>,
    at: LayerAt,
    caches: &mut [&mut K::Cache],
    pass: &K::Pass,
    c: &LlamaConfig,
) -> K::Act {
    let (h, extras) = (ops.rms_norm(&x, &layer.rms_att, c.norm_eps), &layer.extras);
    let (mut q, mut k) = (ops.matmul(&h, &layer.wq), ops.matmul(&h, &layer.wk));
    let mut v = ops.matmul(&h, &layer.wv);
    if let Some([bq, bk, bv]) = &extras.qkv_bias {
        (q, k, v) = (
            ops.add_bias(q, bq),
            ops.add_bias(k, bk),
            ops.add_bias(v, bv),
        );
    }
    if let Some([nq, nk]) = &extras.qk_norm {
        q = ops.head_rms_norm(q, nq, c.norm_eps);
        k = ops.head_rms_norm(k, nk, c.norm_eps);
    }
    let (q, k) = ops.rope(q, k, pass, at.local);
    let attention = ops.attention(q, k, v, caches, at.index, pass, at.window);
    let out = ops.matmul(&attention, &layer.wo);
    match &extras.post_norms {
        None => ops.add(x, out),
        Some([after_attention, _]) => ops.add(x, ops.rms_norm(&out, after_attention, c.norm_eps)),
    }
}

/// A layer's second half: `x + w2(act(w1 h) * w3 h)` with `h = norm(x)`, SiLU or GELU (Gemma norms
/// the projection before adding).
pub fn feed_forward_half<K: Kernels>(
    ops: &K,
    x: K::Act,
    layer: &LayerOf<K>,
    c: &LlamaConfig,
) -> K::Act {
    let h = ops.rms_norm(&x, &layer.rms_ffn, c.norm_eps);
    let (gate, up) = (ops.matmul(&h, &layer.w1), ops.matmul(&h, &layer.w3));
    let hidden = match c.recipe.activation {
        Activation::Silu => ops.swiglu(gate, up),
        Activation::GeluTanh => ops.geglu(gate, up),
    };
    let out = ops.matmul(&hidden, &layer.w2);
    match &layer.extras.post_norms {
        None => ops.add(x, out),
        Some([_, after_ffn]) => ops.add(x, ops.rms_norm(&out, after_ffn, c.norm_eps)),
    }
}

/// The final norm and the classifier over `rows` of the pass.
pub fn classify<K: Kernels>(
    ops: &K,
    x: K::Act,
    pass: &K::Pass,
    rows: LogitRows,
    norm: &K::Vector,
    classifier: &K::Linear,
    eps: f32,
) -> Logits {
    let x = match rows {
        LogitRows::All => x,
        LogitRows::Last => ops.last_rows(x, pass),
    };
    let x = ops.rms_norm(&x, norm, eps);
    ops.logits(ops.matmul(&x, classifier))
}

impl<O: Ops> Weights<O> {
    /// Convert every layer (consuming its f32 copies as it goes) into `ops`' form.
    pub fn new(
        ops: O,
        layers: Vec<LayerWeights>,
        rms_final: &[f32],
        classifier: Matrix,
        plan: &mut QuantPlan,
    ) -> Self {
        let layers = layers
            .into_iter()
            .enumerate()
            .map(|(i, l)| ops.layer(i, l, plan))
            .collect();
        let classifier = ops.linear("classifier", classifier, plan);
        plan.add_f32(rms_final.len());
        Self {
            rms_final: ops.vector(rms_final),
            layers,
            classifier,
            ops,
        }
    }
}
