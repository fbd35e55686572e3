//! `bench --profile`: where a decode step's time goes, by the engine's own timers
//! ([`PhaseFigures`](crate::meter::PhaseFigures)), as a table.

use crate::meter::{PhaseSplit, Report, spread};

/// The timed runs' phases: each part's median over the runs of its mean a decode step, and its
/// share of the gap between tokens; nothing when no run was timed by phase. On a `gpu`, the parts
/// are the device's time in each kind of dispatch (`gpu/timer.rs`).
pub(super) fn print_phases(reports: &[Report], gpu: bool) {
    let figures: Vec<_> = reports.iter().filter_map(|r| r.phases.as_ref()).collect();
    if figures.is_empty() {
        return;
    }
    // The meter's median (nearest rank), as every other spread it reports.
    let median_of = |v: &[f64]| spread(v).map(|s| s.median);
    let median = |f: &dyn Fn(&PhaseSplit) -> f64| {
        let v: Vec<f64> = figures.iter().map(|p| f(&p.decode)).collect();
        median_of(&v).unwrap_or(0.0)
    };
    let gaps: Vec<f64> = figures.iter().filter_map(|p| p.gap_ms).collect();
    let gap = median_of(&gaps);
    let steps = figures.iter().map(|p| p.steps).sum::<usize>();
    let timers = if gpu {
        "the device's timestamps around each run of dispatches of one kind"
    } else {
        "the engine's own timers"
    };
    println!(
        "where a decode step's time goes ({timers}; median of {} runs, {steps} steps in all):",
        figures.len()
    );
    println!("  {:<26} {:>10} {:>8}", "part", "ms a step", "share");
    // Shares of the gap, or of the step where a timed step is longer than the gap (a GPU's: its
    // timed steps run a pass a dispatch), so that they never pass 100%.
    let whole = gap.unwrap_or(0.0).max(median(&|s| s.step_ms));
    let row = |name: &str, ms: f64| {
        println!("  {name:<26} {ms:>10.3} {:>7.1}%", 100.0 * ms / whole);
    };
    let parts = figures[0].decode.parts();
    for (i, (name, _)) in parts.iter().enumerate() {
        // A GPU's norms and activations run inside its other dispatches (said below).
        if !(gpu && *name == "norms and activations") {
            row(name, median(&|s| s.parts()[i].1));
        }
    }
    let step = median(&|s| s.step_ms);
    if let Some(gap) = gap {
        row("between steps", (gap - step).max(0.0));
        row("the gap between tokens", gap);
    } else {
        row("the engine's step", step);
    }
    if gpu {
        println!(
            "  on the GPU a dispatch is fused: attention's holds its norm and the q, k and v \
             products, the projections' the others with their norms and activations; the \
             engine's other work is the host's recording and submitting and the device's time \
             between dispatches (while timed, each run of one kind of dispatch is a CubeCL \
             profile window of its own)"
        );
    }
    if let Some(prefill) = figures[0].prefill {
        let shares: Vec<String> = prefill
            .parts()
            .iter()
            .map(|(name, ms)| format!("{name} {:.0}%", 100.0 * ms / prefill.step_ms.max(1e-9)))
            .collect();
        println!(
            "  the prefill's pass (the first timed run): {:.2} ms: {}",
            prefill.step_ms,
            shares.join(", ")
        );
    }
}
