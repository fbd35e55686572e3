//! The forward pass's operations on the GPU ([`DeviceOps`]): each half of a layer two dispatches,
//! the classifier one (a part) and the pick one, recorded into the step's plan (`plan.rs`) and
//! submitted once, when the pick's result is read back.
//!
//! | dispatch | kernel | what |
//! | --- | --- | --- |
//! | 1 | `attention.wgsl` | norm, q/k/v (+ biases, head norms), RoPE, KV store, attention |
//! | 2 | `project.wgsl` | `wo`, (Gemma: norm,) residual |
//! | 3 | `feed_forward.wgsl` | norm, gate and up, SiLU or GELU |
//! | 4 | `project.wgsl` | `w2`, (Gemma: norm,) residual |
//! | last but one | `classify.wgsl` | final norm, classifier (a dispatch a part) |
//! | last | `pick.wgsl` | the greedy pick (only where every row is greedy) |

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use cubecl::server::Handle;

use crate::error::Error;
use crate::gpu::device::{Counts, Gpu, Stream};
use crate::gpu::layer::{self, Packed};
use crate::gpu::plan::{Extra, LayerBuffers, Part, Plan};
use crate::model::logits::{DeviceLogits, ReadBack};
use crate::model::ops::{Angles, LayerAt, LogitRows, Ops, Span};
use crate::model::phases::{GPU_TIMED_EVERY, PhaseClock};
use crate::model::{LayerWeights, LlamaConfig, Logits, Matrix, QuantPlan};

/// The most rows a prefill pass takes on the GPU.
const PASS_ROWS: usize = 64;

/// Loop iterations one invocation of the attention kernel may run (estimated by
/// [`loop_iterations`]).
const LOOP_BUDGET: usize = 40_000;

/// Rows a pass whose longest sequence ends at `end` takes on the GPU: at most [`PASS_ROWS`], and
/// fewer where the attention kernel's serial work would pass [`LOOP_BUDGET`].
///
/// The attention kernel gives each head of a span one workgroup, which takes the span's rows one
/// after another, so a long pass is long serial work in few workgroups. And Mesa's lavapipe, which
/// the tests run on, gives wrong values (not an error) once one invocation has run about 65,000 loop
/// iterations in all. Measured on a 2-layer synthetic model (head size 16): one pass of 400 rows
/// went wrong from row 301 and one of 320 from row 307, the same with two busy-looping processes
/// beside it (so iterations, not time: the figures fit llvmpipe's loop limiter,
/// `LP_MAX_TGSI_LOOP_ITERATIONS`, 65,535); 64-row passes at 2,300 positions were off by 0.003 in
/// a logit until the value sums were spread over every unit. Gemma 3 270M (head size 256, so 768
/// q/k/v outputs a head) went wrong on a 30-row pass until the products took four values an
/// iteration. A real GPU has no such limit; smaller passes cost it only their dispatches.
fn pass_rows(c: &LlamaConfig, end: usize) -> usize {
    (1..=PASS_ROWS)
        .rev()
        .find(|&rows| loop_iterations(c, rows, end) <= LOOP_BUDGET)
        .unwrap_or(1)
}

/// An estimate of the loop iterations of one invocation of `attention.wgsl` over a pass of
/// `rows` rows ending at position `end`, phase by phase.
fn loop_iterations(c: &LlamaConfig, rows: usize, end: usize) -> usize {
    const WG: usize = 256;
    let (hs, dim) = (c.head_size(), c.dim);
    // A workgroup's sum or maximum runs up to 32 iterations (`common.wgsl`, `sum_all`).
    let norms = rows * (dim.div_ceil(WG) + 34);
    // A block's weights decoded (up to 40 iterations), then four rows of 8 fours each.
    let projections = rows.div_ceil(4) * (3 * hs).div_ceil(WG) * dim.div_ceil(32) * 76;
    let rotations = rows * (2 + if c.recipe.qk_norm { 66 } else { 0 });
    let parts = (WG / hs).max(1);
    let per_row =
        end.div_ceil(1024) * 70 + end.div_ceil(WG) * (hs / 4 + 2) + end.div_ceil(parts) + parts + 5;
    norms + projections + rotations + rows * per_row
}

/// The GPU's operations: the step's plan, shared with the caches and logits that refer to it.
pub struct DeviceOps {
    plan: Arc<Mutex<Plan>>,
    /// The plan's phase clock, where the device has timestamps.
    clock: Option<Arc<PhaseClock>>,
}

