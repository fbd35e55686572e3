//! What the forward pass asks of a backend: the [`Ops`] trait, at the granularity a GPU can fuse
//! (a layer's two halves, and the classifier), and the finer [`Kernels`] that the CPU composes
//! them from (`model/forward.rs` writes each half once over them).

use crate::model::config::LlamaConfig;
use crate::model::logits::Logits;
use crate::model::quant::QuantPlan;
use crate::model::weights::{Extras, LayerWeights, Matrix};

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

/// RoPE's angles for a pass's rows, `[t, head_size / 2]` each: cos and sin at every layer's base,
/// and at the local layers' own base where they have one (Gemma 3).
pub struct Angles {
    pub cos: Vec<f32>,
    pub sin: Vec<f32>,
    pub local: Option<(Vec<f32>, Vec<f32>)>,
}

/// Where a layer sits and how it attends.
#[derive(Debug, Clone, Copy)]
pub struct LayerAt {
    pub index: usize,
    /// The positions a query sees, its own the last (`None`: every earlier one).
    pub window: Option<usize>,
    /// Whether it rotates by the local base's angles ([`Angles::local`]).
    pub local: bool,
}

/// Which rows of a pass the classifier reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogitRows {
    /// The last row of each span: the next token of each sequence.
    Last,
    /// Every row (a teacher-forced check, a draft's verification).
    All,
}

/// A transformer block's weights as [`Kernels`] hold them, one operand each.
pub struct LayerOf<O: Ops> {
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

impl<O: Ops> LayerOf<O> {
    /// Layer `index`'s weights in `ops`' form, each matrix through [`Ops::linear`] (consuming its
    /// f32 copy as it goes), the norms and biases counted as the f32 they are.
    pub fn new(ops: &O, index: usize, l: LayerWeights, plan: &mut QuantPlan) -> Self {
        let name = |w: &str| format!("layers.{index}.{w}");
        let mut linear = |w: &str, m: Matrix| ops.linear(&name(w), m, plan);
        let layer = LayerOf {
            wq: linear("wq", l.wq),
            wk: linear("wk", l.wk),
            wv: linear("wv", l.wv),
            wo: linear("wo", l.wo),
            w1: linear("w1", l.w1),
            w2: linear("w2", l.w2),
            w3: linear("w3", l.w3),
            rms_att: ops.vector(&l.rms_att),
            rms_ffn: ops.vector(&l.rms_ffn),
            extras: l.extras.map(|v| ops.vector(v)),
        };
        plan.add_f32(l.rms_att.len() + l.rms_ffn.len() + l.extras.value_count());
        layer
    }
}

/// What the forward pass asks of a backend. `Act` is a batch of activations `[t, width]`: the
/// rows of every span of the pass, one after another.
///
/// A layer is two calls, [`attention_half`](Ops::attention_half) and
/// [`feed_forward_half`](Ops::feed_forward_half): `model/forward.rs` writes what each computes,
/// once, over [`Kernels`]; the CPU runs those definitions as written, the GPU (`gpu/`) runs each
/// half as two fused dispatches.
pub trait Ops {
    type Act;
    /// A norm's weight.
    type Vector;
    /// A projection `y = W x` with `W` of `[out, in]`, in whatever form the backend stores.
    type Linear;
    /// One transformer block's weights.
    type Layer;
    /// What one pass needs beyond the weights: its spans, RoPE's angles for its positions.
    type Pass;
    /// Every layer's keys and values of one sequence.
    type Cache;

