//! Where a GPU step's time goes: while a phase clock is on and the adapter has
//! `timestamp-query`, the step's launches run in CubeCL profile windows, one for each run of
//! launches of one kind (a layer's attention, then its three projections, ...), which CubeCL
//! times by the device's own timestamps at the start and end of the window's passes; each
//! window's time is added to its kind (`model/phases.rs`) once read.
//!
//! What this measures: the device's time in each run of dispatches, not the host's recording
//! and submitting, which the step's "other work" holds. A window costs a submit at each end and
//! CubeCL's three small buffers to resolve and read its timestamps, so a timed step costs more
//! than an untimed one (one in `GPU_TIMED_EVERY`: docs/figures.md has what it costs); its
//! launches are launched as they are, not replayed. Browsers round timestamps (Chrome to 100 us
//! without its developer flag), so a small model's windows read as 0 or 100 us each; their sum
//! over many is still an estimate of the whole.

use cubecl::profile::ProfileDuration;

use crate::gpu::device::Stream;
use crate::gpu::launch::{self, Launch};
use crate::model::phases::{Phase, PhaseClock};

/// The windows timed since the last read: each one's kind and its duration, resolved once the
/// device has run it.
#[derive(Default)]
pub struct Timer {
    windows: Vec<(Phase, ProfileDuration)>,
}

/// The timestamps of a step's windows, read after its submit.
pub struct Pending {
    windows: Vec<(Phase, ProfileDuration)>,
}

/// Launch `launches` on `stream` in a profile window for each run of one phase; returns the
/// windows. A window CubeCL refuses to open or close leaves its launches untimed (the step's
/// other work).
pub fn time<'a>(
    stream: &Stream,
    launches: impl Iterator<Item = (Phase, Launch<'a>)>,
) -> Vec<(Phase, ProfileDuration)> {
    let mut windows = Vec::new();
    let mut launches = launches.peekable();
    while let Some((phase, first)) = launches.next() {
        let window = stream.run(|client| client.profile_start());
        launch::launch(stream, first.kernel, first.count, first.buffers);
        while let Some((_, l)) = launches.next_if(|(p, _)| *p == phase) {
            launch::launch(stream, l.kernel, l.count, l.buffers);
        }
        if let Ok(window) = window
            && let Ok(duration) = stream.run(|client| client.profile_end(window))
        {
            windows.push((phase, duration));
        }
    }
    windows
}

impl Timer {
    pub fn extend(&mut self, windows: Vec<(Phase, ProfileDuration)>) {
        self.windows.extend(windows);
    }

    /// What the windows timed since the last read hold, to read once submitted.
    pub fn take(&mut self) -> Option<Pending> {
        (!self.windows.is_empty()).then(|| Pending {
            windows: std::mem::take(&mut self.windows),
        })
    }
}

impl Pending {
    /// Wait for each window's timestamps and add its time to its kind (a window the device could
    /// not time adds nothing).
    pub async fn add_to(self, clock: &PhaseClock) {
        for (phase, duration) in self.windows {
            if let Some(ticks) = duration.resolve().await {
                clock.add(phase, ticks.duration().as_nanos() as u64);
            }
        }
    }
}
