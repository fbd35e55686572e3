//! The forward pass's operations on the CPU: host arrays and the kernels of `cpu/`.
//!
//! Each operation is one loop over plain `Vec<f32>` rows: RMSNorm, RoPE, SwiGLU and the residual
//! are fused loops, the projections stream each weight row once for every activation row (f32, or
//! the block forms of `cpu/matmul.rs` against int8 activations), and attention of a query walks its head's cache
//! rows directly. burn's CPU backend paid an allocation and a dispatch for every tensor op, which
//! a 288-wide decode step cannot hide: in the page's worker it decoded stories15M f32 at 180-190
//! tok/s where llama.cpp in wasm (wllama) reached 213-233, and this code 247-295 (one run, rounds
//! interleaved, this project's 2-core AMD EPYC).

use std::cell::OnceCell;
use std::ops::Range;

use crate::cpu::attention::{self, KEY_BLOCK};
use crate::cpu::isa::Isa;
use crate::cpu::matmul;
use crate::cpu::matrix::{HostLinear, HostMatrix};
use crate::cpu::quantize::quantize_activations;
use crate::cpu::threads::Threads;
use crate::cpu::tile::{Q8Rows, chunk_rows};
use crate::formats::Activations;
use crate::model::forward;
use crate::model::ops::{Angles, Heads, Kernels, LayerAt, LayerOf, LogitRows, Ops, Span};
use crate::model::phases::{Phase, PhaseClock};
use crate::model::{LayerWeights, LlamaConfig, Logits, Matrix, QuantPlan};

pub struct HostOps {
    isa: Isa,
    heads: Heads,
    threads: Threads,
    /// Each operation's time by kind, while on (`bench --profile`, the page's phase bar).
    pub phases: PhaseClock,
}

impl HostOps {
    pub fn new(isa: Isa, heads: Heads, threads: Threads) -> Self {
        Self {
            isa,
            heads,
            threads,
            phases: PhaseClock::default(),
        }
    }

    /// `f(first row, rows)` over `data`'s rows of `width`: on the threads, whole rows a part,
    /// where there are enough of them (a prompt's), else all at once on this thread.
    /// (`f` is a trait object: one copy of the loop for every step that uses it, which the page's
    /// download notices.)
    fn for_rows(&self, data: &mut [f32], width: usize, f: &(dyn Fn(usize, &mut [f32]) + Sync)) {
        let (t, n) = (data.len() / width.max(1), self.threads.count());
        if Threads::MANY && n > 1 && t >= MIN_ACTIVATION_ROWS_TO_SPLIT * n {
            let part = t.div_ceil(n);
            self.threads
                .for_pieces(data, part * width, |p, piece| f(p * part, piece));
        } else {
            f(0, data);
        }
    }
}

/// The fewest rows of a product a thread takes: a smaller matrix runs on one thread.
const MIN_ROWS_A_THREAD: usize = 32;

/// The fewest activation rows a thread for a product to be split by activation rows (a prompt's):
/// fewer (batched decode) are split by weight rows.
const MIN_ACTIVATION_ROWS_TO_SPLIT: usize = 32;

/// The parts each thread takes, on average, of a product split by activation rows.
const PARTS_A_THREAD: usize = 2;

/// The least attention work (multiply-adds of scores and sums) worth splitting over threads.
const MIN_ATTENTION_WORK: usize = 1 << 17;

/// `t` rows of `width` values, row-major, and their int8 blocks once a quantized projection has
/// read them: q, k and v read the same normed rows, as do the feed-forward's gate and up, and
/// each quantized them again (quantizing took a tenth of a q8 decode step in the page's worker,
/// in a V8 profile, before it was vectorized and done once). One form for each way of rounding
/// ([`Activations`]): a K-quant matrix reads the rows as Q8_K, where the others read Q8_0.
#[derive(Clone)]
pub struct Rows {
    t: usize,
    width: usize,
    data: Vec<f32>,
    quantized: [OnceCell<Q8Rows>; 2],
}

impl Rows {
    fn new(t: usize, width: usize, data: Vec<f32>) -> Self {
        Rows {
            t,
            width,
            data,
            quantized: Default::default(),
        }
    }

    /// The values, to change in place: their int8 blocks, if made, no longer hold.
    fn values_mut(&mut self) -> &mut [f32] {
        self.quantized = Default::default();
        &mut self.data
    }

    /// The rows as int8 blocks rounded as `activations` says, made on first use.
    fn quantized(&self, isa: Isa, activations: Activations) -> &Q8Rows {
        self.quantized[activations as usize].get_or_init(|| {
            let mut q = Q8Rows::default();
            quantize_activations(isa, activations, &self.data, self.width, &mut q);
            q
        })
    }
}

