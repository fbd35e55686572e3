//! This GPU's ceilings, measured apart from any run, for the decode's bounds: the memory read
//! bandwidth a kernel reaches (each invocation combines a stride of a buffer far larger than the
//! caches, so each byte is read once) and what one more dispatch costs, end to end, as a step
//! pays it (a replayed graph of many dispatches of a one-word kernel against one of one). Both
//! kernels run through burn as the step's do (`launch.rs`). Each figure is a difference of two
//! timed submissions, so the fixed cost of submitting and reading back drops out; each
//! submission is the best of three. `bench` on the GPU and the page's WebGPU runs put them
//! against the decode (`meter::BandwidthCeiling`, `meter::DispatchFloor`).

use cubecl::server::Handle;
use web_time::Instant;

use crate::error::Result;
use crate::gpu::device::{Counts, Gpu, Stream};
use crate::gpu::launch::{self, Graph, Kernel, Launch};

/// The buffer read: 128 MiB (less where a binding holds less), as the page's CPU probe.
pub const GPU_PROBE_BYTES: u64 = 128 << 20;
/// Invocations that read it: 1,024 workgroups of 256.
const WORKGROUPS: u32 = 1024;
/// Reads timed against one; empty dispatches timed against one.
const READS: u32 = 5;
const DISPATCHES: u32 = 400;

const READ: &str = "
@group(0) @binding(0) var<storage, read> data: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let stride = groups.x * 256u;
    var acc = vec4<u32>(0u);
    for (var i = id.x; i < arrayLength(&data); i += stride) {
        acc ^= data[i];
    }
    out[id.x] = acc.x ^ acc.y ^ acc.z ^ acc.w;
}
";

/// One word written: every dispatch depends on the last, as a step's do.
const EMPTY: &str = "
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(1)
fn main() {
    out[0] += 1u;
}
";

/// What the probe measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuCeilings {
    pub read_gb_per_s: f64,
    /// What one more dispatch costs, in microseconds.
    pub dispatch_us: f64,
    /// The bytes the read kernel read a pass.
    pub probe_bytes: u64,
}

/// Measure `gpu`'s read bandwidth and dispatch cost.
pub async fn measure(gpu: &'static Gpu) -> Result<GpuCeilings> {
    let stream = Stream::new(gpu);
    let bytes = GPU_PROBE_BYTES.min(gpu.most_bytes()) / 16 * 16;
    let mut counts = Counts::default();
    let data = stream.buffer(&mut counts, bytes);
    let out = stream.buffer(&mut counts, 4 * (WORKGROUPS as u64 * 256));
    let (read, empty) = (Kernel::new(READ.into(), 256), Kernel::new(EMPTY.into(), 1));
    let reading = [data, out.clone()];
    let dispatching = [out.clone()];
    let probe = Probe {
        stream: &stream,
        out: &out,
    };
    // The first submissions compile and warm the pipelines.
    let (read_one, read_many) = (
        probe.graph(&read, &reading, WORKGROUPS, 1)?,
        probe.graph(&read, &reading, WORKGROUPS, READS)?,
    );
    let (dispatch_one, dispatch_many) = (
        probe.graph(&empty, &dispatching, 1, 1)?,
        probe.graph(&empty, &dispatching, 1, DISPATCHES)?,
    );
    probe.timed(&read_one).await?;
    probe.timed(&dispatch_one).await?;
    let extra_read_ms = probe.difference(&read_one, &read_many).await?;
    let extra_dispatch_ms = probe.difference(&dispatch_one, &dispatch_many).await?;
    gpu.check()?;
    Ok(GpuCeilings {
        read_gb_per_s: bytes as f64 * (READS - 1) as f64 / (extra_read_ms.max(1e-6) * 1e6),
        dispatch_us: extra_dispatch_ms * 1e3 / (DISPATCHES - 1) as f64,
        probe_bytes: bytes,
    })
}

struct Probe<'a> {
    stream: &'a Stream,
    out: &'a Handle,
}

impl Probe<'_> {
    /// `n` launches of `kernel` over `workgroups` binding `buffers`, captured into a graph.
    fn graph(&self, kernel: &Kernel, buffers: &[Handle], workgroups: u32, n: u32) -> Result<Graph> {
        let launches = (0..n).map(|_| Launch {
            kernel,
            buffers,
            count: [workgroups, 1, 1],
        });
        launch::capture(self.stream, launches)
    }

    /// `many`'s best time of three less `one`'s best of three, in ms. (The best of three
    /// differences was 0 whenever one round's single dispatch met a slow moment: seen on
    /// lavapipe as a dispatch floor of 0 us.)
    async fn difference(&self, one: &Graph, many: &Graph) -> Result<f64> {
        let (mut best_one, mut best_many) = (f64::INFINITY, f64::INFINITY);
        for _ in 0..3 {
            best_one = best_one.min(self.timed(one).await?);
            best_many = best_many.min(self.timed(many).await?);
        }
        Ok((best_many - best_one).max(0.0))
    }

    /// `graph` replayed, a word read back (submitted with it) and awaited: the time in ms.
    async fn timed(&self, graph: &Graph) -> Result<f64> {
        let start = Instant::now();
        launch::replay(self.stream, graph)?;
        let word = self.out.clone().offset_end(self.out.size_in_used() - 16);
        launch::read(self.stream, vec![word]).await?;
        Ok(start.elapsed().as_secs_f64() * 1e3)
    }
}
