//! The JavaScript API that the page's Web Worker uses (wasm only): load a model from bytes, pick the
//! backend and quantization, warm up; then a run (or a concurrency lab of many simulated users in
//! one batch) is started and advanced by `pump`, a slice of time at a time, so that the worker
//! hears a cancel between pumps on every backend.
//!
//! Every pump's events reach JavaScript with the meter's report as of that moment, so the page
//! shows figures computed by the same Rust code as the CLI.

mod chat;
mod digest;
mod endpoint;
mod endpoint_lab;
mod fit;
mod gpu_ceilings;
mod js;
mod lab;
mod options;
mod probe;
mod session;

use wasm_bindgen::prelude::*;

use crate::api::web::js::{js_error, to_js};

pub use chat::ChatRun;
pub use digest::Sha256;
pub use endpoint::EndpointRun;
pub use endpoint_lab::EndpointLab;
pub use fit::check_fit;
pub use lab::Lab;
pub use probe::measure_read_bandwidth;
pub use session::{Run, Session, load_session};

/// Leave the cause of a fatal failure where the worker's JavaScript can read it after the wasm
/// instance traps: `globalThis.tokenometerFatalKind` (`"panic"` or `"oom"`) and
/// `globalThis.tokenometerFatal` (the message). A trap unwinds past every Rust frame, so the
/// message has to be out of wasm memory before it happens. Writing a JS string allocates nothing
/// in wasm memory, which matters when the cause is that memory ran out.
fn record_fatal(kind: &str, message: &str) {
    let global = js_sys::global();
    let _ = js_sys::Reflect::set(&global, &"tokenometerFatal".into(), &message.into());
    let _ = js_sys::Reflect::set(&global, &"tokenometerFatalKind".into(), &kind.into());
}

/// What the engine recorded before its last trap, `(kind, message)`, as the worker reads it.
pub fn recorded_fatal() -> (Option<String>, Option<String>) {
    let global = js_sys::global();
    let get = |key: &str| {
        js_sys::Reflect::get(&global, &key.into())
            .ok()
            .and_then(|v| v.as_string())
    };
    (get("tokenometerFatalKind"), get("tokenometerFatal"))
}

/// Install a panic hook that logs to the console and records the message for the worker (see `record_fatal`): a panic in wasm traps,
/// and the page shows this message instead of "unreachable". And run the module's constructors,
/// once (see `__wasm_call_ctors`).
#[wasm_bindgen(start)]
pub fn start() {
    // The GPU's crates have constructors (pliron, under CubeCL, registers its IR's parts through
    // `inventory`), and the wasm linker calls a module's constructors at the top of every function
    // it exports unless one of them calls them itself ("command-style linkage"): every call from
    // JS into the engine ran them again, which cost the page's CPU decode 8% (SmolLM2 Q4_1 at q8,
    // 1 thread: 81.5 against 88.4 tok/s, inter-token p50 12.7 against 11.3 ms). This start
    // function, which wasm-bindgen's glue calls once at instantiation, calls them instead.
    #[cfg(feature = "gpu")]
    // Safety: the linker's own initializer, run once, before anything else in the module runs.
    unsafe {
        __wasm_call_ctors()
    };
    std::panic::set_hook(Box::new(|info| {
        let message = match info.payload_as_str() {
            Some(text) => text.to_string(),
            None => info.to_string(),
        };
        let place = info
            .location()
            .map(|l| format!(" (at {}:{})", l.file(), l.line()))
            .unwrap_or_default();
        record_fatal("panic", &format!("{message}{place}"));
        console_error_panic_hook::hook(info);
    }));
}

#[cfg(feature = "gpu")]
unsafe extern "C" {
    /// The constructors of every crate in the module, which the wasm linker synthesizes.
    fn __wasm_call_ctors();
}

/// The global allocator in wasm: the system one (dlmalloc), recording an allocation that fails
/// before Rust aborts on it. Without this, running out of wasm memory shows nothing at all.
struct RecordingAllocator;

#[global_allocator]
static ALLOCATOR: RecordingAllocator = RecordingAllocator;

// SAFETY: every call is passed to `System` unchanged; only a null result is observed.
unsafe impl std::alloc::GlobalAlloc for RecordingAllocator {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        let p = unsafe { std::alloc::System.alloc(layout) };
        if p.is_null() {
            out_of_memory(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        let p = unsafe { std::alloc::System.alloc_zeroed(layout) };
        if p.is_null() {
            out_of_memory(layout.size());
        }
        p
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, size: usize) -> *mut u8 {
        let p = unsafe { std::alloc::System.realloc(ptr, layout, size) };
        if p.is_null() {
            out_of_memory(size);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
}

/// Record "could not allocate N MB (...)" without allocating: the text is formatted into a buffer
/// on the stack.
fn out_of_memory(size: usize) {
    use std::fmt::Write;
    struct Buffer {
        bytes: [u8; 256],
        len: usize,
    }
    impl Write for Buffer {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            let n = s.len().min(self.bytes.len() - self.len);
            self.bytes[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
            self.len += n;
            Ok(())
        }
    }
    let mut buffer = Buffer {
        bytes: [0; 256],
        len: 0,
    };
    let memory = core::arch::wasm32::memory_size(0) as f64 * 65536.0;
    let _ = write!(
        buffer,
        "could not allocate {:.1} MB more; this tab's WebAssembly memory already holds {:.1} MB and \
         cannot grow past 4096 MB",
        size as f64 / 1e6,
        memory / 1e6
    );
    // Cut at a character boundary in case the buffer filled up.
    let text = match std::str::from_utf8(&buffer.bytes[..buffer.len]) {
        Ok(text) => text,
        Err(e) => std::str::from_utf8(&buffer.bytes[..e.valid_up_to()]).unwrap_or_default(),
    };
    record_fatal("oom", text);
}

/// Panic inside an async call, as a bug in the engine would. The end-to-end tests use it to check
/// that the page names the cause of a crash and restarts the engine: no input is known to make the
/// engine panic, so nothing else can trigger that path.
#[wasm_bindgen(js_name = panicForTests)]
pub async fn panic_for_tests(message: String) {
    futures_lite::future::yield_now().await;
    panic!("{message}");
}

/// This build's CPU kernels against the scalar ones (`cpu::check_against_scalar`): the
/// end-to-end tests run it in both of the page's builds, since only this way do the relaxed SIMD
/// kernels of `pkg/relaxed/` get checked in a browser.
#[wasm_bindgen(js_name = kernelCheckForTests)]
pub fn kernel_check_for_tests() -> Result<JsValue, JsError> {
    serde_wasm_bindgen::to_value(&crate::cpu::check_against_scalar()).map_err(js_error)
}

/// Each pair's figure over the other (`[a0, b0, a1, b1, ...]` gives `[a0 / b0, a1 / b1, ...]`,
/// `null` where undefined), by the meter's rule, for the lanes' verdicts.
#[wasm_bindgen]
pub fn versus(pairs: Vec<f64>) -> JsValue {
    let defined = |v: f64| (!v.is_nan()).then_some(v);
    let ratios: Vec<Option<f64>> = pairs
        .chunks_exact(2)
        .map(|p| crate::meter::versus(defined(p[0]), defined(p[1])))
        .collect();
    to_js(&ratios)
}

/// The spread of repeated measurements of one figure (`{ n, median, min, max }`, or `null` when
/// no value is finite), computed by the meter's own rule so that the page computes no figure.
#[wasm_bindgen]
pub fn spread(values: Vec<f64>) -> JsValue {
    to_js(&crate::meter::spread(&values))
}