/// A layer on the device: its place in the plan.
pub struct DeviceLayer {
    index: usize,
}

/// A matrix held alone (the classifier), in parts of what one binding holds, and a number of its
/// own (the plan's launches bind its parts until another classifier is run).
pub struct DeviceLinear {
    parts: Vec<Part>,
    id: u64,
}

/// A pass on the device: its rows, and whether the logits read every row.
pub struct DevicePass {
    rows: usize,
    spans: usize,
}

/// A sequence's slot of the KV pool, given back when the sequence ends.
pub struct DeviceCache {
    slot: usize,
    plan: Arc<Mutex<Plan>>,
}

impl Drop for DeviceCache {
    fn drop(&mut self) {
        lock(&self.plan).free_slot(self.slot);
    }
}

fn lock(plan: &Mutex<Plan>) -> MutexGuard<'_, Plan> {
    plan.lock().unwrap_or_else(|e| e.into_inner())
}

impl DeviceOps {
    /// Operations for a model of `config`'s shape on `gpu`, on a stream of its own.
    pub fn new(config: &LlamaConfig, gpu: &'static Gpu) -> Self {
        let plan = Plan::new(Stream::new(gpu), config.clone());
        plan.clock.set_every(GPU_TIMED_EVERY);
        DeviceOps {
            clock: gpu.timestamps.then(|| plan.clock.clone()),
            plan: Arc::new(Mutex::new(plan)),
        }
    }

    fn plan(&self) -> MutexGuard<'_, Plan> {
        lock(&self.plan)
    }

    /// What this model has asked of the device so far.
    pub fn counts(&self) -> Counts {
        self.plan().counts
    }

    /// Bytes this model's KV pool holds on the device now (every layer's keys and values).
    pub fn kv_bytes(&self) -> u64 {
        self.plan().kv_bytes()
    }

    /// Bytes the device holds for this model now: CubeCL's report of the model's stream, every
    /// buffer and the read-back's staging.
    pub fn memory_bytes(&self) -> u64 {
        self.plan().memory_bytes()
    }

    /// The step's phase clock, where the device has timestamps to time its dispatches with
    /// (`timer.rs`).
    pub fn phases(&self) -> Option<&PhaseClock> {
        self.clock.as_deref()
    }
}

/// Words for the device, checked against what it binds (a buffer past it holds nothing, and the
/// next read-back says why).
fn upload(p: &mut Plan, label: &str, words: Vec<u32>) -> Handle {
    let gpu = p.stream.gpu;
    let (bytes, most) = (4 * words.len() as u64, gpu.most_bytes());
    if bytes > most {
        gpu.fail(format!(
            "{label} takes {} MB on the GPU, more than the {} MB it binds at once: choose a smaller \
             quantization or the CPU backend",
            bytes >> 20,
            most >> 20
        ));
        return p.stream.buffer(&mut p.counts, 16);
    }
    p.stream.buffer_with(&mut p.counts, words)
}

/// Classifiers' numbers (`DeviceLinear::id`).
static LINEARS: AtomicU64 = AtomicU64::new(0);

impl Ops for DeviceOps {
    type Act = usize;
    type Vector = Handle;
    type Linear = DeviceLinear;
    type Layer = DeviceLayer;
    type Pass = DevicePass;
    type Cache = DeviceCache;

    fn vector(&self, v: &[f32]) -> Handle {
        let words: Vec<u32> = v.iter().map(|x| x.to_bits()).collect();
        upload(&mut self.plan(), "vector", words)
    }

    fn linear(&self, name: &str, m: Matrix, plan: &mut QuantPlan) -> DeviceLinear {
        let (n, k) = (m.rows, m.cols);
        let before = plan.device_bytes;
        let stored = plan.apply(name, m);
        let mut p = self.plan();
        // Parts of what one binding holds (Gemma 3's classifier, 262,144 x 640 Q8_0, is 189 MB
        // as held, past WebGPU's default 128 MiB).
        let rows = (p.stream.gpu.most_bytes() / layer::row_bytes(&stored, k)).max(1) as usize;
        let mut parts = Vec::new();
        plan.device_bytes = before;
        for r in (0..n).step_by(rows.min(n).max(1)) {
            let end = (r + rows).min(n);
            let mut packed = Packed::default();
            packed.matrix(0, stored.rows(r..end, k), end - r, k, r);
            plan.device_bytes += packed.bytes();
            parts.push(Part {
                weights: upload(&mut p, name, packed.words),
                desc: upload(&mut p, "desc", packed.desc.to_vec()),
                n: end - r,
            });
        }
        DeviceLinear {
            parts,
            id: LINEARS.fetch_add(1, Ordering::Relaxed),
        }
    }

