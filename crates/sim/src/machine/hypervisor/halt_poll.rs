//! KVM's adaptive halt polling (virt/kvm/kvm_main.c, Linux 4.3 to 5.x,
//! `kvm_vcpu_block`, `grow_halt_poll_ns`, `shrink_halt_poll_ns`): a halted
//! vCPU's thread polls for a wake-up for its own window before it sleeps;
//! after each block KVM resizes the window from how long the vCPU was
//! blocked:
//!
//! - a block no longer than the window: it stays;
//! - a block longer than `halt_poll_ns` (the module parameter, the most
//!   any window may be) with a window open: it shrinks (`halt_poll_ns_shrink`,
//!   0 by default: back to no polling);
//! - a block shorter than `halt_poll_ns` with a window below it: it grows
//!   (`halt_poll_ns_grow`, 2 by default; from 0 to a 10 us base), at most
//!   to `halt_poll_ns`;
//! - `halt_poll_ns` = 0: no window.
//!
//! A polled vCPU is out of guest mode: an interrupt for it ends the poll,
//! KVM re-enters it, and when its guest halts again it takes a new HLT
//! exit.

use crate::profile::HaltPolling;

/// One vCPU's adaptive window (`vcpu->halt_poll_ns`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(in crate::machine) struct PollWindow {
    pub(in crate::machine) ns: u64,
}

impl PollWindow {
    /// KVM resizes the window after a block of `block_ns` under the
    /// module's `max_ns` (`halt_poll_ns`) and `rules`.
    pub(in crate::machine) fn after_block(
        &mut self,
        block_ns: u64,
        max_ns: u64,
        rules: &HaltPolling,
    ) {
        if max_ns == 0 {
            self.ns = 0;
            return;
        }
        if block_ns <= self.ns {
            // The window covered the wait.
            return;
        }
        if self.ns > 0 && block_ns > max_ns {
            self.ns = match rules.shrink {
                0 => 0,
                shrink => self.ns / u64::from(shrink),
            };
        } else if self.ns < max_ns && block_ns < max_ns {
            let grown = if self.ns == 0 && rules.grow > 0 {
                rules.grow_start_ns
            } else {
                self.ns.saturating_mul(u64::from(rules.grow))
            };
            self.ns = grown.min(max_ns);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: u64 = 200_000;

    fn kvm() -> HaltPolling {
        HaltPolling::default()
    }

    #[test]
    fn a_short_wait_grows_the_window_from_the_base_doubling_to_the_cap() {
        let mut window = PollWindow::default();
        let mut seen = Vec::new();
        for _ in 0..7 {
            // Each wake-up comes after 190 us: longer than every window
            // below the cap, shorter than halt_poll_ns.
            window.after_block(190_000, MAX, &kvm());
            seen.push(window.ns);
        }
        assert_eq!(
            seen,
            [10_000, 20_000, 40_000, 80_000, 160_000, 200_000, 200_000]
        );
    }

    #[test]
    fn a_wait_the_window_covered_leaves_it() {
        let mut window = PollWindow { ns: 40_000 };
        window.after_block(5_000, MAX, &kvm());
        assert_eq!(window.ns, 40_000);
    }

    #[test]
    fn a_long_wait_shrinks_the_window_to_nothing_by_default_or_by_the_divisor() {
        let mut window = PollWindow { ns: 160_000 };
        window.after_block(MAX + 1, MAX, &kvm());
        assert_eq!(window.ns, 0, "halt_poll_ns_shrink = 0 resets");
        let halving = HaltPolling { shrink: 2, ..kvm() };
        let mut window = PollWindow { ns: 160_000 };
        window.after_block(1_000_000, MAX, &halving);
        assert_eq!(window.ns, 80_000);
        // No window and a long wait: nothing to shrink, nothing to grow.
        let mut closed = PollWindow::default();
        closed.after_block(1_000_000, MAX, &kvm());
        assert_eq!(closed.ns, 0);
    }

    #[test]
    fn no_halt_poll_ns_closes_every_window() {
        let mut window = PollWindow { ns: 80_000 };
        window.after_block(1_000, 0, &kvm());
        assert_eq!(window.ns, 0);
    }
}
