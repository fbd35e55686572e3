//! The `tokenometer` command; everything lives in the library's `api::cli` module.

#[cfg(not(target_arch = "wasm32"))]
fn main() -> std::process::ExitCode {
    tokenometer::api::cli::main()
}

/// The command line is native only; the wasm build serves the page's worker.
#[cfg(target_arch = "wasm32")]
fn main() {}