    fn layer(&self, index: usize, w: LayerWeights, plan: &mut QuantPlan) -> DeviceLayer {
        let mut packed = Packed::default();
        let before = plan.device_bytes;
        let config = self.plan().config.clone();
        for (slot, name, m) in [
            (layer::WQ, "wq", w.wq),
            (layer::WK, "wk", w.wk),
            (layer::WV, "wv", w.wv),
            (layer::WO, "wo", w.wo),
            (layer::W1, "w1", w.w1),
            (layer::W2, "w2", w.w2),
            (layer::W3, "w3", w.w3),
        ] {
            let (n, k) = (m.rows, m.cols);
            let stored = plan.apply(&format!("layers.{index}.{name}"), m);
            packed.matrix(slot, stored, n, k, 0);
        }
        packed.vector(layer::ATT_NORM, &w.rms_att);
        packed.vector(layer::FFN_NORM, &w.rms_ffn);
        let e = &w.extras;
        for (slots, vectors) in [
            (
                [layer::BQ, layer::BK, layer::BV].as_slice(),
                e.qkv_bias.as_ref().map(|v| v.as_slice()),
            ),
            (
                &[layer::QN, layer::KN],
                e.qk_norm.as_ref().map(|v| v.as_slice()),
            ),
            (
                &[layer::POST_ATT, layer::POST_FFN],
                e.post_norms.as_ref().map(|v| v.as_slice()),
            ),
        ] {
            for (&slot, v) in slots.iter().zip(vectors.into_iter().flatten()) {
                packed.vector(slot, v);
            }
        }
        let (window, _) = config.layer_attention(index);
        let local = window.is_some() && config.recipe.sliding.is_some();
        packed.attention(window, local);
        plan.device_bytes = before + packed.bytes();
        let mut p = self.plan();
        let weights = upload(&mut p, &format!("layer {index}"), packed.words);
        let desc = upload(&mut p, "desc", packed.desc.to_vec());
        p.layers.push(LayerBuffers { weights, desc });
        DeviceLayer { index }
    }

    fn linear_row(&self, _: &DeviceLinear, _: usize, _: &mut Vec<f32>) -> bool {
        false
    }

    fn new_cache(&self, _layers: usize) -> DeviceCache {
        DeviceCache {
            slot: self.plan().take_slot(),
            plan: self.plan.clone(),
        }
    }

    /// Nothing to do here: the pool grows for every slot at once when a pass needs more positions
    /// (`Plan::spans`).
    fn grow(&self, _: &mut DeviceCache, _: usize, _: usize) {}

    fn max_pass_rows(&self, end: usize) -> usize {
        pass_rows(&self.plan().config, end)
    }

    fn embed(&self, rows: Vec<f32>, t: usize) -> usize {
        let started = web_time::Instant::now();
        let mut p = self.plan();
        p.begin(&rows, t);
        p.spent(started);
        t
    }

    fn pass(&self, spans: &[Span], angles: Angles, caches: &mut [&mut DeviceCache]) -> DevicePass {
        let started = web_time::Instant::now();
        let rows: usize = spans.iter().map(|s| s.len).sum();
        let slots: Vec<(Span, usize)> = spans
            .iter()
            .zip(caches.iter())
            .map(|(&s, c)| (s, c.slot))
            .collect();
        let Angles {
            mut cos,
            sin,
            local,
        } = angles;
        let local_at = match local {
            Some((local_cos, local_sin)) => {
                cos.extend(sin);
                let at = cos.len();
                cos.extend(local_cos);
                cos.extend(local_sin);
                at
            }
            None => {
                cos.extend(sin);
                0
            }
        };
        let mut p = self.plan();
        p.spans(&slots, &cos, local_at);
        p.spent(started);
        DevicePass {
            rows,
            spans: spans.len(),
        }
    }

    fn attention_half(
        &self,
        x: usize,
        layer: &DeviceLayer,
        _: LayerAt,
        _: &mut [&mut DeviceCache],
        _: &DevicePass,
        _: &LlamaConfig,
    ) -> usize {
        let started = web_time::Instant::now();
        let mut p = self.plan();
        p.attention_half(layer.index);
        p.spent(started);
        x
    }

