//! Where a GPU step's time goes: while a phase clock is on and the adapter has `timestamp-query`,
//! each dispatch runs in a compute pass of its own with a timestamp at its start and its end
//! (WebGPU's only timestamps: a pass's), resolved and copied beside the step's result and read
//! with it, and each dispatch's time is added to its kind (`model/phases.rs`). The sets and
//! buffers are made once, when the clock is first on.
//!
//! What this measures: the device's time in each dispatch, not the gaps between them (a pass
//! boundary, idle time) nor the host's recording and submitting, which the step's "other work"
//! holds. A pass a dispatch costs a little more than one pass for all (the tests run it on
//! lavapipe and SwiftShader; docs/figures.md has the limits). Browsers round timestamps (Chrome
//! to 100 us without its developer flag), so a small model's dispatches read as 0 or 100 us each;
//! their sum over many is still an estimate of the whole.

use crate::error::Result;
use crate::gpu::device::{Counts, Gpu, map};
use crate::model::phases::{Phase, PhaseClock};

/// Queries in the set: two a dispatch, WebGPU's most a set may hold.
const QUERIES: u32 = 4096;

/// Queries a resolve's destination offset moves by (it must be a multiple of 256 bytes).
const ALIGN: u32 = (wgpu::QUERY_RESOLVE_BUFFER_ALIGNMENT / 8) as u32;

/// The query set and its buffers, and the dispatches timed since the last read.
pub struct Timer {
    queries: wgpu::QuerySet,
    resolved: wgpu::Buffer,
    readback: wgpu::Buffer,
    /// Each timed dispatch not yet read: its first query and its phase.
    timed: Vec<(u32, Phase)>,
    /// The next free query; the set's first query of the encoder being recorded.
    next: u32,
    first: u32,
    tick_ns: f32,
}

/// The timestamps of a step's dispatches, read after its submit.
pub struct Pending {
    readback: wgpu::Buffer,
    queries: u32,
    timed: Vec<(u32, Phase)>,
    tick_ns: f32,
}

impl Timer {
    /// A timer on `gpu`, whose ticks are `tick_ns` nanoseconds.
    pub fn new(gpu: &Gpu, counts: &mut Counts, tick_ns: f32) -> Timer {
        let bytes = 8 * QUERIES as u64;
        let queries = gpu.device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("phases"),
            ty: wgpu::QueryType::Timestamp,
            count: QUERIES,
        });
        let usage = wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC;
        let resolved = gpu.buffer(counts, "phases", bytes, usage);
        let usage = wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST;
        let readback = gpu.buffer(counts, "phases read-back", bytes, usage);
        Timer {
            queries,
            resolved,
            readback,
            timed: Vec::new(),
            next: 0,
            first: 0,
            tick_ns,
        }
    }

    /// A new encoder's first query (resolves start at a multiple of [`ALIGN`]).
    pub fn begin(&mut self) {
        self.next = self.next.next_multiple_of(ALIGN);
        self.first = self.next;
    }

    /// The timestamps for a pass of one dispatch of `phase`, or `None` once the set is full
    /// until the next read (the dispatch is then untimed: the step's other work).
    pub fn next(&mut self, phase: Phase) -> Option<wgpu::ComputePassTimestampWrites<'_>> {
        if self.next + 2 > QUERIES {
            return None;
        }
        let at = self.next;
        self.next += 2;
        self.timed.push((at, phase));
        Some(wgpu::ComputePassTimestampWrites {
            query_set: &self.queries,
            beginning_of_pass_write_index: Some(at),
            end_of_pass_write_index: Some(at + 1),
        })
    }

    /// After an encoder's passes: resolve the queries it wrote and copy them for reading.
    pub fn resolve(&mut self, encoder: &mut wgpu::CommandEncoder) {
        if self.next == self.first {
            return;
        }
        let (offset, bytes) = (8 * self.first as u64, 8 * (self.next - self.first) as u64);
        encoder.resolve_query_set(&self.queries, self.first..self.next, &self.resolved, offset);
        encoder.copy_buffer_to_buffer(&self.resolved, offset, &self.readback, offset, bytes);
    }

    /// What the dispatches timed since the last read wrote, to read once submitted; the set is
    /// free again.
    pub fn take(&mut self) -> Option<Pending> {
        let queries = std::mem::take(&mut self.next);
        self.first = 0;
        (!self.timed.is_empty()).then(|| Pending {
            readback: self.readback.clone(),
            queries,
            timed: std::mem::take(&mut self.timed),
            tick_ns: self.tick_ns,
        })
    }
}

impl Pending {
    /// Read the timestamps (the step's submit is done) and add each dispatch's time to its kind.
    pub async fn add_to(self, gpu: &Gpu, clock: &PhaseClock) -> Result<()> {
        let bytes = 8 * self.queries as u64;
        map(gpu, &self.readback, bytes).await?;
        let ticks: Vec<u64> = {
            let view = self.readback.slice(..bytes).get_mapped_range();
            match view {
                Ok(view) => bytemuck::cast_slice(&view).to_vec(),
                Err(_) => Vec::new(),
            }
        };
        self.readback.unmap();
        for (at, phase) in self.timed {
            let (Some(&start), Some(&end)) = (ticks.get(at as usize), ticks.get(at as usize + 1))
            else {
                continue;
            };
            // An end before its start (a clock that wrapped) counts as nothing, not as years.
            let ns = end.saturating_sub(start) as f64 * self.tick_ns as f64;
            clock.add(phase, ns as u64);
        }
        Ok(())
    }
}
