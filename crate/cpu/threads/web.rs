//! The pool's workers in the page: Web Workers started from the engine's own worker, each loading
//! this build's JavaScript glue with the module already compiled and the one shared memory, then
//! running the pool's [`work`](super::pool::work) loop until the pool is dropped. Only the
//! threaded build (`target_feature = "atomics"`: shared memory, `make pkg`'s pkg/threads/) can;
//! the others say so.

use std::sync::Arc;

use super::pool::State;

#[cfg(target_feature = "atomics")]
mod bindings {
    use wasm_bindgen::prelude::*;

    #[wasm_bindgen(inline_js = r#"
// A CPU thread: load the engine's glue, instantiate the compiled module on the shared memory
// (which gives this thread its own stack), and run the pool's loop. If anything fails it sets the
// pool's `failed` word, so that the engine stops waiting for parts this thread took.
const SOURCE = `self.onmessage = async ({ data: [glue, module, memory, state, failed] }) => {
  try {
    const engine = await import(glue);
    await engine.default({ module_or_path: module, memory });
    engine.tokenometerCpuThread(state);
  } catch (e) {
    Atomics.store(new Int32Array(memory.buffer), failed >>> 2, 1);
    console.error('tokenometer: a CPU thread failed:', e);
  }
  close();
};`;
let source = null;
export function spawnCpuThread(module, memory, state, failed) {
  // wasm-bindgen puts this file in snippets/<crate>-<hash>/ beside the glue (tokenometer.js,
  // unless a host names it otherwise: the wasm-bindgen tests set globalThis.tokenometerGlue).
  const glue = globalThis.tokenometerGlue ?? new URL('../../tokenometer.js', import.meta.url).href;
  source ??= URL.createObjectURL(new Blob([SOURCE], { type: 'text/javascript' }));
  new Worker(source, { type: 'module', name: 'tokenometer CPU thread' })
    .postMessage([glue, module, memory, state, failed]);
}
"#)]
    extern "C" {
        #[wasm_bindgen(catch, js_name = spawnCpuThread)]
        pub fn spawn_cpu_thread(
            module: JsValue,
            memory: JsValue,
            state: u32,
            failed: u32,
        ) -> Result<(), JsValue>;
    }
}

/// Start a Web Worker that runs the pool's loop on `state`.
#[cfg(target_feature = "atomics")]
pub fn spawn(state: Arc<State>) -> Result<(), String> {
    let failed = state.failed.as_ptr() as usize as u32;
    // The worker owns this reference to the state (`tokenometer_cpu_thread` takes it back).
    let state = Arc::into_raw(state);
    bindings::spawn_cpu_thread(
        wasm_bindgen::module(),
        wasm_bindgen::memory(),
        state as usize as u32,
        failed,
    )
    .map_err(|e| {
        // SAFETY: the worker was not started, so the reference is still ours.
        drop(unsafe { Arc::from_raw(state) });
        format!("cannot start a CPU thread (a Web Worker): {e:?}")
    })
}

#[cfg(not(target_feature = "atomics"))]
pub fn spawn(_state: Arc<State>) -> Result<(), String> {
    Err("this build of the engine runs the CPU kernels on one thread (the threaded build needs a cross-origin isolated page and a browser with shared memory)".into())
}

/// A CPU thread's life, called by the Web Worker `spawn` started: the pool's loop, until the pool
/// is dropped. Not for other callers: `state` is the pointer `spawn` handed that worker.
#[cfg(target_feature = "atomics")]
#[wasm_bindgen::prelude::wasm_bindgen(js_name = tokenometerCpuThread)]
#[doc(hidden)]
pub fn tokenometer_cpu_thread(state: u32) {
    // SAFETY: `spawn` leaked one reference to this worker, which takes it back once.
    let state = unsafe { Arc::from_raw(state as usize as *const State) };
    super::pool::work(&state);
}
