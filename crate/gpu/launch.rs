//! tokenometer's WGSL kernels launched through burn, and a step's launches captured once into a
//! graph and replayed.
//!
//! A kernel is WGSL text run by burn-wgpu's `template` feature (`KernelSource`, `SourceKernel`):
//! CubeCL compiles it once per device into a pipeline, and each launch names its buffers (CubeCL
//! handles) and workgroups. A launch builds a bind group as it runs. A graph does not: burn's
//! `Backend::graph_start_capture` / `graph_stop_capture` record launches instead of running
//! them, CubeCL's wgpu server resolving each one's pipeline and building its bind group once
//! (`cubecl-wgpu`'s `compute/graph.rs`), and `graph_replay` encodes the recorded dispatches
//! again, into the stream's one command buffer, with nothing made. The step's plan (`plan.rs`)
//! captures each shape of step it meets and replays it from then on.

use std::sync::Arc;

use burn_backend::{Backend, BackendGraph};
use burn_wgpu::{CubeBackend, KernelSource, SourceKernel, SourceTemplate};
use cubecl::prelude::KernelId;
use cubecl::server::{Handle, KernelArguments};
use cubecl::{CubeCount, CubeDim};

use crate::error::{Error, Result};
use crate::gpu::device::{Stream, one_line, server_error};

/// A WGSL kernel: its source (with the model's shape written in) and a key for CubeCL's
/// pipeline cache, which two models of one shape share.
#[derive(Clone)]
pub struct Kernel {
    source: Arc<str>,
    key: u64,
    workgroup: u32,
}

impl Kernel {
    /// A kernel of `source`, whose entry point is `main` with `@workgroup_size(workgroup)`.
    pub fn new(source: String, workgroup: u32) -> Kernel {
        Kernel {
            key: fnv1a(source.as_bytes()),
            source: source.into(),
            workgroup,
        }
    }
}

/// 64-bit FNV-1a: a kernel's source as its pipeline's cache key.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// burn's view of a [`Kernel`]: WGSL text for the `template` feature.
struct Wgsl(Kernel);

impl KernelSource for Wgsl {
    fn source(&self) -> SourceTemplate {
        SourceTemplate::new(self.0.source.to_string())
    }

    fn id(&self) -> KernelId {
        KernelId::new::<Self>().info(self.0.key)
    }

    fn lang(&self) -> &'static str {
        "wgsl"
    }
}

/// Launch `kernel` over `count` workgroups with `buffers` bound in order (binding 0, 1, ...).
pub fn launch(stream: &Stream, kernel: &Kernel, count: [u32; 3], buffers: &[Handle]) {
    let bindings = buffers.iter().map(|b| b.clone().binding()).collect();
    let source = SourceKernel::new(Wgsl(kernel.clone()), CubeDim::new_1d(kernel.workgroup));
    stream.run(|client| {
        client.launch(
            Box::new(source),
            CubeCount::Static(count[0], count[1], count[2]),
            KernelArguments::new().with_buffers(bindings),
        )
    });
}

/// One launch of a step: the kernel, its buffers and its workgroups.
pub struct Launch<'a> {
    pub kernel: &'a Kernel,
    pub buffers: &'a [Handle],
    pub count: [u32; 3],
}

/// A captured sequence of launches, replayed against the buffers it was captured with (which
/// the plan keeps alive as long as the graph).
pub struct Graph(BackendGraph<CubeBackend>);

/// Record `launches` into a graph on `stream` (nothing runs until it is replayed).
pub fn capture<'a>(stream: &Stream, launches: impl Iterator<Item = Launch<'a>>) -> Result<Graph> {
    let device = stream.gpu.device.clone();
    let failed = |e: burn_backend::ExecutionError| {
        Error::Device(format!(
            "capturing a GPU step failed: {}",
            one_line(&e.to_string())
        ))
    };
    stream.run(|_| CubeBackend::graph_prepare(&device).map_err(failed))?;
    stream.run(|_| CubeBackend::graph_start_capture(&device).map_err(failed))?;
    for l in launches {
        launch(stream, l.kernel, l.count, l.buffers);
    }
    let graph = stream.run(|_| CubeBackend::graph_stop_capture(&device).map_err(failed))?;
    Ok(Graph(graph))
}

/// Replay `graph` on `stream`, after the work and writes issued on it before.
pub fn replay(stream: &Stream, graph: &Graph) -> Result<()> {
    let device = stream.gpu.device.clone();
    // Safety: every buffer the graph binds is held by the plan for as long as the graph
    // (`Plan::graphs` is cleared before any of them is replaced), and every write and read of
    // them is issued on this same stream, so ordered against the replay.
    stream
        .run(|_| unsafe { CubeBackend::graph_replay(&device, &graph.0) })
        .map_err(|e| {
            Error::Device(format!(
                "replaying a GPU step failed: {}",
                one_line(&e.to_string())
            ))
        })
}

/// Read `handles` back, as bytes each: their copies are issued now, after everything issued on
/// the stream before, and submitted with it (one submit); the future waits for them.
pub fn read(
    stream: &Stream,
    handles: Vec<Handle>,
) -> impl Future<Output = Result<Vec<cubecl::bytes::Bytes>>> + Send + 'static {
    let reading = stream.run(|client| client.read_async(handles));
    async move { reading.await.map_err(server_error) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_sources_have_two_keys_and_one_source_one() {
        let a = Kernel::new("const A: u32 = 1u;".into(), 256);
        let b = Kernel::new("const A: u32 = 2u;".into(), 256);
        assert_ne!(a.key, b.key);
        assert_eq!(a.key, Kernel::new("const A: u32 = 1u;".into(), 64).key);
    }
}
