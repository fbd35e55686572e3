//! The GPU backend, on burn (burn-wgpu and CubeCL: Vulkan, Metal or DX12 natively, WebGPU in the
//! browser): the forward pass's halves as tokenometer's own WGSL kernels (`shaders/`), launched
//! through burn's `template` feature, in a step planned once, captured into a burn graph and
//! replayed (`plan.rs`, `launch.rs`) with nothing created per token. burn and CubeCL make every
//! GPU object; the rest of the crate names neither (`tests/layers.rs`).
//!
//! Why its own kernels, fused a layer's half at a time: on a GPU every dispatch costs
//! microseconds of encoding, validation and idle time whatever its size, and for the small models
//! the page offers that, not arithmetic, bounds a decode step. On the H200 lent to this project,
//! SmolLM2-135M's shape decoded at 51 tok/s with 13 dispatches a layer (docs/measurements.md).
//! Here a layer is 4 and a decode step `4 x layers + 2` (`ops.rs` has the table).
//!
//! The projections read the stored blocks as they are (Q8_0, Q4_0 with offsets for Q4_1 and
//! Q4_K, Q5_0 with offsets for Q5_1 and Q5_K, Q6_K; `layer.rs`), dequantized in registers, with
//! f32 activations; reductions use workgroup memory, not subgroup operations, which not every
//! WebGPU adapter has.

pub mod device;
mod launch;
mod layer;
mod ops;
mod plan;
pub mod probe;
mod shaders;
mod timer;

pub use device::{Counts, Gpu, Granted, init};
pub use ops::DeviceOps;
pub use shaders::supports;