    fn feed_forward_half(&self, x: usize, layer: &DeviceLayer, _: &LlamaConfig) -> usize {
        let started = web_time::Instant::now();
        let mut p = self.plan();
        p.feed_forward_half(layer.index);
        p.spent(started);
        x
    }

    fn classify(
        &self,
        _: usize,
        pass: &DevicePass,
        rows: LogitRows,
        first: usize,
        norm: &Handle,
        classifier: &DeviceLinear,
        _: f32,
    ) -> Logits {
        let started = web_time::Instant::now();
        let (n, all) = match rows {
            LogitRows::All => (pass.rows, true),
            LogitRows::Last => (pass.spans, false),
        };
        let mut p = self.plan();
        let extra = p.classify((classifier.id, &classifier.parts), norm, n, all, first > 0);
        p.spent(started);
        Logits::Device(Box::new(GpuLogits {
            plan: self.plan.clone(),
            parts: vec![(extra, n)],
            pass: p.pass,
        }))
    }
}

/// Logits on the device: the plan's logits buffer (from pass `pass`) for a forward call's first
/// chunk, and buffers of their own for its later ones.
struct GpuLogits {
    plan: Arc<Mutex<Plan>>,
    parts: Vec<(Option<Extra>, usize)>,
    pass: u64,
}

impl GpuLogits {
    /// Pick or not, launch, and read the result back as `T`s (and the step's timings, where it
    /// was timed, into the phase clock). The whole of it, from recording the pick to the
    /// values, is the clock's time waiting for the device, which the scheduler's sampling
    /// leaves out.
    fn read<T: bytemuck::Pod>(self, ids: bool) -> ReadBack<Vec<T>> {
        let (gpu, clock, started, reading, timed) = {
            let mut p = lock(&self.plan);
            // The clock is read only for a timed step (a read-back a step otherwise).
            let started = p.clock.is_on().then(web_time::Instant::now);
            if p.logits_pass != self.pass {
                return Box::pin(std::future::ready(Err(Error::Device(
                    "logits were read after a later pass had replaced them".into(),
                ))));
            }
            let parts: Vec<(Option<&Extra>, usize)> = self
                .parts
                .iter()
                .map(|(e, rows)| (e.as_ref(), *rows))
                .collect();
            let (reading, timed) = p.read(&parts, ids);
            (p.stream.gpu, p.clock.clone(), started, reading, timed)
        };
        Box::pin(async move {
            let parts = reading.await?;
            gpu.check()?;
            let mut values = Vec::new();
            for bytes in &parts {
                values.extend(bytemuck::pod_collect_to_vec::<u8, T>(bytes));
            }
            if let Some(timed) = timed {
                timed.add_to(&clock).await;
            }
            if let Some(started) = started {
                clock.waited(started.elapsed().as_nanos() as u64);
            }
            Ok(values)
        })
    }
}

impl DeviceLogits for GpuLogits {
    fn rows(&self) -> usize {
        self.parts.iter().map(|(_, rows)| rows).sum()
    }

    fn then(self: Box<Self>, next: Box<dyn DeviceLogits>) -> Box<dyn DeviceLogits> {
        // A forward call's later chunks each hold their own buffer; their logits are this type's.
        let rows = next.rows();
        let mut this = *self;
        match (next as Box<dyn std::any::Any>).downcast::<GpuLogits>() {
            Ok(next) => this.parts.extend(next.parts),
            Err(_) => unreachable!("a forward call's logits are all on one device ({rows} rows)"),
        }
        Box::new(this)
    }

    fn argmax(self: Box<Self>) -> ReadBack<Vec<u32>> {
        let vocab = lock(&self.plan).config.vocab_size;
        let ids = self.read::<u32>(true);
        Box::pin(async move {
            let ids = ids.await?;
            // A GPU that computes wrong can pick past the vocabulary; say so rather than decode it.
            match ids.iter().find(|&&id| id as usize >= vocab) {
                Some(id) => Err(Error::Device(format!(
                    "the GPU picked token {id}, outside the vocabulary of {vocab}: it computes wrong \
                     (choose the CPU backend)"
                ))),
                None => Ok(ids),
            }
        })
    }

    fn into_vec(self: Box<Self>) -> ReadBack<Vec<f32>> {
        self.read(false)
    }
}
