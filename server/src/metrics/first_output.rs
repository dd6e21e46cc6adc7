//! [`FirstOutput`]: a created sandbox's wait for its first program's first
//! output, timed into the histogram of its origin.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use prometheus_client::metrics::histogram::Histogram;

/// A created sandbox's wait for its first program's first output: the
/// first start to claim it observes the time since its create at that
/// program's first output; every later start finds it claimed.
#[derive(Debug, Clone)]
pub struct FirstOutput(Arc<Awaiting>);

#[derive(Debug)]
struct Awaiting {
    histogram: Histogram,
    begun: Instant,
    claimed: AtomicBool,
}

impl FirstOutput {
    /// A wait begun at `begun`, observed into `histogram`.
    pub(super) fn new(histogram: Histogram, begun: Instant) -> Self {
        FirstOutput(Arc::new(Awaiting {
            histogram,
            begun,
            claimed: AtomicBool::new(false),
        }))
    }

    /// For the sandbox's first program only: what observes its first
    /// output.
    pub fn claim(&self) -> Option<FirstOutputClaim> {
        if self.0.claimed.swap(true, Ordering::Relaxed) {
            return None;
        }
        Some(FirstOutputClaim(Arc::clone(&self.0)))
    }
}

/// Observes the first output of a sandbox's first program.
#[derive(Debug)]
pub struct FirstOutputClaim(Arc<Awaiting>);

impl FirstOutputClaim {
    /// The program's first output came now.
    pub fn observe(self) {
        self.0
            .histogram
            .observe(self.0.begun.elapsed().as_secs_f64());
    }
}
