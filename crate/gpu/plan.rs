//! A step planned once, captured once, replayed: every buffer a step uses (activations, the KV
//! pool, the logits) is made when the model loads or when a capacity grows (more rows in a
//! pass, more positions or sequences in the KV pool, more logit rows), never in a steady step.
//! A step writes its few changing values (the embedding rows, RoPE's angles, the spans) into its
//! buffers on the model's stream, records its launches (a kernel, the buffers it binds and its
//! workgroups each), and at its read-back runs them: the first time a sequence of launches is
//! met, burn captures it into a graph (`launch.rs`), which is replayed from then on, every
//! pipeline and bind group resolved once. A decode step of a steady batch is one sequence, so
//! after its first token a step makes nothing and submits once, with its read-back.

use crate::gpu::device::{Counts, Stream};
use crate::gpu::launch::{self, Graph, Kernel, Launch};
use crate::gpu::shaders::{Kernels, MAX_SPANS};
use crate::gpu::timer::{self, Pending, Timer};
use crate::model::LlamaConfig;
use crate::model::ops::Span;
use crate::model::phases::{Phase, PhaseClock};
use cubecl::server::Handle;
use std::sync::Arc;

/// Bytes of the pass's description (`Step` in common.wgsl): 8 words, then a vec4 per span.
const STEP_BYTES: u64 = 32 + 16 * MAX_SPANS as u64;

/// Words of `grow.wgsl`'s `p`.
const GROW_WORDS: u64 = 6;

/// Graphs kept, the least recently replayed given up first: a steady decode is one, a batch of
/// each size another, and a prompt's passes a few more.
const GRAPHS: usize = 16;

/// A layer's weights on the device: its matrices and vectors, and their description.
pub struct LayerBuffers {
    pub weights: Handle,
    pub desc: Handle,
}

/// One part of a matrix held alone (the classifier: parts where it is past what one binding
/// holds), with its description.
#[derive(Clone)]
pub struct Part {
    pub weights: Handle,
    pub desc: Handle,
    /// Its output columns.
    pub n: usize,
}

/// The kernels of a step, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Which {
    Attention,
    ProjectOut,
    FeedForward,
    ProjectDown,
    Classify,
    Pick,
}

/// The buffers a launch binds: a list of the plan's (`Plan::groups`), or of a forward call's own
/// logits (`Plan::own`, never captured: its buffers live only as long as the call).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Group {
    Plan(usize),
    Own(usize),
}

/// One launch of a step, and its kind for the step's phases (`timer.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Dispatch {
    which: Which,
    group: Group,
    count: [u32; 3],
    phase: Phase,
}

/// A captured sequence of launches and the graph that replays it.
struct Captured {
    launches: Vec<Dispatch>,
    graph: Graph,
    /// The pass it last served, for giving up the least recently used.
    used: u64,
}

/// Logit rows in buffers of their own, for a forward call's later chunks (its first chunk's rows
/// go to the plan's own logits buffer), with what picking from them binds.
pub struct Extra {
    pub logits: Handle,
    pub ids: Handle,
    pick: Vec<Handle>,
}

/// The step's buffers and what is recorded for the next launch.
pub struct Plan {
    pub stream: Stream,
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
    step: Handle,
    angles: Handle,
    x: Handle,
    qkv: Handle,
    att: Handle,
    hidden: Handle,
    kv: Vec<Handle>,
    logits: Handle,
    ids: Handle,
    /// What a KV pool's growth copies, where (`grow.wgsl`'s `p`).
    grow: Handle,
    /// The buffers each launch binds, in binding order: per layer attention, wo, gate/up, w2;
    /// then each part of the classifier; then the pick.
    groups: Vec<Vec<Handle>>,
    /// Where the classifier's groups start in `groups`, and the classifier they are of.
    classify_at: usize,
    classifier: Option<u64>,
    /// A forward call's own buffers' groups, for the launches recorded now.
    own: Vec<Vec<Handle>>,
    /// Slots of the KV pool free to take, and how many have ever been taken.
    free: Vec<usize>,
    taken: usize,
    recorded: Vec<Dispatch>,
    /// The graphs captured over the current buffers.
    graphs: Vec<Captured>,
    /// Why graphs are not used (a capture failed), if they are not.
    pub no_graphs: Option<String>,
    /// Launched work not yet submitted (CubeCL submits it before the next write or read).
    pending: bool,
    /// The current pass (counted from 1) and the one whose logits the logits buffer holds.
    pub pass: u64,
    pub logits_pass: u64,
    /// The current pass's rows and spans.
    pass_rows: usize,
    pass_spans: usize,
    /// Host time spent on the step so far, in ns.
    host_ns: u64,
    /// What this model has asked of the device.
    pub counts: Counts,
    /// The step's phases, timed by the device while on (where it has timestamps).
    pub clock: Arc<PhaseClock>,
    timer: Timer,
}

