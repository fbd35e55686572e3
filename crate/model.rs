//! The Llama-2 transformer on burn tensors, read top to bottom like llama2.c's `forward()`:
//! embedding, then per layer RMSNorm, attention with RoPE and a KV cache, a residual, RMSNorm,
//! SwiGLU feed-forward, a residual; last, the final norm and the classifier.
//!
//! Weights live on the device transposed to `[in, out]`, so each projection is `x.matmul(w)`.
//! The token embedding stays on the host: a step reads one row of it, not the whole table.

use burn::prelude::*;
use burn::tensor::activation::{silu, softmax};

use burn::tensor::quantization::QuantScheme;

use crate::quant::{BLOCK, Quant, QuantPlan};
use crate::weights::{HostWeights, LlamaConfig, Matrix, rope_angles};

/// A transformer block on the device.
struct Layer {
    rms_att: Tensor<1>,
    wq: Tensor<2>,
    wk: Tensor<2>,
    wv: Tensor<2>,
    wo: Tensor<2>,
    rms_ffn: Tensor<1>,
    w1: Tensor<2>,
    w2: Tensor<2>,
    w3: Tensor<2>,
}

/// The model, ready to run on one device.
pub struct Llama {
    pub config: LlamaConfig,
    device: Device,
    embedding: Vec<f32>,
    layers: Vec<Layer>,
    rms_final: Tensor<1>,
    /// `[dim, vocab]`.
    classifier: Tensor<2>,
    /// RoPE's frequency per pair; the angles are computed per pass for its positions.
    rope_freqs: Vec<f32>,
    /// What the quantization did, tensor by tensor, and the bytes that resulted.
    pub quant: QuantPlan,
}

/// Keys and values of every layer, `[n_kv_heads, capacity, head_size]`, filled up to `len`.
///
/// The cache grows with use (doubling, up to the context length) instead of holding the whole
/// context from the start: a model that claims a 2^20-token context with 512 layers would otherwise
/// ask for gigabytes before its first token.
pub struct KvCache {
    keys: Vec<Tensor<3>>,
    values: Vec<Tensor<3>>,
    /// Positions each layer's tensors can hold now.
    capacity: usize,
    /// Positions filled.
    pub len: usize,
    /// The context length: the most the cache may grow to.
    limit: usize,
    n_kv_heads: usize,
    head_size: usize,
    device: Device,
}

/// The smallest capacity a cache allocates, so that short runs grow it once or twice at most.
const MIN_CACHE_POSITIONS: usize = 64;

impl KvCache {
    /// Make room for positions up to `end` (at most the context length), copying what is filled.
    fn reserve(&mut self, end: usize) {
        if end <= self.capacity {
            return;
        }
        let capacity = end
            .max(2 * self.capacity)
            .max(MIN_CACHE_POSITIONS)
            .min(self.limit);
        let shape = [self.n_kv_heads, capacity, self.head_size];
        let filled = [0..self.n_kv_heads, 0..self.len, 0..self.head_size];
        let (device, len) = (&self.device, self.len);
        for tensors in [&mut self.keys, &mut self.values] {
            for t in tensors.iter_mut() {
                let old = std::mem::replace(t, Tensor::empty([0, 0, 0], device));
                let grown = Tensor::zeros(shape, device);
                *t = if len == 0 {
                    grown
                } else {
                    grown.slice_assign(filled.clone(), old.slice(filled.clone()))
                };
            }
        }
        self.capacity = capacity;
    }

    /// Store layer `layer`'s keys and values `[n_kv_heads, t, head_size]` at positions
    /// `start..start + t` (the caller has reserved them).
    fn write(&mut self, layer: usize, start: usize, keys: Tensor<3>, values: Tensor<3>) {
        let [n_kv, t, hs] = keys.dims();
        let at = [0..n_kv, start..start + t, 0..hs];
        // Take each cache tensor out so that it has one owner and slice_assign writes in place.
        for (cache, new) in [
            (&mut self.keys[layer], keys),
            (&mut self.values[layer], values),
        ] {
            let all = std::mem::replace(cache, Tensor::empty([0, 0, 0], &self.device));
            *cache = all.slice_assign(at.clone(), new);
        }
    }

