//! The packed kernels alone: one matrix of made-up weights against a number of activation rows,
//! on this machine's best instruction set, the best of 20 calls in billions of multiply-adds a
//! second. A matrix that fits in the core's caches measures the kernel; one of tens of MB, memory.
//!
//! `cargo run --release --example kernel_bench -- ROWS COLS T [q8_0|q4_0]`, e.g. `576 1536 512`
//! (a prompt's rows against SmolLM2's down projection) or `1536 576 8` (8 users' decode step).
//! Compare two builds in turn, in one run (this host's speed drifts).

use tokenometer::cpu::{self as kernels, Isa, Q8Rows};
use tokenometer::formats::{Blocks, Format};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let numbers: Vec<usize> = args.iter().take(3).filter_map(|a| a.parse().ok()).collect();
    let format = match args.get(3).map(String::as_str) {
        None | Some("q8_0") => Some(Format::Q8_0),
        Some("q4_0") => Some(Format::Q4_0),
        Some(_) => None,
    };
    let (&[rows, cols, t], Some(format)) = (numbers.as_slice(), format) else {
        eprintln!(
            "usage: kernel_bench ROWS COLS T [q8_0|q4_0] (COLS a multiple of 32, all above 0)"
        );
        std::process::exit(2);
    };
    if rows == 0 || t == 0 || cols == 0 || !cols.is_multiple_of(32) {
        eprintln!("kernel_bench: ROWS and T must be above 0 and COLS a multiple of 32 above 0");
        std::process::exit(2);
    }
    let w = kernels::check_values(rows * cols, 1);
    let x = kernels::check_values(t * cols, 2);
    let mut xq = Q8Rows::default();
    kernels::quantize_rows_q8(&x, cols, &mut xq);
    let packed = tokenometer::cpu::packed::Packed::pack(rows, cols, Blocks::quantize(format, &w));
    let isa = Isa::detect();
    let mut out = vec![0.0; t * rows];
    let mut best = f64::MAX;
    for _ in 0..20 {
        let start = std::time::Instant::now();
        tokenometer::cpu::packed::matmul(isa, &packed, &xq, t, &mut out);
        best = best.min(start.elapsed().as_secs_f64());
    }
    let macs = (rows * cols * t) as f64;
    println!(
        "{rows}x{cols} {format:?}, {t} rows, {isa:?}: best {:.3} ms, {:.1} billion multiply-adds/s (checksum {})",
        best * 1e3,
        macs / best / 1e9,
        out.iter().sum::<f32>()
    );
}
