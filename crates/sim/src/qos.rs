//! A server's QoS target, checked as the DID study's load generator
//! measures it. libmemcached's memaslap (`clients/ms_conn.c`,
//! `ms_thread.c`) runs every connection as a closed loop: it writes one
//! command, reads the whole response, then writes the next, so a
//! connection has one request outstanding and sends again at once; a
//! request is timed from its send to its response. Its one pacing,
//! `--tps`, never holds a connection back below one operation per
//! microsecond (its rate is an integer quotient that is 0 there), so it
//! cannot offer less than the loop's back-to-back rate. The peak rate at
//! which 95 % of requests finish within the target is therefore that
//! rate, when its 95th percentile meets the target; a run whose
//! percentile misses says so (`QosCheck::met`), since the clients have no
//! lower load to offer.

use dirq_stats::nearest_rank;

use crate::metrics::QosCheck;

/// The check of `latencies_ns` (one per answered request) against
/// `target_ms`; a run with no answer misses it.
pub(crate) fn check(latencies_ns: &[u64], target_ms: u64) -> QosCheck {
    let mut sorted = latencies_ns.to_vec();
    sorted.sort_unstable();
    let p95_ns = nearest_rank(&sorted, 95);
    QosCheck {
        target_ms,
        p95_ns,
        met: QosCheck::meets(p95_ns, target_ms),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_95th_percentile_decides_the_target() {
        // 100 requests: 95 of 1 ms, 5 of 50 ms.
        let mut latencies = vec![1_000_000; 95];
        latencies.extend([50_000_000; 5]);
        let qos = check(&latencies, 10);
        assert_eq!((qos.p95_ns, qos.met), (Some(1_000_000), true));
        // One more slow request puts the 95th past the target.
        latencies[0] = 50_000_000;
        let qos = check(&latencies, 10);
        assert_eq!((qos.p95_ns, qos.met), (Some(50_000_000), false));
    }

    #[test]
    fn a_run_with_no_answer_misses_the_target() {
        let qos = check(&[], 10);
        assert_eq!((qos.p95_ns, qos.met), (None, false));
    }
}
