//! The `tokenometer` command; everything lives in the library's `api::cli` module.

/// mimalloc natively: it keeps freed memory for the next allocation, where glibc's malloc hands a
/// prompt's large activations (a few MB a product) back to the OS and faults fresh zeroed pages in
/// for the next one. Measured (SmolLM2 Q8_0, 530-token prompt, 2 threads, 2 interleaved rounds of
/// 5 runs, prefill tok/s median): 554 / 605 with glibc's defaults against 744 / 704 with its
/// mmap and trim thresholds raised out of the way.
#[cfg(not(target_arch = "wasm32"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[cfg(not(target_arch = "wasm32"))]
fn main() -> std::process::ExitCode {
    tokenometer::api::cli::main()
}

/// The command line is native only; the wasm build serves the page's worker.
#[cfg(target_arch = "wasm32")]
fn main() {}
