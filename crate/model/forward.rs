//! The Llama-2 transformer, read top to bottom like llama2.c's `forward()`: embedding, then per
//! layer RMSNorm, attention with RoPE and a KV cache, a residual, RMSNorm, SwiGLU feed-forward, a
//! residual; last, the final norm and the classifier. Every other architecture is the same pass
//! with what its recipe ([`Recipe`](crate::model::Recipe)) adds, read as fields: embeddings
//! scaled, biases on q, k and v, q and k normed per head, norms after attention and the
//! feed-forward, GELU in place of SiLU, and a sliding window with its own RoPE base on the local
//! layers.
//!
//! The pass is written once, over the operations of [`Ops`]; each backend supplies them:
//! - `gpu/ops.rs`: burn tensors (wgpu, natively and in WebGPU) and tokenometer's own kernels.
//! - `cpu/ops.rs`: the CPU, on host arrays with the kernels of `cpu/`.
//!
//! Both multiply f32 and the kernels' block forms ([`Format`](crate::formats::Format)): Q8_0's
//! bytes, Q4_0's nibbles (Q4_0, and Q4_1 and Q4_K), with each block's offset where the stored
//! type has minimums, and on the CPU Q5_0's (Q5_0, and Q5_1 and Q5_K; the GPU reads them as Q8_0's
//! bytes) and Q6_K's (the GPU widens Q6_K to f32).
//!
//! `backend/llama.rs` holds a model on the backend it was loaded on and calls this pass. The token
//! embedding stays on the host for both: a step reads one row of it, not the whole table.

use crate::model::config::Activation;
use crate::model::config::{LlamaConfig, rope_angles};
use crate::model::logits::Logits;
use crate::model::ops::{Ops, Span};
use crate::model::quant::QuantPlan;
use crate::model::weights::{Extras, LayerWeights, Matrix};

/// A transformer block's weights in a backend's form.
pub struct Layer<O: Ops> {
    pub rms_att: O::Vector,
    pub wq: O::Linear,
    pub wk: O::Linear,
    pub wv: O::Linear,
    pub wo: O::Linear,
    pub rms_ffn: O::Vector,
    pub w1: O::Linear,
    pub w2: O::Linear,
    pub w3: O::Linear,
    pub extras: Extras<O::Vector>,
}

/// The weights a backend runs, with its operations.
pub struct Weights<O: Ops> {
    pub ops: O,
    pub layers: Vec<Layer<O>>,
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
    /// The context length: the most the cache may grow to.
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
                .min(self.limit)
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
        let mut hidden = Vec::new();
        for piece in tokens.chunks(chunk.max(1)) {
            let x = self.pass(w, &[piece], vec![&mut *positions], vec![&mut *store]);
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

    /// Several sequences in one pass, each `(tokens, positions, cache)`; logits for each one's
    /// last position.
    pub fn batch<O: Ops>(
        &self,
        w: &Weights<O>,
        tokens: &[&[u32]],
        positions: Vec<&mut Positions>,
        stores: Vec<&mut O::Cache>,
    ) -> Logits {
        let x = self.pass(w, tokens, positions, stores);
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
            ops.pass(spans, cos, sin)
        };
        let global = angles(&self.rope_freqs);
        let local = self.local_rope_freqs.as_deref().map(angles);

        for (l, layer) in w.layers.iter().enumerate() {
            // Attention: project, (norm each head,) rotate, store in the caches, attend over each
            // sequence's past (its last `window` positions, on a local layer).
            let (window, _) = c.layer_attention(l);
            let pass = match (window, &local) {
                (Some(_), Some(local)) => local,
                _ => &global,
            };
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
            let (q, k) = ops.rope(q, k, pass);
            let attention = ops.attention(q, k, v, caches, l, pass, window);
            x = match &extras.post_norms {
                None => ops.matmul_add(x, &attention, &layer.wo),
                // Gemma norms the projection before the residual.
                Some([after_attention, _]) => {
                    let out = ops.matmul(&attention, &layer.wo);
                    ops.add(x, ops.rms_norm(&out, after_attention, c.norm_eps))
                }
            };

            // Feed-forward: w2(act(w1 x) * w3 x), SiLU or GELU.
            let h = ops.rms_norm(&x, &layer.rms_ffn, c.norm_eps);
            let (gate, up) = (ops.matmul(&h, &layer.w1), ops.matmul(&h, &layer.w3));
            let hidden = match c.recipe.activation {
                Activation::Silu => ops.swiglu(gate, up),
                Activation::GeluTanh => ops.geglu(gate, up),
            };
            x = match &extras.post_norms {
                None => ops.matmul_add(x, &hidden, &layer.w2),
                Some([_, after_ffn]) => {
                    let out = ops.matmul(&hidden, &layer.w2);
                    ops.add(x, ops.rms_norm(&out, after_ffn, c.norm_eps))
                }
            };
        }
        x
    }
}

impl<O: Ops> Weights<O> {
    /// Convert every matrix (consuming its f32 copy as it goes) into `ops`' form.
    pub fn new(
        ops: O,
        layers: Vec<LayerWeights>,
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
                extras: {
                    plan.add_f32(l.extras.value_count());
                    l.extras.map(|v| ops.vector(v))
                },
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