impl Plan {
    /// The kernels for `config`'s shape, and buffers for one row and no cache yet.
    pub fn new(stream: Stream, config: LlamaConfig) -> Plan {
        let kernels = Kernels::new(&config);
        let mut counts = Counts::default();
        let mut tiny = || stream.buffer(&mut counts, 16);
        let (angles, x, qkv, att, hidden, logits, ids) =
            (tiny(), tiny(), tiny(), tiny(), tiny(), tiny(), tiny());
        let step = stream.buffer(&mut counts, STEP_BYTES);
        let grow = stream.buffer(&mut counts, 4 * GROW_WORDS);
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
            groups: vec![vec![logits.clone(), ids.clone()]],
            logits,
            ids,
            grow,
            classify_at: 0,
            classifier: None,
            own: Vec::new(),
            free: Vec::new(),
            taken: 0,
            recorded: Vec::new(),
            graphs: Vec::new(),
            no_graphs: None,
            pending: false,
            pass: 0,
            logits_pass: 0,
            pass_rows: 0,
            pass_spans: 0,
            host_ns: 0,
            counts,
            clock: Arc::default(),
            timer: Timer::default(),
            step,
            layers: Vec::new(),
            kernels,
            config,
            stream,
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

    /// Add host time spent on the current step.
    pub fn spent(&mut self, since: web_time::Instant) {
        self.host_ns += since.elapsed().as_nanos() as u64;
    }

    fn kernel(&self, which: Which) -> &Kernel {
        let k = &self.kernels;
        match which {
            Which::Attention => &k.attention,
            Which::ProjectOut => &k.project_out,
            Which::FeedForward => &k.feed_forward,
            Which::ProjectDown => &k.project_down,
            Which::Classify => &k.classify,
            Which::Pick => &k.pick,
        }
    }

    fn buffers(&self, group: Group) -> &[Handle] {
        match group {
            Group::Plan(i) => &self.groups[i],
            Group::Own(i) => &self.own[i],
        }
    }

    fn record(&mut self, which: Which, phase: Phase, group: Group, count: [u32; 3]) {
        self.recorded.push(Dispatch {
            which,
            group,
            count,
            phase,
        });
    }

    /// Write `words` into `handle`; a write after launched work first submits that work.
    fn write(&mut self, handle: &Handle, offset: u64, words: &[u32]) {
        if std::mem::take(&mut self.pending) {
            self.counts.submits += 1;
        }
        self.stream.write(handle, offset, words);
    }

    /// Launch what is recorded: replay its graph (captured now, the first time this sequence of
    /// launches is met); or, while the phase clock times this step, launch it in timed windows;
    /// or launch it as it is where it binds a forward call's own buffers or graphs fail.
    pub fn flush(&mut self) {
        if self.recorded.is_empty() {
            return;
        }
        let n = self.recorded.len() as u64;
        self.counts.dispatches += n;
        if self.clock.is_on() && self.stream.gpu.timestamps {
            // Each window opens after a submit of what came before it and submits its own
            // launches as it closes.
            let launches = self.recorded.iter().map(|d| (d.phase, self.launch(d)));
            let windows = timer::time(&self.stream, launches);
            self.counts.submits += windows.len() as u64 + std::mem::take(&mut self.pending) as u64;
            self.counts.bind_groups += n;
            self.timer.extend(windows);
        } else {
            if self.no_graphs.is_some()
                || self
                    .recorded
                    .iter()
                    .any(|d| matches!(d.group, Group::Own(_)))
            {
                for d in &self.recorded {
                    let l = self.launch(d);
                    launch::launch(&self.stream, l.kernel, l.count, l.buffers);
                }
                self.counts.bind_groups += n;
            } else {
                self.replay_recorded();
            }
            self.pending = true;
        }
        self.recorded.clear();
        self.own.clear();
    }

    fn launch(&self, d: &Dispatch) -> Launch<'_> {
        Launch {
            kernel: self.kernel(d.which),
            buffers: self.buffers(d.group),
            count: d.count,
        }
    }