/// The pass's spans, and RoPE's angles for their positions.
pub struct HostPass {
    spans: Vec<Span>,
    angles: Angles,
}

/// Per layer, keys and values `[capacity, n_kv_heads * head_size]` (position-major, as llama2.c).
pub struct HostCache {
    keys: Vec<Vec<f32>>,
    values: Vec<Vec<f32>>,
}

impl Ops for HostOps {
    type Act = Rows;
    type Vector = Vec<f32>;
    type Linear = HostLinear;
    type Layer = LayerOf<HostOps>;
    type Pass = HostPass;
    type Cache = HostCache;

    fn layer(&self, index: usize, weights: LayerWeights, plan: &mut QuantPlan) -> Self::Layer {
        LayerOf::new(self, index, weights, plan)
    }

    fn vector(&self, v: &[f32]) -> Vec<f32> {
        v.to_vec()
    }

    fn linear(&self, name: &str, m: Matrix, plan: &mut QuantPlan) -> HostLinear {
        let (rows, cols) = (m.rows, m.cols);
        let stored = HostMatrix::from(plan.apply(name, m));
        let counted = stored.bytes();
        let weights = stored.packed_for(self.isa, rows, cols);
        // What is held: packing pads the last group of 8 rows and (x86-64) keeps f16 scales in 2
        // bytes (`cpu::packed`).
        plan.device_bytes = plan.device_bytes - counted + weights.bytes();
        HostLinear {
            rows,
            cols,
            weights,
        }
    }

    fn linear_row(&self, w: &HostLinear, r: usize, out: &mut Vec<f32>) -> bool {
        w.weights.extend_row(r, w.cols, out);
        true
    }

    fn new_cache(&self, layers: usize) -> HostCache {
        HostCache {
            keys: vec![Vec::new(); layers],
            values: vec![Vec::new(); layers],
        }
    }

    fn grow(&self, cache: &mut HostCache, capacity: usize, filled: usize) {
        let kv_dim = self.heads.n_kv_heads * self.heads.head_size;
        for rows in cache.keys.iter_mut().chain(cache.values.iter_mut()) {
            rows.truncate(filled * kv_dim);
            rows.reserve_exact(capacity * kv_dim - rows.len());
            rows.resize(capacity * kv_dim, 0.0);
        }
    }

    fn embed(&self, rows: Vec<f32>, t: usize) -> Rows {
        Rows::new(t, rows.len() / t, rows)
    }

    fn pass(&self, spans: &[Span], angles: Angles, _: &mut [&mut HostCache]) -> HostPass {
        HostPass {
            spans: spans.to_vec(),
            angles,
        }
    }

    fn attention_half(
        &self,
        x: Rows,
        layer: &Self::Layer,
        at: LayerAt,
        caches: &mut [&mut HostCache],
        pass: &HostPass,
        config: &LlamaConfig,
    ) -> Rows {
        forward::attention_half(self, x, layer, at, caches, pass, config)
    }

    fn feed_forward_half(&self, x: Rows, layer: &Self::Layer, config: &LlamaConfig) -> Rows {
        forward::feed_forward_half(self, x, layer, config)
    }

    fn classify(
        &self,
        x: Rows,
        pass: &HostPass,
        rows: LogitRows,
        _first: usize,
        norm: &Vec<f32>,
        classifier: &HostLinear,
        eps: f32,
    ) -> Logits {
        self.phases.time(Phase::Classifier, || {
            forward::classify(self, x, pass, rows, norm, classifier, eps)
        })
    }
}

impl Kernels for HostOps {
    fn rms_norm(&self, x: &Rows, weight: &Vec<f32>, eps: f32) -> Rows {
        self.phases.time(Phase::Norms, || {
            let mut data = x.data.clone();
            self.for_rows(&mut data, x.width, &|_, rows| {
                rms_norm_rows(self.isa, rows, weight, eps)
            });
            Rows::new(x.t, x.width, data)
        })
    }

    fn head_rms_norm(&self, mut x: Rows, weight: &Vec<f32>, eps: f32) -> Rows {
        self.phases.time(Phase::Norms, || {
            rms_norm_rows(self.isa, x.values_mut(), weight, eps);
            x
        })
    }