    fn vector(&self, v: &[f32]) -> Self::Vector;
    fn linear(&self, name: &str, m: Matrix, plan: &mut QuantPlan) -> Self::Linear;
    /// Layer `index`'s weights in this backend's form; their bytes are counted in `plan`.
    fn layer(&self, index: usize, weights: LayerWeights, plan: &mut QuantPlan) -> Self::Layer;
    /// Append row `r` of a projection's weights as f32 to `out` and say `true`, where this backend
    /// holds them on the host (the CPU's: a tied classifier is then also the token embedding);
    /// `false`, appending nothing, where it does not (the GPU's).
    fn linear_row(&self, w: &Self::Linear, r: usize, out: &mut Vec<f32>) -> bool;
    fn new_cache(&self, layers: usize) -> Self::Cache;
    /// Make the cache hold `capacity` positions, keeping the first `filled`.
    fn grow(&self, cache: &mut Self::Cache, capacity: usize, filled: usize);
    /// The most rows one pass whose longest sequence ends at position `end` may hold on this
    /// backend (the GPU bounds each workgroup's serial work: `gpu/ops.rs`).
    fn max_pass_rows(&self, _end: usize) -> usize {
        usize::MAX
    }

    /// `t` embedding rows `[t, dim]` as activations.
    fn embed(&self, rows: Vec<f32>, t: usize) -> Self::Act;
    /// Prepare the spans' positions; `caches[i]` is span `i`'s (a backend that holds every
    /// sequence's cache in one pool learns here where each one's lies).
    fn pass(&self, spans: &[Span], angles: Angles, caches: &mut [&mut Self::Cache]) -> Self::Pass;
    /// `x + attention(norm(x))`: the layer's first half ([`attention_half`](crate::model::forward::attention_half)),
    /// storing each span's keys and values in its cache (`caches[i]` for span `i`).
    fn attention_half(
        &self,
        x: Self::Act,
        layer: &Self::Layer,
        at: LayerAt,
        caches: &mut [&mut Self::Cache],
        pass: &Self::Pass,
        config: &LlamaConfig,
    ) -> Self::Act;
    /// `x + feed_forward(norm(x))`: the layer's second half ([`feed_forward_half`](crate::model::forward::feed_forward_half)).
    fn feed_forward_half(
        &self,
        x: Self::Act,
        layer: &Self::Layer,
        config: &LlamaConfig,
    ) -> Self::Act;
    /// The final norm and the classifier over `rows` of the pass. `first`: the logit rows this
    /// forward call made before (its earlier chunks'), so a backend that keeps them in one buffer
    /// puts these after them.
    #[allow(clippy::too_many_arguments)]
    fn classify(
        &self,
        x: Self::Act,
        pass: &Self::Pass,
        rows: LogitRows,
        first: usize,
        norm: &Self::Vector,
        classifier: &Self::Linear,
        eps: f32,
    ) -> Logits;
}

/// The operations each half is written in (`model/forward.rs`), one at a time: the CPU's.
pub trait Kernels: Ops<Layer = LayerOf<Self>> + Sized {
    fn rms_norm(&self, x: &Self::Act, weight: &Self::Vector, eps: f32) -> Self::Act;
    /// RMSNorm of each head of `x` `[t, heads * head_size]` on its own, with one `[head_size]`
    /// weight for every head (Gemma's q and k norms).
    fn head_rms_norm(&self, x: Self::Act, weight: &Self::Vector, eps: f32) -> Self::Act;
    fn matmul(&self, x: &Self::Act, w: &Self::Linear) -> Self::Act;
    /// Rotate adjacent pairs (2i, 2i+1) of each head of the queries `q` and the keys `k`
    /// (`[t, heads * head_size]`, their own number of heads each) by the position's angle (the
    /// local base's with `local`), as llama2.c does.
    fn rope(
        &self,
        q: Self::Act,
        k: Self::Act,
        pass: &Self::Pass,
        local: bool,
    ) -> (Self::Act, Self::Act);
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
    /// `silu(gate) * up`.
    fn swiglu(&self, gate: Self::Act, up: Self::Act) -> Self::Act;
    /// `gelu(gate) * up`, GELU in its tanh form (Gemma).
    fn geglu(&self, gate: Self::Act, up: Self::Act) -> Self::Act;
    /// The last row of each of the pass's spans, one after another.
    fn last_rows(&self, x: Self::Act, pass: &Self::Pass) -> Self::Act;
    /// The activations as logits, for sampling.
    fn logits(&self, x: Self::Act) -> Logits;
}
