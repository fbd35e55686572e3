//! What the forward pass asks of a backend: the [`Ops`] trait, and the shapes its operations
//! take. `cpu/` and `gpu/` implement it.

use std::ops::Range;

use crate::model::logits::Logits;
use crate::model::quant::QuantPlan;
use crate::model::weights::Matrix;

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
pub trait Ops {
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
    /// Append row `r` of a projection's weights as f32 to `out` and say `true`, where this backend
    /// holds them on the host (the CPU's: a tied classifier is then also the token embedding);
    /// `false`, appending nothing, where it does not (the GPU's).
    fn linear_row(&self, w: &Self::Linear, r: usize, out: &mut Vec<f32>) -> bool;
    fn new_cache(&self, layers: usize) -> Self::Cache;
    /// Make the cache hold `capacity` positions, keeping the first `filled`.
    fn grow(&self, cache: &mut Self::Cache, capacity: usize, filled: usize);

    /// `t` embedding rows `[t, dim]` as activations.
    fn embed(&self, rows: Vec<f32>, t: usize) -> Self::Act;
    /// Prepare the spans' positions (cos and sin are `[t, head_size / 2]`, every span's rows).
    fn pass(&self, spans: &[Span], cos: Vec<f32>, sin: Vec<f32>) -> Self::Pass;
    fn rms_norm(&self, x: &Self::Act, weight: &Self::Vector, eps: f32) -> Self::Act;
    /// RMSNorm of each head of `x` `[t, heads * head_size]` on its own, with one `[head_size]`
    /// weight for every head (Gemma's q and k norms).
    fn head_rms_norm(&self, x: Self::Act, weight: &Self::Vector, eps: f32) -> Self::Act;
    fn matmul(&self, x: &Self::Act, w: &Self::Linear) -> Self::Act;
    /// Rotate adjacent pairs (2i, 2i+1) of each head of the queries `q` and the keys `k`
    /// (`[t, heads * head_size]`, their own number of heads each) by the position's angle, as
    /// llama2.c does. Both at once: one dispatch on the GPU.
    fn rope(&self, q: Self::Act, k: Self::Act, pass: &Self::Pass) -> (Self::Act, Self::Act);
    /// Store each span's `k` and `v` in `layer` of its own cache (`caches[i]` for span `i`), then
    /// attend: each query row over its sequence's keys `0..=` its position (the last `window` of
    /// them, with a window), query heads grouped onto KV heads. Returns `[t, n_heads * head_size]`.
    #[allow(clippy::too_many_arguments)]
    fn attention(
        &self,
        q: Self::Act,
        k: Self::Act,
        v: Self::Act,
        caches: &mut [&mut Self::Cache],
        layer: usize,
        pass: &Self::Pass,
        window: Option<usize>,
    ) -> Self::Act;
    fn add(&self, x: Self::Act, y: Self::Act) -> Self::Act;
    /// `bias` `[width]` added to every row of `x` `[t, width]` (Qwen2's q, k and v).
    fn add_bias(&self, x: Self::Act, bias: &Self::Vector) -> Self::Act;
    /// `x + matmul(h, w)`: a residual through a projection. The GPU adds as the projection
    /// writes its output, one dispatch where two would be.
    fn matmul_add(&self, x: Self::Act, h: &Self::Act, w: &Self::Linear) -> Self::Act {
        let y = self.matmul(h, w);
        self.add(x, y)
    }
    /// `silu(gate) * up`.
    fn swiglu(&self, gate: Self::Act, up: Self::Act) -> Self::Act;
    /// `gelu(gate) * up`, GELU in its tanh form (Gemma).
    fn geglu(&self, gate: Self::Act, up: Self::Act) -> Self::Act;
    fn rows(&self, x: Self::Act, rows: Range<usize>) -> Self::Act;
    fn cat(&self, parts: Vec<Self::Act>) -> Self::Act;
    /// The activations as logits, for sampling.
    fn logits(&self, x: Self::Act) -> Logits;
}