    /// Split over the threads by activation rows where there are many (a prompt's), else by
    /// weight rows (whole packed groups, at least `MIN_ROWS_A_THREAD` a thread): at batch 1 each
    /// part writes its own piece of the output; a batch's parts are made apart and put in place
    /// after.
    fn matmul(&self, x: &Rows, w: &HostLinear) -> Rows {
        self.phases.time(Phase::Projections, || {
            assert_eq!(x.width, w.cols, "a projection's input width");
            let none = Q8Rows::default();
            let f32_weights = matches!(w.weights, HostMatrix::F32(_));
            let activations = w.weights.activations();
            let (rows, cols, t, xs) = (w.rows, w.cols, x.t, &x.data);
            let weights = w.weights.rows();
            let mut data = vec![0.0; t * rows];
            let threads = self.threads.count();
            // (`Threads::MANY`: the page's builds without threads leave this code out.)
            let by_threads =
                Threads::MANY && threads > 1 && t >= MIN_ACTIVATION_ROWS_TO_SPLIT * threads;
            // Natively a prompt's rows go in chunks that stay in L2 (`chunk_rows`), each against every
            // weight; in the page (not measured there) the rows go whole, and this code is left out.
            let chunk = if cfg!(target_arch = "wasm32") {
                usize::MAX
            } else {
                chunk_rows(if f32_weights { 4 * cols } else { cols }, 8)
            };
            if by_threads || t > chunk {
                // A prompt: each thread takes whole activation rows against every weight row, its
                // piece of the output contiguous (no copy after), a few parts a thread so that one
                // that starts late or runs slower is made up for. Every thread reads every weight,
                // which a prompt's products (compute-bound, reading each weight once per chunk of
                // rows) do not notice; batched decode keeps the split by weight rows, where reading
                // the weights is the time. Each part quantizes its own rows (q, k and v each again: a
                // thread's share of the work, rather than all of it on one thread before the product).
                // Measured (SmolLM2, 530-token prompt, 2 threads, prefill tok/s, one run each, with
                // the element-wise steps split by rows too): Q8_0 729 -> 928, F32 418 -> 502.
                let part = if by_threads {
                    t.div_ceil(PARTS_A_THREAD * threads).next_multiple_of(8)
                } else {
                    t
                }
                .min(chunk);
                self.threads.for_pieces(&mut data, part * rows, |p, out| {
                    let n = out.len() / rows;
                    let xs = &xs[p * part * cols..(p * part + n) * cols];
                    let mut xq = Q8Rows::default();
                    if !f32_weights {
                        quantize_activations(self.isa, activations, xs, cols, &mut xq);
                    }
                    matmul::matmul(self.isa, weights, rows, cols, xs, &xq, n, out);
                });
                return Rows::new(t, rows, data);
            }
            let quantized = if f32_weights {
                &none
            } else {
                x.quantized(self.isa, activations)
            };
            let product = |range: Range<usize>, out: &mut [f32]| {
                let weights = weights.range(range.clone(), cols);
                matmul::matmul(self.isa, weights, range.len(), cols, xs, quantized, t, out);
            };
            let size = self
                .threads
                .part_size(rows, weights.part_rows(), MIN_ROWS_A_THREAD);
            if size >= rows {
                product(0..rows, &mut data);
            } else if t == 1 {
                self.threads.for_pieces(&mut data, size, |p, out| {
                    product(p * size..p * size + out.len(), out)
                });
            } else {
                let pieces = self.threads.map(rows.div_ceil(size), |p| {
                    let range = p * size..((p + 1) * size).min(rows);
                    let mut out = vec![0.0; t * range.len()];
                    product(range, &mut out);
                    out
                });
                for (p, piece) in pieces.iter().enumerate() {
                    let n = piece.len() / t;
                    for (i, piece_row) in piece.chunks_exact(n).enumerate() {
                        data[i * rows + p * size..][..n].copy_from_slice(piece_row);
                    }
                }
            }
            Rows::new(t, rows, data)
        })
    }

    fn rope(&self, mut q: Rows, mut k: Rows, pass: &HostPass, local: bool) -> (Rows, Rows) {
        self.phases.time(Phase::Attention, || {
            let half = self.heads.head_size / 2;
            let (cos, sin) = match (&pass.angles.local, local) {
                (Some((cos, sin)), true) => (cos, sin),
                _ => (&pass.angles.cos, &pass.angles.sin),
            };
            for x in [&mut q, &mut k] {
                let width = x.width;
                for (i, row) in x.values_mut().chunks_exact_mut(width).enumerate() {
                    let (cos, sin) = (
                        &cos[i * half..(i + 1) * half],
                        &sin[i * half..(i + 1) * half],
                    );
                    for head in row.chunks_exact_mut(2 * half) {
                        for (p, pair) in head.chunks_exact_mut(2).enumerate() {
                            let (even, odd) = (pair[0], pair[1]);
                            pair[0] = even * cos[p] - odd * sin[p];
                            pair[1] = even * sin[p] + odd * cos[p];
                        }
                    }
                }
            }
            (q, k)
        })
    }