    /// Layer `layer`'s keys and values for positions `0..end`.
    fn view(&self, layer: usize, end: usize) -> (Tensor<3>, Tensor<3>) {
        let range = [0..self.n_kv_heads, 0..end, 0..self.head_size];
        (
            self.keys[layer].clone().slice(range.clone()),
            self.values[layer].clone().slice(range),
        )
    }

    /// Forget positions from `len` on (what speculative decoding needs to reject a draft).
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Positions the cache can hold without growing.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

/// The most bytes one prefill chunk's largest intermediate (attention scores, or the feed-forward
/// activations) may take; longer prompts are run in several chunks. 64 MiB keeps a 512-token prompt
/// of the models the page offers in one chunk, and a 100,000-token prompt on a model claiming a
/// 2^20-token context from building a multi-gigabyte `t x t` mask.
const PREFILL_CHUNK_BYTES: u64 = 64 << 20;

impl Llama {
    /// Move host weights to `device`, quantizing the projection matrices with `scheme`.
    pub fn new(
        mut weights: HostWeights,
        quant: Quant,
        scheme: Option<QuantScheme>,
        device: &Device,
    ) -> Self {
        if scheme.is_some() {
            pad_hidden_to_blocks(&mut weights);
        }
        let config = weights.config.clone();
        let mut plan = QuantPlan::new(quant);
        let vector =
            |v: &[f32]| Tensor::<1>::from_data(TensorData::new(v.to_vec(), [v.len()]), device);
        let matrix = |name: &str, m: &Matrix, plan: &mut QuantPlan| -> Tensor<2> {
            let t = m.transposed();
            let tensor = Tensor::<2>::from_data(TensorData::new(t.data, [t.rows, t.cols]), device);
            plan.apply(name, tensor, scheme.as_ref())
        };
        let mut layers = Vec::with_capacity(config.n_layers);
        for (i, l) in weights.layers.iter().enumerate() {
            let name = |w: &str| format!("layers.{i}.{w}");
            layers.push(Layer {
                rms_att: vector(&l.rms_att),
                wq: matrix(&name("wq"), &l.wq, &mut plan),
                wk: matrix(&name("wk"), &l.wk, &mut plan),
                wv: matrix(&name("wv"), &l.wv, &mut plan),
                wo: matrix(&name("wo"), &l.wo, &mut plan),
                rms_ffn: vector(&l.rms_ffn),
                w1: matrix(&name("w1"), &l.w1, &mut plan),
                w2: matrix(&name("w2"), &l.w2, &mut plan),
                w3: matrix(&name("w3"), &l.w3, &mut plan),
            });
            plan.add_f32(2 * config.dim);
        }
        let classifier_weights = weights
            .classifier
            .as_ref()
            .unwrap_or(&weights.token_embedding);
        let classifier = matrix("classifier", classifier_weights, &mut plan);
        plan.add_f32(config.dim);
        Self {
            rope_freqs: config.rope_frequencies(),
            rms_final: vector(&weights.rms_final),
            embedding: weights.token_embedding.data,
            config,
            device: device.clone(),
            layers,
            classifier,
            quant: plan,
        }
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// An empty cache; it allocates as positions are written.
    pub fn new_cache(&self) -> KvCache {
        let c = &self.config;
        let empty = || Tensor::<3>::empty([0, 0, 0], &self.device);
        KvCache {
            keys: (0..c.n_layers).map(|_| empty()).collect(),
            values: (0..c.n_layers).map(|_| empty()).collect(),
            capacity: 0,
            len: 0,
            limit: c.seq_len,
            n_kv_heads: c.n_kv_heads,
            head_size: c.head_size(),
            device: self.device.clone(),
        }
    }

    /// Run `tokens` at positions `cache.len..`: the whole prompt in batched passes (prefill, in
    /// chunks when it is long) or one token (decode). Returns logits `[1, vocab]` for the last
    /// position, or `[T, vocab]` for every position when `all_logits` (used to check quantization
    /// along a known sequence).
    pub fn forward(&self, tokens: &[u32], cache: &mut KvCache, all_logits: bool) -> Tensor<2> {
        let c = &self.config;
        let end = cache.len + tokens.len();
        // The largest intermediates per chunk position: a row of attention scores per head over
        // every key, and the feed-forward's three hidden-width rows.
        // (In u64: n_heads * end can pass 2^32, wasm's usize.)
        let per_position =
            4 * (c.n_heads as u64 * end as u64).max(3 * c.hidden_dim as u64 + 4 * c.dim as u64);
        let chunk = (PREFILL_CHUNK_BYTES / per_position).max(1) as usize;
        self.forward_in_chunks(tokens, cache, all_logits, chunk)
    }

    /// [`forward`](Self::forward) with `tokens` run `chunk` at a time (tests compare chunkings).
    pub fn forward_in_chunks(
        &self,
        tokens: &[u32],
        cache: &mut KvCache,
        all_logits: bool,
        chunk: usize,
    ) -> Tensor<2> {
        let c = &self.config;
        let mut hidden = Vec::new();
        for piece in tokens.chunks(chunk.max(1)) {
            let x = self.transformer(piece, cache);
            let t = piece.len();
            hidden.push(if all_logits {
                x
            } else {
                x.slice([t - 1..t, 0..c.dim])
            });
        }
        let x = if all_logits {
            Tensor::cat(hidden, 0)
        } else {
            hidden.pop().expect("forward needs at least one token")
        };
        rms_norm(x, &self.rms_final, c.norm_eps).matmul(self.classifier.clone())
    }

    /// Every layer for `tokens` at positions `cache.len..` in one batched pass, storing their keys
    /// and values in the cache. Returns the hidden states `[T, dim]` before the final norm.
    fn transformer(&self, tokens: &[u32], cache: &mut KvCache) -> Tensor<2> {
        let c = &self.config;
        let (t, dim, hs) = (tokens.len(), c.dim, c.head_size());
        let (n_heads, n_kv) = (c.n_heads, c.n_kv_heads);
        let rep = n_heads / n_kv;
        let start = cache.len;
        let end = start + t;
        assert!(
            t > 0 && end <= c.seq_len,
            "positions {start}..{end} outside the context"
        );

        // Token embedding: copy the rows on the host.
        let mut rows = Vec::with_capacity(t * dim);
        for &id in tokens {
            rows.extend_from_slice(&self.embedding[id as usize * dim..(id as usize + 1) * dim]);
        }
        let mut x = Tensor::<2>::from_data(TensorData::new(rows, [t, dim]), &self.device);

        let (cos, sin) = rope_angles(&self.rope_freqs, start, end);
        let angles = |v: Vec<f32>| {
            Tensor::<4>::from_data(TensorData::new(v, [t, 1, hs / 2, 1]), &self.device)
        };
        let (cos, sin) = (angles(cos), angles(sin));
        cache.reserve(end);
        // Prefill needs a causal mask; a single decode token sees the whole cache anyway.
        let mask = (t > 1).then(|| causal_mask(start, t, rep, &self.device));

        for (l, layer) in self.layers.iter().enumerate() {
            // Attention: project, rotate, store in the cache, attend over positions 0..end.
            let h = rms_norm(x.clone(), &layer.rms_att, c.norm_eps);
            let q = rope(
                h.clone().matmul(layer.wq.clone()).reshape([t, n_heads, hs]),
                &cos,
                &sin,
            );
            let k = rope(
                h.clone().matmul(layer.wk.clone()).reshape([t, n_kv, hs]),
                &cos,
                &sin,
            );
            let v = h.matmul(layer.wv.clone()).reshape([t, n_kv, hs]);

            cache.write(l, start, k.swap_dims(0, 1), v.swap_dims(0, 1));
            let (keys, values) = cache.view(l, end);

            // Grouped-query attention: the `rep` query heads of one KV head become extra rows.
            let q = q.swap_dims(0, 1).reshape([n_kv, rep * t, hs]);
            let mut scores = q
                .matmul(keys.swap_dims(1, 2))
                .div_scalar((hs as f32).sqrt());
            if let Some(mask) = &mask {
                scores = scores + mask.clone();
            }
            let attention = softmax(scores, 2).matmul(values);
            let attention = attention
                .reshape([n_heads, t, hs])
                .swap_dims(0, 1)
                .reshape([t, dim]);
            x = x + attention.matmul(layer.wo.clone());

            // Feed-forward: w2(silu(w1 x) * w3 x).
            let h = rms_norm(x.clone(), &layer.rms_ffn, c.norm_eps);
            let gate = silu(h.clone().matmul(layer.w1.clone()));
            let up = h.matmul(layer.w3.clone());
            x = x + (gate * up).matmul(layer.w2.clone());
        }
        cache.len = end;
        x
    }
}

/// Quantization blocks need widths that are multiples of [`BLOCK`]. A hidden size that is not one
/// (stories260K's 172) is padded with zero units: `w1` and `w3` get zero rows, `w2` zero columns,
/// so each padded unit computes `silu(0) * 0 = 0` and adds nothing. The result is exact.
fn pad_hidden_to_blocks(weights: &mut HostWeights) {
    let hidden = weights.config.hidden_dim;
    let padded = hidden.div_ceil(BLOCK) * BLOCK;
    if padded == hidden {
        return;
    }
    for layer in &mut weights.layers {
        for w in [&mut layer.w1, &mut layer.w3] {
            w.data.resize(padded * w.cols, 0.0);
            w.rows = padded;
        }
        let w2 = &layer.w2;
        let mut data = Vec::with_capacity(w2.rows * padded);
        for row in w2.data.chunks_exact(hidden) {
            data.extend_from_slice(row);
            data.extend(std::iter::repeat_n(0.0, padded - hidden));
        }
        layer.w2 = Matrix::new(w2.rows, padded, data);
    }
    weights.config.hidden_dim = padded;
}

/// `x * weight / sqrt(mean(x^2) + eps)`, per row.
fn rms_norm(x: Tensor<2>, weight: &Tensor<1>, eps: f32) -> Tensor<2> {
    let inv_rms = (x.clone() * x.clone())
        .mean_dim(1)
        .add_scalar(eps)
        .sqrt()
        .recip();
    x * inv_rms * weight.clone().unsqueeze::<2>()
}

/// Rotate adjacent pairs (2i, 2i+1) of each head by the position's angle, as llama2.c does.
fn rope(x: Tensor<3>, cos: &Tensor<4>, sin: &Tensor<4>) -> Tensor<3> {
    let [t, heads, hs] = x.dims();
    let pairs = x.reshape([t, heads, hs / 2, 2]);
    let even = pairs.clone().slice([0..t, 0..heads, 0..hs / 2, 0..1]);
    let odd = pairs.slice([0..t, 0..heads, 0..hs / 2, 1..2]);
    let rotated_even = even.clone() * cos.clone() - odd.clone() * sin.clone();
    let rotated_odd = even * sin.clone() + odd * cos.clone();
    Tensor::cat(vec![rotated_even, rotated_odd], 3).reshape([t, heads, hs])
}

/// Additive mask `[1, rep * t, start + t]`: row `r * t + i` (query position `start + i`) may not
/// see keys after its own position.
fn causal_mask(start: usize, t: usize, rep: usize, device: &Device) -> Tensor<3> {
    let keys = start + t;
    let mut mask = Vec::with_capacity(rep * t * keys);
    for _ in 0..rep {
        for i in 0..t {
            mask.extend((0..keys).map(|j| if j <= start + i { 0.0 } else { -1e30 }));
        }
    }
    Tensor::<3>::from_data(TensorData::new(mask, [1, rep * t, keys]), device)
}
