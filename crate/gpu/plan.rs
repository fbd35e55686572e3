//! A step planned once and replayed: every buffer a step uses (activations, the KV pool, the
//! logits and their read-back) and every bind group over them is made when the model loads or
//! when a capacity grows (more rows in a pass, more positions or sequences in the KV pool, more
//! logit rows), never in a steady decode step. A step writes its few changing values (the
//! embedding rows, RoPE's angles, the spans) with `write_buffer`, records its dispatches (each a
//! pipeline, a ready bind group and a workgroup count) and submits them once, with the copy of
//! its result into the read-back buffer.
//!
//! Why below burn and CubeCL: burn's tensors allocate their outputs as the pass runs, and
//! CubeCL's launch path creates a bind group for every dispatch (`cubecl-wgpu`'s stream,
//! 0.11.3), which is what a step here must not do: counted in the page's worker on stories260K,
//! that path made 68 bind groups and 2 buffers a token.

use std::sync::Arc;

use crate::gpu::device::{Counts, Gpu};
use crate::gpu::shaders::{Kernel, Kernels, MAX_SPANS};
use crate::gpu::timer::{Pending, Timer};
use crate::model::LlamaConfig;
use crate::model::ops::Span;
use crate::model::phases::{Phase, PhaseClock};

/// Bytes of the pass's uniform (`Step` in common.wgsl): 8 words, then a vec4 per span.
const STEP_BYTES: u64 = 32 + 16 * MAX_SPANS as u64;

/// A layer's weights on the device.
pub struct LayerBuffers {
    pub weights: wgpu::Buffer,
    pub desc: wgpu::Buffer,
}

/// One part of a matrix held alone (the classifier: parts where it is past what one binding
/// holds), with its description.
#[derive(Clone)]
pub struct Part {
    pub weights: wgpu::Buffer,
    pub desc: wgpu::Buffer,
    /// Its output columns.
    pub n: usize,
}

/// One dispatch of a step.
struct Dispatch {
    pipeline: wgpu::ComputePipeline,
    group: wgpu::BindGroup,
    count: [u32; 3],
    /// Its kind, for the step's phases (`timer.rs`).
    phase: Phase,
}

/// Logit rows in a buffer of their own, for a forward call's later chunks (its first chunk's rows
/// go to the plan's own logits buffer), with what reading them back needs.
pub struct Extra {
    pub logits: wgpu::Buffer,
    pub ids: wgpu::Buffer,
    pub pick: wgpu::BindGroup,
}

/// The step's buffers and bind groups, and what is recorded for the next submit.
pub struct Plan {
    pub gpu: Arc<Gpu>,
    pub config: LlamaConfig,
    pub kernels: Kernels,
    pub layers: Vec<LayerBuffers>,
    /// Rows a pass may hold now.
    rows: usize,
    /// Positions a slot of the KV pool holds, and slots.
    positions: usize,
    slots: usize,
    /// Logit rows the logits buffer holds.
    logit_rows: usize,
    step: wgpu::Buffer,
    angles: wgpu::Buffer,
    x: wgpu::Buffer,
    qkv: wgpu::Buffer,
    att: wgpu::Buffer,
    hidden: wgpu::Buffer,
    kv: Vec<wgpu::Buffer>,
    logits: wgpu::Buffer,
    ids: wgpu::Buffer,
    readback: wgpu::Buffer,
    /// Per layer: attention, wo, gate/up, w2.
    groups: Vec<[wgpu::BindGroup; 4]>,
    /// The classifier's parts and their bind groups over the plan's logits buffer.
    classify: Vec<(Part, wgpu::BindGroup)>,
    pick: wgpu::BindGroup,
    /// Slots of the KV pool free to take, and how many have ever been taken.
    free: Vec<usize>,
    taken: usize,
    recorded: Vec<Dispatch>,
    /// The current pass (counted from 1) and the one whose logits the logits buffer holds.
    pub pass: u64,
    pub logits_pass: u64,
    /// The current pass's rows and spans.
    pass_rows: usize,
    pass_spans: usize,
    /// Host time spent on the step's recording so far, in ns.
    host_ns: u64,
    /// What this model has done on the device.
    pub counts: Counts,
    /// The step's phases, timed by the device while on (where it has timestamps).
    pub clock: Arc<PhaseClock>,
    timer: Option<Timer>,
}