    fn attention(
        &self,
        q: Rows,
        k: Rows,
        v: Rows,
        caches: &mut [&mut HostCache],
        layer: usize,
        pass: &HostPass,
        window: Option<usize>,
    ) -> Rows {
        self.phases.time(Phase::Attention, || {
            let Heads {
                n_heads,
                n_kv_heads,
                head_size: hs,
            } = self.heads;
            let kv_dim = n_kv_heads * hs;
            let rep = n_heads / n_kv_heads;
            let scale = 1.0 / (hs as f32).sqrt();
            let mut out = vec![0.0; q.t * n_heads * hs];
            let mut row = 0;
            for (span, cache) in pass.spans.iter().zip(caches.iter_mut()) {
                let (start, t) = (span.start, span.len);
                let (keys, values) = (&mut cache.keys[layer], &mut cache.values[layer]);
                let new = row * kv_dim..(row + t) * kv_dim;
                keys[start * kv_dim..(start + t) * kv_dim].copy_from_slice(&k.data[new.clone()]);
                values[start * kv_dim..(start + t) * kv_dim].copy_from_slice(&v.data[new]);
                let (keys, values) = (&keys[..], &values[..]);
                // Query `i` of the span sees keys `first..seen`: every earlier position, or the
                // window's last ones.
                let sees = |i: usize| {
                    let seen = start + i + 1;
                    (window.map_or(0, |w| seen.saturating_sub(w)), seen)
                };
                // The output's rows of `hs` are units, unit `u` query `u / n_heads` of head
                // `u % n_heads`; a part of the units goes key head by key head and, for each, key
                // block by key block through every unit that sees the block (see `Running`).
                // Split over the threads by units where the span's work is worth it. A prompt's
                // later queries attend over more keys, so its parts are a quarter of a thread's
                // share, taken as threads free up (measured, SmolLM2 Q8_0, 900-token prompt, 2
                // threads, 3 interleaved rounds: prefill 316 / 404 / 358 -> 406 / 442 / 402 tok/s;
                // decode, one query, lost a little with them: 77 / 94 / 70 -> 74 / 84 / 70, so it
                // keeps a part a thread).
                let work = t * n_heads * (start + t) * hs;
                let units = match self.threads.part_size(t * n_heads, 1, 1) {
                    _ if work < MIN_ATTENTION_WORK => t * n_heads,
                    share if t > 1 => share.div_ceil(4),
                    share => share,
                };
                let span_out = &mut out[row * n_heads * hs..(row + t) * n_heads * hs];
                self.threads.for_pieces(span_out, units * hs, |p, piece| {
                    let first_unit = p * units;
                    let mut running = vec![attention::Running::default(); piece.len() / hs];
                    let mut part = vec![0.0; hs];
                    for g in 0..n_kv_heads {
                        let mine: Vec<usize> = (0..running.len())
                            .filter(|u| (first_unit + u) % n_heads / rep == g)
                            .collect();
                        let (Some(&lo), Some(&hi)) = (mine.first(), mine.last()) else {
                            continue;
                        };
                        let (first, _) = sees((first_unit + lo) / n_heads);
                        let (_, last) = sees((first_unit + hi) / n_heads);
                        let head = attention::HeadCache {
                            keys: &keys[g * hs..],
                            values: &values[g * hs..],
                            stride: kv_dim,
                        };
                        for block in (first / KEY_BLOCK)..last.div_ceil(KEY_BLOCK) {
                            let block = block * KEY_BLOCK..(block + 1) * KEY_BLOCK;
                            for &u in &mine {
                                let (i, h) =
                                    ((first_unit + u) / n_heads, (first_unit + u) % n_heads);
                                let (first, seen) = sees(i);
                                let positions = block.start.max(first)..block.end.min(seen);
                                if positions.is_empty() {
                                    continue;
                                }
                                let query = &q.data[(row + i) * q.width + h * hs..][..hs];
                                let o = &mut piece[u * hs..][..hs];
                                running[u]
                                    .add(self.isa, query, head, positions, scale, o, &mut part);
                            }
                        }
                    }
                    for (running, o) in running.iter().zip(piece.chunks_exact_mut(hs)) {
                        running.finish(o);
                    }
                });
                row += t;
            }
            Rows::new(q.t, n_heads * hs, out)
        })
    }

