//! Shared test helpers: a clock the test moves by hand.
// Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

use std::cell::Cell;

use dirq_arch::clock::Clock;

#[derive(Default)]
pub struct FakeClock {
    now_ns: Cell<u64>,
}

impl FakeClock {
    pub fn at(now_ns: u64) -> FakeClock {
        FakeClock {
            now_ns: Cell::new(now_ns),
        }
    }

    pub fn set(&self, now_ns: u64) {
        self.now_ns.set(now_ns);
    }

    pub fn advance(&self, ns: u64) {
        self.now_ns.set(self.now_ns.get() + ns);
    }
}

impl Clock for FakeClock {
    fn now_ns(&self) -> u64 {
        self.now_ns.get()
    }
}

/// Access field of a PIT control word: low byte then high byte.
pub const PIT_ACCESS_LOW_THEN_HIGH: u8 = 0b11;
/// Access field of a PIT control word: low byte only.
pub const PIT_ACCESS_LOW: u8 = 0b01;
/// Access field 0 makes the control word a counter latch command.
pub const PIT_ACCESS_LATCH: u8 = 0b00;

/// An 8254 control word: channel (3 = read-back), access, mode, BCD flag.
pub const fn pit_control(channel: u8, access: u8, mode: u8, bcd: bool) -> u8 {
    (channel << 6) | (access << 4) | (mode << 1) | bcd as u8
}