    /// Replay the graph of what is recorded, capturing it first where it is new.
    fn replay_recorded(&mut self) {
        let pass = self.pass;
        let found = self.graphs.iter().position(|c| c.launches == self.recorded);
        let at = match found {
            Some(at) => at,
            None => {
                let captured =
                    launch::capture(&self.stream, self.recorded.iter().map(|d| self.launch(d)));
                match captured {
                    Ok(graph) => {
                        if self.graphs.len() == GRAPHS {
                            let oldest = (0..GRAPHS).min_by_key(|&i| self.graphs[i].used);
                            self.graphs.swap_remove(oldest.unwrap_or(0));
                        }
                        self.counts.bind_groups += self.recorded.len() as u64;
                        self.graphs.push(Captured {
                            launches: self.recorded.clone(),
                            graph,
                            used: pass,
                        });
                        self.graphs.len() - 1
                    }
                    Err(e) => {
                        // Launched as they are, now and from now on: the same work, a bind group
                        // a dispatch.
                        self.no_graphs = Some(e.to_string());
                        for d in &self.recorded {
                            let l = self.launch(d);
                            launch::launch(&self.stream, l.kernel, l.count, l.buffers);
                        }
                        self.counts.bind_groups += self.recorded.len() as u64;
                        return;
                    }
                }
            }
        };
        self.graphs[at].used = pass;
        if let Err(e) = launch::replay(&self.stream, &self.graphs[at].graph) {
            self.stream.gpu.fail(e.to_string());
        }
    }

    /// Every graph captured over the buffers being replaced.
    fn forget_graphs(&mut self) {
        self.graphs.clear();
    }

    /// A new pass of `rows` rows: the embedding rows written to `x`.
    pub fn begin(&mut self, embedding: &[f32], rows: usize) {
        self.flush();
        self.pass += 1;
        self.pass_rows = rows;
        if rows > self.rows {
            self.grow_rows(rows.next_power_of_two());
        }
        let x = self.x.clone();
        self.write(&x, 0, bytemuck::cast_slice(embedding));
    }