    fn add(&self, mut x: Rows, y: Rows) -> Rows {
        self.phases.time(Phase::Norms, || {
            let width = x.width;
            self.for_rows(x.values_mut(), width, &|first, rows| {
                for (a, b) in rows.iter_mut().zip(&y.data[first * width..]) {
                    *a += b;
                }
            });
            x
        })
    }

    fn add_bias(&self, mut x: Rows, bias: &Vec<f32>) -> Rows {
        self.phases.time(Phase::Norms, || {
            for row in x.values_mut().chunks_exact_mut(bias.len()) {
                for (a, b) in row.iter_mut().zip(bias) {
                    *a += b;
                }
            }
            x
        })
    }

    fn swiglu(&self, mut gate: Rows, up: Rows) -> Rows {
        self.phases.time(Phase::Norms, || {
            let width = gate.width;
            let isa = self.isa;
            self.for_rows(gate.values_mut(), width, &|first, rows| {
                silu_mul(isa, rows, &up.data[first * width..][..rows.len()]);
            });
            gate
        })
    }

    fn geglu(&self, mut gate: Rows, up: Rows) -> Rows {
        self.phases.time(Phase::Norms, || {
            let gelu = gelu_table();
            let width = gate.width;
            self.for_rows(gate.values_mut(), width, &|first, rows| {
                for (g, u) in rows.iter_mut().zip(&up.data[first * width..]) {
                    *g = if *g <= -10.0 {
                        0.0
                    } else if *g >= 10.0 {
                        *g * u
                    } else {
                        gelu[half::f16::from_f32(*g).to_bits() as usize] * u
                    };
                }
            });
            gate
        })
    }

    fn last_rows(&self, x: Rows, pass: &HostPass) -> Rows {
        // A decode step's rows are all last rows already.
        if pass.spans.iter().all(|s| s.len == 1) {
            return x;
        }
        let mut data = Vec::with_capacity(pass.spans.len() * x.width);
        let mut end = 0;
        for span in &pass.spans {
            end += span.len;
            data.extend_from_slice(&x.data[(end - 1) * x.width..end * x.width]);
        }
        Rows::new(pass.spans.len(), x.width, data)
    }

    fn logits(&self, x: Rows) -> Logits {
        Logits::Host {
            vocab: x.width,
            data: x.data,
        }
    }
}

/// `gate = silu(gate) * up` (`silu(g) = g / (1 + exp(-g))`), element by element: AVX2's 8 lanes
/// at a time (`avx2::silu_mul`, within a few units in the last place of libm's `expf`; each
/// value's bits the same wherever it falls in a row), elsewhere one by one. Measured: libm's
/// `expf`, one call a value, and the loop around it were 5.0% of SmolLM2 Q8_0's profile at 8
/// users; `avx2::silu_mul` 1.4%.
pub fn silu_mul(isa: Isa, gate: &mut [f32], up: &[f32]) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: both are only produced after detecting AVX2 and FMA.
        Isa::Avx2 | Isa::Avx512Vnni => unsafe { crate::cpu::avx2::silu_mul(gate, up) },
        _ => {
            for (g, u) in gate.iter_mut().zip(up) {
                *g = *g / (1.0 + (-*g).exp()) * u;
            }
        }
    }
}

/// RMSNorm of each `weight.len()`-wide row of `data`, in place: a model row, or one head of it.
fn rms_norm_rows(isa: Isa, data: &mut [f32], weight: &[f32], eps: f32) {
    let width = weight.len();
    for row in data.chunks_exact_mut(width) {
        let mean_square = attention::dot(isa, row, row) / width as f32;
        let inv_rms = 1.0 / (mean_square + eps).sqrt();
        row.iter_mut()
            .zip(weight)
            .for_each(|(v, w)| *v = *v * inv_rms * w);
    }
}

/// GELU (tanh form) of every f16 value, rounded to f16, as llama.cpp's CPU backend computes it
/// (ggml's `GGML_GELU_FP16` table: the input rounded to f16, the result stored as f16).
fn gelu_table() -> &'static [f32] {
    static TABLE: std::sync::OnceLock<Vec<f32>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        const SQRT_2_OVER_PI: f32 = 0.797_884_6;
        (0..=u16::MAX)
            .map(|bits| {
                let x = half::f16::from_bits(bits).to_f32();
                let y = 0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + 0.044715 * x * x)).tanh());
                half::f16::from_f32(y).to_f32()
            })
            .collect()
    })
}
