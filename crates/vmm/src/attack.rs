//! The standing attack suite: attacks a guest mounts on the VMM through a
//! real bench (guest/attack.c), chosen by the VMM in the shared page's
//! `attack*` fields, from either vCPU, before, during or after the bench's
//! measured window. Each case says what it attacks and what the VMM must
//! do with it: refuse it naming the cause, or survive it and report what
//! the bench really measured. `dirq run hostile --case <name>` runs one;
//! `crates/vmm/tests/hostile.rs` runs them all.

use std::fmt;
use std::mem::offset_of;

use crate::abi::{self, SharedPage};
use crate::config::params::{TimerLatencyParams, VioapicParams};
use crate::config::{AttackCase, Bench, BenchConfig, BenchParams, GuestExec, Param, VioapicLevel};
use crate::hostile::Expect;

/// When the attacking vCPU strikes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    /// Before the bench starts; vCPU 0 waits for it.
    Before,
    /// `delay_us` after the window opens.
    During,
    /// After the window closes, before DONE; vCPU 0 waits for it.
    After,
}

impl fmt::Display for When {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            When::Before => "before the window",
            When::During => "during the window",
            When::After => "after the window",
        })
    }
}

/// A field of the shared page the guest forges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    SamplesWritten,
    NativeCpus,
    Handled(usize),
    Result(usize),
}

impl Field {
    fn offset(self) -> u64 {
        let offset = match self {
            Field::SamplesWritten => offset_of!(SharedPage, samples_written),
            Field::NativeCpus => offset_of!(SharedPage, native_cpus),
            Field::Handled(cpu) => offset_of!(SharedPage, handled) + 8 * cpu,
            Field::Result(slot) => offset_of!(SharedPage, result) + 8 * slot,
        };
        offset as u64
    }
}

/// A forged value, possibly relative to the run's `--count`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forged {
    Exactly(u64),
    CountPlusOne,
    CountMinusOne,
}

/// What the attacking vCPU does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attack {
    /// Writes one field of the shared page.
    Poke(Field, Forged),
    /// Overwrites every sample written so far.
    FillSamples(u64),
    /// Sends these control commands, in order.
    Control(&'static [u32]),
    /// Programs PIT channel 0 as a rate generator with this reload.
    PitReload(u16),
    /// Takes the VIOAPIC PV lock and holds it `hold` pauses, leaves it
    /// free `free` pauses, again, until the window closes.
    PvLockChurn {
        hold: u64,
        free: u64,
    },
    /// Writes 0 to a port with an access of `size` bytes.
    PortWrite {
        port: u16,
        size: u8,
    },
    TripleFault,
}

/// One case: the attack, who mounts it and when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    pub attack: Attack,
    pub when: When,
    pub vcpu: u32,
    pub delay_us: u32,
}

const START_END_DONE: &[u32] = &[
    abi::CONTROL_BENCH_START,
    abi::CONTROL_BENCH_END,
    abi::CONTROL_DONE,
];

impl Plan {
    const fn new(attack: Attack, when: When, vcpu: u32) -> Self {
        Plan {
            attack,
            when,
            vcpu,
            delay_us: 0,
        }
    }