const STORAGE: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE;
const COPY_DST: wgpu::BufferUsages = wgpu::BufferUsages::COPY_DST;
const COPY_SRC: wgpu::BufferUsages = wgpu::BufferUsages::COPY_SRC;

impl Plan {
    /// The kernels for `config`'s shape, and buffers for one row and no cache yet.
    pub fn new(gpu: Arc<Gpu>, config: LlamaConfig) -> Plan {
        let kernels = Kernels::new(&gpu, &config);
        let mut counts = Counts::default();
        let mut tiny =
            |label: &str| gpu.buffer(&mut counts, label, 16, STORAGE | COPY_DST | COPY_SRC);
        let (angles, x, qkv, att, hidden, logits, ids) = (
            tiny("angles"),
            tiny("x"),
            tiny("qkv"),
            tiny("att"),
            tiny("hidden"),
            tiny("logits"),
            tiny("ids"),
        );
        let step = gpu.buffer(
            &mut counts,
            "step",
            STEP_BYTES,
            wgpu::BufferUsages::UNIFORM | COPY_DST,
        );
        let readback = gpu.buffer(
            &mut counts,
            "readback",
            16,
            wgpu::BufferUsages::MAP_READ | COPY_DST,
        );
        let pick = gpu.bind_group(&mut counts, &kernels.pick.layout, &[&logits, &ids]);
        Plan {
            rows: 0,
            positions: 0,
            slots: 0,
            logit_rows: 0,
            angles,
            x,
            qkv,
            att,
            hidden,
            kv: Vec::new(),
            logits,
            ids,
            readback,
            groups: Vec::new(),
            classify: Vec::new(),
            pick,
            free: Vec::new(),
            taken: 0,
            recorded: Vec::new(),
            pass: 0,
            logits_pass: 0,
            pass_rows: 0,
            pass_spans: 0,
            host_ns: 0,
            counts,
            clock: Arc::default(),
            timer: None,
            step,
            layers: Vec::new(),
            kernels,
            config,
            gpu,
        }
    }

    /// A slot of the KV pool for a new sequence.
    pub fn take_slot(&mut self) -> usize {
        self.free.pop().unwrap_or_else(|| {
            self.taken += 1;
            self.taken - 1
        })
    }

    pub fn free_slot(&mut self, slot: usize) {
        self.free.push(slot);
    }

    /// Submit what is recorded (a pass whose logits nobody read, a prefill's earlier chunk), so
    /// that the next pass's writes do not land before it runs.
    pub fn flush(&mut self) {
        if !self.recorded.is_empty() {
            let encoder = self.encode();
            self.submit(encoder);
        }
    }

