//! Live counts of what the proxy holds open, kept by the parts that open it. They know no protocol; a
//! metrics endpoint can export them as they are.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// How many client connections and runs are open right now, across every route and serving thread.
#[derive(Debug, Default)]
pub struct Gauges {
    connections: AtomicUsize,
    runs: AtomicUsize,
}

impl Gauges {
    /// Client connections open (HTTP/1.1 and HTTP/2 alike).
    pub fn open_connections(&self) -> usize {
        self.connections.load(Ordering::Acquire)
    }

    /// Runs started and not ended yet (a run a client left still counts until it has cancelled its upstream).
    pub fn runs_in_flight(&self) -> usize {
        self.runs.load(Ordering::Acquire)
    }

    /// Counts a connection until the returned guard drops, unless `max` are open already.
    pub(crate) fn open_connection(self: &Arc<Self>, max: usize) -> Option<Counted> {
        self.connections
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()?;
        Some(Counted {
            gauges: Arc::clone(self),
            gauge: |gauges| &gauges.connections,
        })
    }

    /// Counts a run until the returned guard drops.
    pub(crate) fn start_run(self: &Arc<Self>) -> Counted {
        self.runs.fetch_add(1, Ordering::AcqRel);
        Counted {
            gauges: Arc::clone(self),
            gauge: |gauges| &gauges.runs,
        }
    }
}

/// One thing's place in a gauge, given back when it is dropped (however the thing ends).
pub(crate) struct Counted {
    gauges: Arc<Gauges>,
    gauge: fn(&Gauges) -> &AtomicUsize,
}

impl Drop for Counted {
    fn drop(&mut self) {
        (self.gauge)(&self.gauges).fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_lasts_as_long_as_its_guard() {
        let gauges = Arc::new(Gauges::default());
        let run = gauges.start_run();
        let first = gauges.open_connection(2).expect("room for one");
        let second = gauges.open_connection(2).expect("room for two");
        assert!(gauges.open_connection(2).is_none(), "at most two");
        assert_eq!((gauges.open_connections(), gauges.runs_in_flight()), (2, 1));
        drop((first, run));
        assert_eq!((gauges.open_connections(), gauges.runs_in_flight()), (1, 0));
        drop(second);
        assert_eq!(gauges.open_connections(), 0);
    }
}