    /// Writes the attack into the boot parameters; `page.count` is the
    /// run's, already written.
    pub fn write(&self, page: &mut SharedPage) {
        let forged = |value: Forged| match value {
            Forged::Exactly(value) => value,
            Forged::CountPlusOne => page.count.saturating_add(1),
            Forged::CountMinusOne => page.count.saturating_sub(1),
        };
        let (attack, args) = match self.attack {
            Attack::Poke(field, value) => (abi::ATTACK_POKE, [field.offset(), forged(value)]),
            Attack::FillSamples(value) => (abi::ATTACK_FILL_SAMPLES, [value, 0]),
            Attack::Control(commands) => {
                let packed = commands
                    .iter()
                    .rev()
                    .fold(0, |packed, &command| (packed << 8) | u64::from(command));
                (abi::ATTACK_CONTROL, [packed, 0])
            }
            Attack::PitReload(reload) => (abi::ATTACK_PIT_RELOAD, [u64::from(reload), 0]),
            Attack::PvLockChurn { hold, free } => (abi::ATTACK_PV_LOCK_CHURN, [hold, free]),
            Attack::PortWrite { port, size } => {
                (abi::ATTACK_PORT_WRITE, [u64::from(port), u64::from(size)])
            }
            Attack::TripleFault => (abi::ATTACK_TRIPLE_FAULT, [0, 0]),
        };
        page.attack = attack;
        page.attack_when = match self.when {
            When::Before => abi::ATTACK_BEFORE,
            When::During => abi::ATTACK_DURING,
            When::After => abi::ATTACK_AFTER,
        };
        page.attack_cpu = self.vcpu;
        page.attack_delay_us = self.delay_us;
        page.attack_args = args;
    }
}

/// The runs the cases attack: short, so that the suite stays quick.
const SHORT_COUNT: u64 = 500;
/// A run long enough for another vCPU to strike in its middle (about 1 s).
const LONG_TIMER_COUNT: u64 = 5_000;
/// How far into a window a mid-run attack strikes.
const MID_RUN_US: u32 = 300_000;

impl AttackCase {
    /// What the guest does, from which vCPU, when.
    pub fn plan(self) -> Plan {
        use Attack::*;
        use AttackCase::*;
        use Forged::*;
        use When::*;
        match self {
            NativeClaimUnasked => Plan::new(Poke(Field::NativeCpus, Exactly(0b11)), During, 0),
            SamplesOverCount => Plan::new(Poke(Field::SamplesWritten, CountPlusOne), After, 0),
            SamplesUnderCount => Plan::new(Poke(Field::SamplesWritten, CountMinusOne), After, 0),
            SamplesCountMax => Plan::new(Poke(Field::SamplesWritten, Exactly(u64::MAX)), After, 0),
            SamplesCountZero => Plan::new(Poke(Field::SamplesWritten, Exactly(0)), After, 0),
            SamplesValuesMax => Plan::new(FillSamples(u64::MAX), After, 0),
            SamplesCountFromVcpu1 => {
                Plan::new(Poke(Field::SamplesWritten, Exactly(u64::MAX)), During, 1)
            }
            SamplesInWhileloop => Plan::new(Poke(Field::SamplesWritten, Exactly(1)), After, 0),
            WindowAtOnceTimerLatency
            | WindowAtOnceIpi
            | WindowAtOnceExitCost
            | WindowAtOnceTick
            | WindowAtOnceWhileloop => Plan::new(Control(START_END_DONE), Before, 0),
            DoneFromVcpu1MidRun => Plan {
                delay_us: MID_RUN_US,
                ..Plan::new(Control(&[abi::CONTROL_DONE]), During, 1)
            },
            StartTwiceMidRun => Plan::new(Control(&[abi::CONTROL_BENCH_START]), During, 0),
            EndTwice => Plan::new(Control(&[abi::CONTROL_BENCH_END]), During, 0),
            DoneBeforeEnd => Plan::new(Control(&[abi::CONTROL_DONE]), During, 0),
            EndFromVcpu1After => Plan::new(Control(&[abi::CONTROL_BENCH_END]), After, 1),
            ForgedInfRate => Plan::new(
                Poke(Field::Result(abi::RESULT_VIOAPIC_CYCLES), Exactly(0)),
                After,
                0,
            ),
            ForgedUserspaceExitNs => Plan::new(
                Poke(
                    Field::Result(abi::RESULT_EXIT_COST_USERSPACE_CYCLES),
                    Exactly(1 << 60),
                ),
                After,
                0,
            ),
            ForgedGuestShareZero => Plan::new(
                Poke(
                    Field::Result(abi::RESULT_TICK_LOADED_ITERATIONS),
                    Exactly(0),
                ),
                After,
                0,
            ),
            ForgedHandled => Plan::new(Poke(Field::Handled(0), Exactly(u64::MAX)), After, 0),
            PitReprogrammedFromVcpu1 => Plan {
                delay_us: MID_RUN_US / 3,
                ..Plan::new(PitReload(u16::MAX), During, 1)
            },
            PitProgrammedBeforeByVcpu1 => Plan::new(PitReload(u16::MAX), Before, 1),
            // Released every ~1,000 pauses for as long: the VMM, spinning
            // on the lock, takes it in a gap (issue 22 saw this reported
            // as a lock held for a second).
            PvLockChurnFromVcpu1 => Plan::new(
                PvLockChurn {
                    hold: 1_000,
                    free: 1_000,
                },
                During,
                1,
            ),
            SerialStraddlesRangeEnd => Plan::new(
                PortWrite {
                    port: abi::PORT_SERIAL + 6,
                    size: 4,
                },
                Before,
                0,
            ),
            ControlPortByteWrite => Plan::new(
                PortWrite {
                    port: abi::PORT_CONTROL,
                    size: 1,
                },
                During,
                0,
            ),
            SerialByteFromVcpu1 => Plan::new(
                PortWrite {
                    port: abi::PORT_SERIAL,
                    size: 1,
                },
                During,
                1,
            ),
            TripleFaultVcpu1MidIpi => Plan::new(TripleFault, During, 1),
            TripleFaultAfterWindow => Plan::new(TripleFault, After, 0),
        }
    }