    /// The recorded dispatches in one compute pass of a new encoder, or, while the phase clock
    /// is on and the device has timestamps, each in a pass of its own, timed (`timer.rs`).
    fn encode(&mut self) -> wgpu::CommandEncoder {
        let mut encoder = self
            .gpu
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
        let timing = self
            .clock
            .is_on()
            .then_some(self.gpu.timestamp_ns)
            .flatten();
        if let (Some(tick_ns), None) = (timing, &self.timer) {
            self.timer = Some(Timer::new(&self.gpu, &mut self.counts, tick_ns));
        }
        let dispatch = |pass: &mut wgpu::ComputePass, d: &Dispatch| {
            pass.set_pipeline(&d.pipeline);
            pass.set_bind_group(0, &d.group, &[]);
            pass.dispatch_workgroups(d.count[0], d.count[1], d.count[2]);
        };
        match self.timer.as_mut().filter(|_| timing.is_some()) {
            Some(timer) => {
                timer.begin();
                for d in &self.recorded {
                    let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                        label: None,
                        timestamp_writes: timer.next(d.phase),
                    });
                    dispatch(&mut pass, d);
                }
                timer.resolve(&mut encoder);
            }
            None => {
                let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: None,
                    timestamp_writes: None,
                });
                for d in &self.recorded {
                    dispatch(&mut pass, d);
                }
            }
        }
        encoder
    }

    /// Submit `encoder` and count it with the dispatches recorded and the host time spent.
    fn submit(&mut self, encoder: wgpu::CommandEncoder) {
        let started = web_time::Instant::now();
        self.gpu.queue.submit([encoder.finish()]);
        self.counts.host_ns += self.host_ns + started.elapsed().as_nanos() as u64;
        self.counts.dispatches += self.recorded.len() as u64;
        self.counts.submits += 1;
        self.recorded.clear();
        self.host_ns = 0;
    }

    /// Add host time spent on the current step.
    pub fn spent(&mut self, since: web_time::Instant) {
        self.host_ns += since.elapsed().as_nanos() as u64;
    }

    fn record(
        &mut self,
        kernel: fn(&Kernels) -> &Kernel,
        phase: Phase,
        group: wgpu::BindGroup,
        count: [u32; 3],
    ) {
        self.recorded.push(Dispatch {
            pipeline: kernel(&self.kernels).pipeline.clone(),
            group,
            count,
            phase,
        });
    }

    /// A new pass of `rows` rows: the embedding rows written to `x`.
    pub fn begin(&mut self, embedding: &[f32], rows: usize) {
        self.flush();
        self.pass += 1;
        self.pass_rows = rows;
        if rows > self.rows {
            self.grow_rows(rows.next_power_of_two());
        }
        self.gpu
            .queue
            .write_buffer(&self.x, 0, bytemuck::cast_slice(embedding));
    }

    /// The pass's spans (each with its slot of the KV pool) and RoPE's angles.
    pub fn spans(&mut self, spans: &[(Span, usize)], angles: &[f32], local_at: usize) {
        if spans.len() > MAX_SPANS {
            self.gpu.fail(format!(
                "a pass of {} sequences is more than the GPU step holds ({MAX_SPANS})",
                spans.len()
            ));
        }
        let slots = spans.iter().map(|&(_, slot)| slot + 1).max().unwrap_or(0);
        let positions = spans
            .iter()
            .map(|(s, _)| s.start + s.len)
            .max()
            .unwrap_or(0);
        self.ensure_kv(slots, positions);
        self.pass_spans = spans.len().min(MAX_SPANS);
        let kv_dim = self.config.kv_dim();
        let mut words = vec![
            self.pass_rows as u32,
            self.pass_spans as u32,
            self.positions as u32,
            (self.slots * self.positions * kv_dim) as u32,
            0,
            0,
            0,
            local_at as u32,
        ];
        let mut first = 0;
        for &(span, slot) in spans.iter().take(MAX_SPANS) {
            words.extend([slot as u32, span.start as u32, first, span.len as u32]);
            first += span.len as u32;
        }
        let queue = &self.gpu.queue;
        queue.write_buffer(&self.step, 0, bytemuck::cast_slice(&words));
        queue.write_buffer(&self.angles, 0, bytemuck::cast_slice(angles));
    }

    /// Layer `l`'s attention half: two dispatches.
    pub fn attention_half(&mut self, l: usize) {
        let [attention, project, ..] = self.groups[l].clone();
        let heads = self.config.n_heads as u32;
        self.record(
            |k| &k.attention,
            Phase::Attention,
            attention,
            [heads, self.pass_spans as u32, 1],
        );
        let count = self.project_count();
        self.record(|k| &k.project_out, Phase::Projections, project, count);
    }

    /// Layer `l`'s feed-forward half: two dispatches.
    pub fn feed_forward_half(&mut self, l: usize) {
        let [_, _, feed_forward, project] = self.groups[l].clone();
        let columns = self.config.hidden_dim.div_ceil(64) as u32;
        let tiles = self.pass_rows.div_ceil(4) as u32;
        self.record(
            |k| &k.feed_forward,
            Phase::Projections,
            feed_forward,
            [columns, tiles, 1],
        );
        let count = self.project_count();
        self.record(|k| &k.project_down, Phase::Projections, project, count);
    }

    /// A projection back to the width: a workgroup per 64 columns of 4 rows, or per 4 rows where
    /// the recipe norms the projection before the residual (the norm takes a whole row).
    fn project_count(&self) -> [u32; 3] {
        let tiles = self.pass_rows.div_ceil(4) as u32;
        let columns = if self.config.recipe.post_norms {
            1
        } else {
            self.config.dim.div_ceil(64) as u32
        };
        [columns, tiles, 1]
    }

    /// The classifier over `rows` logit rows (`all`: every row of the pass, else the last of each
    /// span) of `parts`, into the plan's logits buffer, or (`extra`) a buffer of their own.
    pub fn classify(
        &mut self,
        parts: &[Part],
        norm: &wgpu::Buffer,
        rows: usize,
        all: bool,
        extra: bool,
    ) -> Option<Extra> {
        let words = [rows as u32, 0, all as u32];
        self.gpu
            .queue
            .write_buffer(&self.step, 16, bytemuck::cast_slice(&words));
        let tiles = rows.div_ceil(4) as u32;
        if extra {
            let vocab = self.config.vocab_size as u64;
            let logits = self.gpu.buffer(
                &mut self.counts,
                "logits",
                4 * rows as u64 * vocab,
                STORAGE | COPY_SRC,
            );
            let ids = self
                .gpu
                .buffer(&mut self.counts, "ids", 4 * rows as u64, STORAGE | COPY_SRC);
            for part in parts {
                let group = self.classify_group(part, norm, &logits);
                self.record(
                    |k| &k.classify,
                    Phase::Classifier,
                    group,
                    [part.n.div_ceil(64) as u32, tiles, 1],
                );
            }
            let layout = &self.kernels.pick.layout;
            let pick = self
                .gpu
                .bind_group(&mut self.counts, layout, &[&logits, &ids]);
            return Some(Extra { logits, ids, pick });
        }
        if rows > self.logit_rows {
            self.grow_logits(rows.next_power_of_two());
        }
        let stale = self.classify.len() != parts.len()
            || self
                .classify
                .iter()
                .zip(parts)
                .any(|((p, _), q)| p.weights != q.weights);
        if stale {
            let logits = self.logits.clone();
            self.classify = parts
                .iter()
                .map(|p| (p.clone(), self.classify_group(p, norm, &logits)))
                .collect();
        }
        for i in 0..self.classify.len() {
            let (part, group) = &self.classify[i];
            let count = [part.n.div_ceil(64) as u32, tiles, 1];
            let group = group.clone();
            self.record(|k| &k.classify, Phase::Classifier, group, count);
        }
        self.logits_pass = self.pass;
        None
    }

    fn classify_group(
        &mut self,
        part: &Part,
        norm: &wgpu::Buffer,
        logits: &wgpu::Buffer,
    ) -> wgpu::BindGroup {
        let buffers = [&self.step, &part.desc, &part.weights, norm, &self.x, logits];
        self.gpu
            .bind_group(&mut self.counts, &self.kernels.classify.layout, &buffers)
    }

    /// Record the pick over each of `parts` (`None`: the plan's logits), copy the ids or (`ids`
    /// false) the logits into the read-back buffer one part after another, and submit. Returns
    /// the read-back buffer, the bytes to read, and the step's timestamps where it was timed.
    pub fn read(
        &mut self,
        parts: &[(Option<&Extra>, usize)],
        ids: bool,
    ) -> (wgpu::Buffer, u64, Option<Pending>) {
        let started = web_time::Instant::now();
        let vocab = self.config.vocab_size as u64;
        let each = |rows: usize| 4 * rows as u64 * if ids { 1 } else { vocab };
        let total: u64 = parts.iter().map(|&(_, rows)| each(rows)).sum();
        if total > self.readback.size() {
            self.readback = self.gpu.buffer(
                &mut self.counts,
                "readback",
                total.next_power_of_two(),
                wgpu::BufferUsages::MAP_READ | COPY_DST,
            );
        }
        if ids {
            for &(extra, rows) in parts {
                let group = extra.map_or(&self.pick, |e| &e.pick).clone();
                self.record(|k| &k.pick, Phase::Sampling, group, [rows as u32, 1, 1]);
            }
        }
        let mut encoder = self.encode();
        let mut at = 0;
        for &(extra, rows) in parts {
            let source = match (extra, ids) {
                (Some(e), true) => &e.ids,
                (Some(e), false) => &e.logits,
                (None, true) => &self.ids,
                (None, false) => &self.logits,
            };
            encoder.copy_buffer_to_buffer(source, 0, &self.readback, at, each(rows));
            at += each(rows);
        }
        self.spent(started);
        self.submit(encoder);
        let timed = self.timer.as_mut().and_then(Timer::take);
        (self.readback.clone(), total, timed)
    }

    /// Buffers for passes of `rows` rows, and the bind groups over them.
    fn grow_rows(&mut self, rows: usize) {
        let c = &self.config;
        let (gpu, counts) = (&self.gpu, &mut self.counts);
        let mut floats = |label: &str, width: usize| {
            gpu.buffer(counts, label, 4 * (rows * width) as u64, STORAGE | COPY_DST)
        };
        self.x = floats("x", c.dim);
        self.qkv = floats("qkv", (3 * c.q_dim()).max(c.dim));
        self.att = floats("att", c.q_dim());
        self.hidden = floats("hidden", c.hidden_dim);
        self.angles = floats("angles", 2 * c.head_size());
        self.rows = rows;
        self.classify.clear();
        self.make_groups();
    }

    /// A KV pool of at least `slots` slots of `positions` positions, keeping what the old one
    /// held. Either grows to at least double, so that a growing context or room grows it rarely.
    fn ensure_kv(&mut self, slots: usize, positions: usize) {
        if slots <= self.slots && positions <= self.positions {
            return;
        }
        let new_slots = slots.max(self.slots);
        let new_positions = if positions > self.positions {
            positions
                .max(2 * self.positions)
                .max(64)
                .min(self.config.seq_len)
        } else {
            self.positions
        };
        let kv_dim = self.config.kv_dim() as u64;
        let bytes = 2 * 4 * (new_slots * new_positions) as u64 * kv_dim;
        let limits = &self.gpu.limits;
        let most = limits
            .max_storage_buffer_binding_size
            .min(limits.max_buffer_size);
        if bytes > most {
            self.gpu.fail(format!(
                "the KV cache of {new_slots} sequences of {new_positions} positions needs {} MB a \
                 layer, and this GPU binds at most {} MB: run fewer sequences or a shorter context, \
                 or choose the CPU backend",
                bytes >> 20,
                most >> 20
            ));
            return;
        }
        self.flush();
        let mut encoder = self
            .gpu
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
        let (old_slot, new_slot) = (
            4 * self.positions as u64 * kv_dim,
            4 * new_positions as u64 * kv_dim,
        );
        let (old_values, new_values) = (self.slots as u64 * old_slot, new_slots as u64 * new_slot);
        for kv in &mut self.kv {
            let grown =
                self.gpu
                    .buffer(&mut self.counts, "kv", bytes, STORAGE | COPY_DST | COPY_SRC);
            for s in 0..self.slots as u64 {
                for (from, to) in [(0, 0), (old_values, new_values)] {
                    if old_slot > 0 {
                        encoder.copy_buffer_to_buffer(
                            kv,
                            from + s * old_slot,
                            &grown,
                            to + s * new_slot,
                            old_slot,
                        );
                    }
                }
            }
            *kv = grown;
        }
        while self.kv.len() < self.layers.len() {
            let kv = self
                .gpu
                .buffer(&mut self.counts, "kv", bytes, STORAGE | COPY_DST | COPY_SRC);
            self.kv.push(kv);
        }
        self.gpu.queue.submit([encoder.finish()]);
        self.counts.submits += 1;
        self.slots = new_slots;
        self.positions = new_positions;
        self.make_groups();
    }

    fn grow_logits(&mut self, rows: usize) {
        let vocab = self.config.vocab_size as u64;
        let counts = &mut self.counts;
        self.logits = self.gpu.buffer(
            counts,
            "logits",
            4 * rows as u64 * vocab,
            STORAGE | COPY_SRC,
        );
        self.ids = self
            .gpu
            .buffer(counts, "ids", 4 * rows as u64, STORAGE | COPY_SRC);
        let layout = &self.kernels.pick.layout;
        self.pick = self
            .gpu
            .bind_group(counts, layout, &[&self.logits, &self.ids]);
        self.logit_rows = rows;
        self.classify.clear();
    }

    /// Every layer's bind groups over the current buffers.
    fn make_groups(&mut self) {
        if self.kv.len() < self.layers.len() || self.rows == 0 {
            // Not before the first pass: it sizes the buffers.
            self.groups.clear();
            return;
        }
        let k = &self.kernels;
        let gpu = &self.gpu;
        let counts = &mut self.counts;
        let mut group = |layout: &wgpu::BindGroupLayout, buffers: &[&wgpu::Buffer]| {
            gpu.bind_group(counts, layout, buffers)
        };
        self.groups = self
            .layers
            .iter()
            .zip(&self.kv)
            .map(|(l, kv)| {
                let (s, d, w) = (&self.step, &l.desc, &l.weights);
                [
                    group(
                        &k.attention.layout,
                        &[s, d, w, &self.angles, &self.x, &self.qkv, kv, &self.att],
                    ),
                    group(
                        &k.project_out.layout,
                        &[s, d, w, &self.att, &self.x, &self.qkv],
                    ),
                    group(&k.feed_forward.layout, &[s, d, w, &self.x, &self.hidden]),
                    group(
                        &k.project_down.layout,
                        &[s, d, w, &self.hidden, &self.x, &self.qkv],
                    ),
                ]
            })
            .collect();
    }
}
