//! The wgpu backend (Vulkan or Metal natively, WebGPU in the browser): the forward pass's
//! operations on burn tensors ([`DeviceOps`]), with tokenometer's own CubeCL kernels
//! (`kernels.rs`) launched through a burn backend extension (`launch.rs`).

mod kernels;
mod launch;
pub mod ops;

pub use ops::DeviceOps;

/// Run the wasm module's static constructors, once per instance.
///
/// They are `inventory` registrations: cubecl's IR registers its operations that way. A module
/// that never calls `__wasm_call_ctors` itself is linked "command-style": wasm-ld makes every
/// export, down to the helpers wasm-bindgen's JS calls for each object passed, run all constructors
/// first. Profiled in the page's worker on WebGPU (stories260K, SwiftShader), that was more than
/// half of the worker's time (4.1 of 7.5 s), and decode went from 2.4 to 46 tok/s without it.
/// Called from the wasm API's start and from the wgpu backend's initialization
/// (wasm-bindgen-test binaries have no start).
#[cfg(target_arch = "wasm32")]
pub fn run_constructors() {
    unsafe extern "C" {
        /// Runs the module's static constructors; synthesized by the linker (wasm-ld).
        fn __wasm_call_ctors();
    }
    static ONCE: std::sync::Once = std::sync::Once::new();
    // SAFETY: the linker's constructors, run once, before anything uses what they register.
    ONCE.call_once(|| unsafe { __wasm_call_ctors() });
}