    /// The pass's spans (each with its slot of the KV pool) and RoPE's angles.
    pub fn spans(&mut self, spans: &[(Span, usize)], angles: &[f32], local_at: usize) {
        if spans.len() > MAX_SPANS {
            self.stream.gpu.fail(format!(
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
        let (step, angles_buffer) = (self.step.clone(), self.angles.clone());
        self.write(&step, 0, &words);
        self.write(&angles_buffer, 0, bytemuck::cast_slice(angles));
    }

    /// Layer `l`'s attention half: two dispatches.
    pub fn attention_half(&mut self, l: usize) {
        let heads = self.config.n_heads as u32;
        let spans = self.pass_spans as u32;
        self.record(
            Which::Attention,
            Phase::Attention,
            Group::Plan(4 * l),
            [heads, spans, 1],
        );
        let count = self.project_count();
        self.record(
            Which::ProjectOut,
            Phase::Projections,
            Group::Plan(4 * l + 1),
            count,
        );
    }

    /// Layer `l`'s feed-forward half: two dispatches.
    pub fn feed_forward_half(&mut self, l: usize) {
        let columns = self.config.hidden_dim.div_ceil(64) as u32;
        let tiles = self.pass_rows.div_ceil(4) as u32;
        self.record(
            Which::FeedForward,
            Phase::Projections,
            Group::Plan(4 * l + 2),
            [columns, tiles, 1],
        );
        let count = self.project_count();
        self.record(
            Which::ProjectDown,
            Phase::Projections,
            Group::Plan(4 * l + 3),
            count,
        );
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
    /// span) of `parts` (the classifier `id`), into the plan's logits buffer, or (`extra`)
    /// buffers of their own.
    pub fn classify(
        &mut self,
        (id, parts): (u64, &[Part]),
        norm: &Handle,
        rows: usize,
        all: bool,
        extra: bool,
    ) -> Option<Extra> {
        let step = self.step.clone();
        self.write(&step, 16, &[rows as u32, 0, all as u32]);
        let tiles = rows.div_ceil(4) as u32;
        if extra {
            let vocab = self.config.vocab_size as u64;
            let logits = self
                .stream
                .buffer(&mut self.counts, 4 * rows as u64 * vocab);
            let ids = self.stream.buffer(&mut self.counts, 4 * rows as u64);
            for part in parts {
                self.own.push(self.classify_group(part, norm, &logits));
                let group = Group::Own(self.own.len() - 1);
                let count = [part.n.div_ceil(64) as u32, tiles, 1];
                self.record(Which::Classify, Phase::Classifier, group, count);
            }
            let pick = vec![logits.clone(), ids.clone()];
            return Some(Extra { logits, ids, pick });
        }
        if rows > self.logit_rows {
            self.grow_logits(rows.next_power_of_two());
        }
        if self.classifier != Some(id) {
            // The classifier's groups, after the layers' and before the pick's.
            self.forget_graphs();
            let logits = self.logits.clone();
            let groups: Vec<Vec<Handle>> = parts
                .iter()
                .map(|p| self.classify_group(p, norm, &logits))
                .collect();
            let pick = self.groups.pop();
            self.groups.truncate(self.classify_at);
            self.groups.extend(groups);
            self.groups.extend(pick);
            self.classifier = Some(id);
        }
        for (i, part) in parts.iter().enumerate() {
            let count = [part.n.div_ceil(64) as u32, tiles, 1];
            let group = Group::Plan(self.classify_at + i);
            self.record(Which::Classify, Phase::Classifier, group, count);
        }
        self.logits_pass = self.pass;
        None
    }

    fn classify_group(&self, part: &Part, norm: &Handle, logits: &Handle) -> Vec<Handle> {
        [&self.step, &part.desc, &part.weights, norm, &self.x, logits]
            .map(Handle::clone)
            .to_vec()
    }

    /// Record the pick over each of `parts` (`None`: the plan's logits), launch what is recorded,
    /// and read the ids or (`ids` false) the logits back, one part after another, in one submit.
    /// Returns what reads them, and the step's timings where it was timed.
    pub fn read(
        &mut self,
        parts: &[(Option<&Extra>, usize)],
        ids: bool,
    ) -> (ReadBack, Option<Pending>) {
        let started = web_time::Instant::now();
        let vocab = self.config.vocab_size as u64;
        let each = |rows: usize| 4 * rows as u64 * if ids { 1 } else { vocab };
        if ids {
            for &(extra, rows) in parts {
                let group = match extra {
                    Some(e) => {
                        self.own.push(e.pick.clone());
                        Group::Own(self.own.len() - 1)
                    }
                    None => Group::Plan(self.groups.len() - 1),
                };
                self.record(Which::Pick, Phase::Sampling, group, [rows as u32, 1, 1]);
            }
        }
        self.flush();
        // The host's part of the step ends here: CubeCL's read runs the stream's queued work and
        // submits it (cubecl-server's `execute_streams` ends with a flush), then encodes the
        // copies and submits them, so a read after launched work is always two submits, both
        // inside the read (where a software adapter, lavapipe, also holds the second until the
        // first has run). Submitting the launches first, apart, cost lavapipe 8% of its decode.
        if std::mem::take(&mut self.pending) {
            self.counts.submits += 1;
        }
        self.spent(started);
        self.counts.host_ns += std::mem::take(&mut self.host_ns);
        let handles: Vec<Handle> = parts
            .iter()
            .map(|&(extra, rows)| {
                let source = match (extra, ids) {
                    (Some(e), true) => &e.ids,
                    (Some(e), false) => &e.logits,
                    (None, true) => &self.ids,
                    (None, false) => &self.logits,
                };
                let bytes = each(rows);
                source
                    .clone()
                    .offset_end(source.size_in_used().saturating_sub(bytes))
            })
            .collect();
        let reading = launch::read(&self.stream, handles);
        self.counts.submits += 1;
        (Box::pin(reading), self.timer.take())
    }

    /// Buffers for passes of `rows` rows.
    fn grow_rows(&mut self, rows: usize) {
        let c = &self.config;
        let (stream, counts) = (&self.stream, &mut self.counts);
        let mut floats = |width: usize| stream.buffer(counts, 4 * (rows * width) as u64);
        self.x = floats(c.dim);
        self.qkv = floats((3 * c.q_dim()).max(c.dim));
        self.att = floats(c.q_dim());
        self.hidden = floats(c.hidden_dim);
        self.angles = floats(2 * c.head_size());
        self.rows = rows;
        self.classifier = None;
        self.make_groups();
    }

    /// A KV pool of at least `slots` slots of `positions` positions, keeping what the old one
    /// held (copied by `grow.wgsl`). Either grows to at least double, so that a growing context
    /// or room grows it rarely.
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
        let most = self.stream.gpu.most_bytes();
        if bytes > most {
            self.stream.gpu.fail(format!(
                "the KV cache of {new_slots} sequences of {new_positions} positions needs {} MB a \
                 layer, and this GPU binds at most {} MB: run fewer sequences or a shorter context, \
                 or choose the CPU backend",
                bytes >> 20,
                most >> 20
            ));
            return;
        }
        self.flush();
        let (old_slot, new_slot) = (
            self.positions as u64 * kv_dim,
            new_positions as u64 * kv_dim,
        );
        let words = 2 * self.slots as u64 * old_slot;
        if words > 0 {
            let grow = self.grow.clone();
            self.write(
                &grow,
                0,
                &[
                    old_slot as u32,
                    new_slot as u32,
                    self.slots as u32,
                    (self.slots as u64 * old_slot) as u32,
                    (new_slots as u64 * new_slot) as u32,
                    words as u32,
                ],
            );
        }
        let workgroups = words.div_ceil(256) as u32;
        let (x, y) = (workgroups.min(65_535), workgroups.div_ceil(65_535));
        for l in 0..self.layers.len() {
            let grown = self.stream.buffer(&mut self.counts, bytes);
            match self.kv.get_mut(l) {
                Some(kv) => {
                    if words > 0 {
                        let buffers = [self.grow.clone(), kv.clone(), grown.clone()];
                        launch::launch(&self.stream, &self.kernels.grow, [x, y, 1], &buffers);
                        self.counts.dispatches += 1;
                        self.counts.bind_groups += 1;
                        self.pending = true;
                    }
                    *kv = grown;
                }
                None => self.kv.push(grown),
            }
        }
        self.slots = new_slots;
        self.positions = new_positions;
        self.make_groups();
    }

    fn grow_logits(&mut self, rows: usize) {
        let vocab = self.config.vocab_size as u64;
        self.logits = self
            .stream
            .buffer(&mut self.counts, 4 * rows as u64 * vocab);
        self.ids = self.stream.buffer(&mut self.counts, 4 * rows as u64);
        self.logit_rows = rows;
        self.classifier = None;
        self.make_groups();
    }

    /// Every launch's buffers over the current buffers (the classifier's, on its next pass); the
    /// graphs captured over the old ones are given up.
    fn make_groups(&mut self) {
        self.forget_graphs();
        self.classifier = None;
        self.groups.clear();
        if self.kv.len() >= self.layers.len() && self.rows > 0 {
            // Not before the first pass: it sizes the buffers.
            for (l, kv) in self.layers.iter().zip(&self.kv) {
                let (s, d, w) = (&self.step, &l.desc, &l.weights);
                let (x, qkv, att, hidden) = (&self.x, &self.qkv, &self.att, &self.hidden);
                let group = |buffers: &[&Handle]| buffers.iter().map(|&h| h.clone()).collect();
                self.groups.extend([
                    group(&[s, d, w, &self.angles, x, qkv, kv, att]),
                    group(&[s, d, w, att, x, qkv]),
                    group(&[s, d, w, x, hidden]),
                    group(&[s, d, w, hidden, x, qkv]),
                ]);
            }
        }
        self.classify_at = self.groups.len();
        self.groups
            .push(vec![self.logits.clone(), self.ids.clone()]);
    }

    /// Bytes the device holds for this model's stream now (CubeCL's memory report).
    pub fn memory_bytes(&self) -> u64 {
        let report = self
            .stream
            .run(|c| c.memory_report(cubecl::MemoryScope::CurrentStream));
        report.usage().bytes_reserved
    }

    /// Bytes the KV pool holds now, every layer.
    pub fn kv_bytes(&self) -> u64 {
        self.kv.iter().map(Handle::size_in_used).sum()
    }
}

/// A read-back on its way: the bytes of each part read, in order.
pub type ReadBack = std::pin::Pin<
    Box<dyn std::future::Future<Output = crate::Result<Vec<cubecl::bytes::Bytes>>> + Send>,
>;
