//! This GPU's ceilings, measured apart from any run, for the decode's bounds: the memory read
//! bandwidth a kernel reaches (each invocation combines a stride of a buffer far larger than the
//! caches, so each byte is read once) and what one more dispatch costs, end to end (recorded,
//! submitted and run: a pass of many dispatches of a one-word kernel against a pass of one).
//! Each is a difference of two timed submissions, so the fixed cost of submitting and reading
//! back drops out; each submission is the best of three. `bench` on the GPU and the page's WebGPU runs put
//! them against the decode (`meter::BandwidthCeiling`, `meter::DispatchFloor`).

use web_time::Instant;

use crate::error::Result;
use crate::gpu::device::{Counts, Gpu, map};
use crate::gpu::shaders::{Binding, Kernel, kernel};

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
pub async fn measure(gpu: &Gpu) -> Result<GpuCeilings> {
    use wgpu::BufferUsages as U;
    let most = gpu
        .limits
        .max_storage_buffer_binding_size
        .min(gpu.limits.max_buffer_size);
    let bytes = GPU_PROBE_BYTES.min(most) / 16 * 16;
    let mut counts = Counts::default();
    let data = gpu.buffer(&mut counts, "probe data", bytes, U::STORAGE);
    let out_bytes = 4 * (WORKGROUPS as u64 * 256);
    let out = gpu.buffer(
        &mut counts,
        "probe out",
        out_bytes,
        U::STORAGE | U::COPY_SRC,
    );
    let back = gpu.buffer(&mut counts, "probe back", 16, U::MAP_READ | U::COPY_DST);
    let read = kernel(gpu, "probe read", READ, &[Binding::Read, Binding::Write]);
    let empty = kernel(gpu, "probe dispatch", EMPTY, &[Binding::Write]);
    let read_group = gpu.bind_group(&mut counts, &read.layout, &[&data, &out]);
    let empty_group = gpu.bind_group(&mut counts, &empty.layout, &[&out]);
    let probe = Probe {
        gpu,
        out: &out,
        back: &back,
    };
    let reading = (&read, &read_group, WORKGROUPS);
    let dispatching = (&empty, &empty_group, 1);
    // The first submissions compile and warm the pipelines.
    probe.timed(reading, 1).await?;
    probe.timed(dispatching, 1).await?;
    let extra_read_ms = probe.difference(reading, READS).await?;
    let extra_dispatch_ms = probe.difference(dispatching, DISPATCHES).await?;
    gpu.check()?;
    Ok(GpuCeilings {
        read_gb_per_s: bytes as f64 * (READS - 1) as f64 / (extra_read_ms.max(1e-6) * 1e6),
        dispatch_us: extra_dispatch_ms * 1e3 / (DISPATCHES - 1) as f64,
        probe_bytes: bytes,
    })
}

struct Probe<'a> {
    gpu: &'a Gpu,
    out: &'a wgpu::Buffer,
    back: &'a wgpu::Buffer,
}

impl Probe<'_> {
    /// `n` dispatches' best time of three less one's best of three, in ms. (The best of three
    /// differences was 0 whenever one round's single dispatch met a slow moment: seen on
    /// lavapipe as a dispatch floor of 0 us.)
    async fn difference(&self, what: (&Kernel, &wgpu::BindGroup, u32), n: u32) -> Result<f64> {
        let (mut one, mut many) = (f64::INFINITY, f64::INFINITY);
        for _ in 0..3 {
            one = one.min(self.timed(what, 1).await?);
            many = many.min(self.timed(what, n).await?);
        }
        Ok((many - one).max(0.0))
    }

    /// `n` dispatches of `kernel` with `group` over `workgroups` in one pass, a word copied back,
    /// submitted and awaited: the time in ms.
    async fn timed(
        &self,
        (kernel, group, workgroups): (&Kernel, &wgpu::BindGroup, u32),
        n: u32,
    ) -> Result<f64> {
        let start = Instant::now();
        let mut encoder = self
            .gpu
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: None,
                timestamp_writes: None,
            });
            pass.set_pipeline(&kernel.pipeline);
            pass.set_bind_group(0, group, &[]);
            for _ in 0..n {
                pass.dispatch_workgroups(workgroups, 1, 1);
            }
        }
        encoder.copy_buffer_to_buffer(self.out, 0, self.back, 0, 16);
        self.gpu.queue.submit([encoder.finish()]);
        map(self.gpu, self.back, 16).await?;
        self.back.unmap();
        Ok(start.elapsed().as_secs_f64() * 1e3)
    }
}