    /// The bench the attack is mounted on, with the attack.
    pub fn config(self) -> BenchConfig {
        use AttackCase::*;
        let short = |bench: Bench| {
            let mut config = BenchConfig::new(bench);
            // Every bench attacked with a count takes one.
            let _ = config.params.set(Param::Count(SHORT_COUNT));
            config
        };
        let mut config = match self {
            NativeClaimUnasked => {
                let mut config = BenchConfig::new(Bench::Whileloop);
                config.common.guest_exec = Some(GuestExec::Emulated);
                config
            }
            SamplesOverCount
            | SamplesUnderCount
            | SamplesCountMax
            | SamplesCountZero
            | SamplesValuesMax
            | WindowAtOnceTimerLatency
            | EndTwice
            | DoneBeforeEnd
            | TripleFaultAfterWindow => short(Bench::TimerLatency),
            DoneFromVcpu1MidRun => {
                BenchConfig::from(BenchParams::TimerLatency(TimerLatencyParams {
                    count: LONG_TIMER_COUNT,
                    ..TimerLatencyParams::default()
                }))
            }
            SamplesCountFromVcpu1
            | WindowAtOnceIpi
            | EndFromVcpu1After
            | SerialByteFromVcpu1
            | TripleFaultVcpu1MidIpi => short(Bench::Ipi),
            SamplesInWhileloop | WindowAtOnceWhileloop => BenchConfig::new(Bench::Whileloop),
            WindowAtOnceExitCost | ForgedUserspaceExitNs => short(Bench::ExitCost),
            WindowAtOnceTick
            | ForgedGuestShareZero
            | PitReprogrammedFromVcpu1
            | PitProgrammedBeforeByVcpu1 => BenchConfig::new(Bench::Tick),
            StartTwiceMidRun | ForgedHandled | SerialStraddlesRangeEnd | ControlPortByteWrite => {
                short(Bench::IrqLatency)
            }
            ForgedInfRate => short(Bench::Vioapic),
            PvLockChurnFromVcpu1 => BenchConfig::from(BenchParams::Vioapic(VioapicParams {
                count: SHORT_COUNT,
                vioapic: VioapicLevel::Pv,
                ..VioapicParams::default()
            })),
        };
        config.common.attack = Some(self);
        config
    }

    /// What the VMM must do with this attack.
    pub fn expect(self) -> Expect {
        if self.causes().is_empty() {
            Expect::Survives
        } else {
            Expect::Refuses
        }
    }

    /// What a refusal's message must contain, one of these (it may show
    /// differently on different hosts); empty for a case to survive.
    pub fn causes(self) -> &'static [&'static str] {
        use AttackCase::*;
        match self {
            // VT-x/SVM hosts offer no emulated mode to attack.
            NativeClaimUnasked => &[
                "vCPU 0: the guest claims native execution (bit 0 of the shared page's native_cpus), but the run asked for emulated",
                "--guest-exec emulated is not available on this host",
            ],
            SamplesOverCount => &["the guest claims 501 samples written; the run asked for 500"],
            SamplesUnderCount => &["the guest claims 499 samples written; the run asked for 500"],
            SamplesCountMax | SamplesCountFromVcpu1 => {
                &["the guest claims 18446744073709551615 samples written; the run asked for 500"]
            }
            SamplesCountZero => &["the guest claims 0 samples written; the run asked for 500"],
            // DONE ends the run, but the bench may send its own START
            // before the VMM stops its vCPU: either is the guest's doing.
            WindowAtOnceTimerLatency | WindowAtOnceIpi | WindowAtOnceExitCost => &[
                "the guest claims 0 samples written; the run asked for 500",
                "vCPU 0 sent START out of order (START, END, DONE, each once): START came twice",
            ],
            SamplesValuesMax => &[
                "sample 0 is 18446744073709551615 TSC cycles",
                "longer than the whole measured window",
            ],
            SamplesInWhileloop => &["the guest claims 1 samples written; the run asked for 0"],
            WindowAtOnceTick => &[
                "tick: the guest reports reload 0, but the PIT holds 65536, never programmed by any vCPU",
                "vCPU 0 sent START out of order (START, END, DONE, each once): START came twice",
            ],
            WindowAtOnceWhileloop => &[
                "whileloop: the run measured nothing",
                "vCPU 0 sent START out of order (START, END, DONE, each once): START came twice",
            ],
            DoneFromVcpu1MidRun => {
                &["vCPU 1 sent DONE, but only vCPU 0 runs the bench and may start, end or finish it"]
            }
            StartTwiceMidRun => &["vCPU 0 sent START out of order", "START came twice"],
            EndTwice => &["vCPU 0 sent END out of order", "END came twice"],
            DoneBeforeEnd => &["vCPU 0 sent DONE out of order", "DONE came before END"],
            EndFromVcpu1After => &["vCPU 1 sent END, but only vCPU 0 runs the bench"],
            ForgedInfRate => &["vioapic: the guest reported interrupts_per_s = inf"],
            ForgedUserspaceExitNs => &["exit-cost: the guest reported userspace_exit_ns = "],
            ForgedGuestShareZero => &["tick: the guest reported guest_share = 0"],
            ForgedHandled => &["500 interrupts raised but 18446744073709551615 handled"],
            PitReprogrammedFromVcpu1 => &["the PIT was last programmed with 65535 (written by vCPU 0, vCPU 1)"],
            SerialStraddlesRangeEnd => &["4-byte access at I/O port 0x3fe, which runs past the end of the serial's ports"],
            ControlPortByteWrite => &["1-byte write of the control port, which takes 4 bytes"],
            TripleFaultVcpu1MidIpi => &["vCPU 1: the guest triple-faulted"],
            TripleFaultAfterWindow => &["vCPU 0: the guest triple-faulted"],
            PitProgrammedBeforeByVcpu1 | PvLockChurnFromVcpu1 | SerialByteFromVcpu1 => &[],
        }
    }

    /// The attack, in words: its bench, vCPU and moment.
    pub fn describe(self) -> String {
        let plan = self.plan();
        format!(
            "{}, vCPU {} {}",
            self.config().bench(),
            plan.vcpu,
            plan.when
        )
    }
}
