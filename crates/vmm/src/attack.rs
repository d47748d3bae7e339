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
    /// Programs PIT channel 0 as a rate generator with `reload`, again
    /// every `every_us` until the window closes (0: once).
    PitReload {
        reload: u16,
        every_us: u32,
    },
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
    /// Sends `count` fixed IPIs of `vector` to vCPU 0, back to back.
    IpiStorm {
        vector: u8,
        count: u32,
    },
    /// Never enters native mode, yet claims it (done at boot).
    StayEmulated,
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
            Attack::PitReload { reload, every_us } => (
                abi::ATTACK_PIT_RELOAD,
                [u64::from(reload), u64::from(every_us)],
            ),
            Attack::PvLockChurn { hold, free } => (abi::ATTACK_PV_LOCK_CHURN, [hold, free]),
            Attack::PortWrite { port, size } => {
                (abi::ATTACK_PORT_WRITE, [u64::from(port), u64::from(size)])
            }
            Attack::TripleFault => (abi::ATTACK_TRIPLE_FAULT, [0, 0]),
            Attack::IpiStorm { vector, count } => {
                (abi::ATTACK_IPI_STORM, [u64::from(vector), u64::from(count)])
            }
            Attack::StayEmulated => (abi::ATTACK_STAY_EMULATED, [0, 0]),
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
/// IPIs a storming vCPU sends: longer than most short windows.
const STORM_IPIS: u32 = 5_000;
/// The reload the tick bench programs (1,193,182 Hz / 1,000 Hz).
const TICK_RELOAD: u16 = 1_193;

/// vCPU 1 storms vCPU 0 with `vector` from the moment the window opens.
const fn storm(vector: u8) -> Plan {
    Plan::new(
        Attack::IpiStorm {
            vector,
            count: STORM_IPIS,
        },
        When::During,
        1,
    )
}

/// vCPU 0 overwrites result slot `slot` with `value` after the window.
const fn forge(slot: usize, value: u64) -> Plan {
    Plan::new(
        Attack::Poke(Field::Result(slot), Forged::Exactly(value)),
        When::After,
        0,
    )
}

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
                ..Plan::new(
                    PitReload {
                        reload: u16::MAX,
                        every_us: 0,
                    },
                    During,
                    1,
                )
            },
            PitProgrammedBeforeByVcpu1 => Plan::new(
                PitReload {
                    reload: u16::MAX,
                    every_us: 0,
                },
                Before,
                1,
            ),
            // The bench's own reload, restarted every 2 ms: the count
            // matches, the rate does not.
            PitSameReloadFromVcpu1 => Plan::new(
                PitReload {
                    reload: TICK_RELOAD,
                    every_us: 2_000,
                },
                During,
                1,
            ),
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
            WindowAtOnceVioapic
            | WindowAtOnceIoBatch
            | WindowAtOnceIrqLatency
            | WindowAtOnceHaltWakeup => Plan::new(Control(START_END_DONE), Before, 0),
            IpiStormVioapic | IpiStormIrqLatency | IpiStormWhileloop | IpiStormIoBatch => {
                storm(abi::VECTOR_DEVICE)
            }
            IpiStormTimerLatency | IpiStormExitCost | IpiStormHaltWakeup => {
                storm(abi::VECTOR_TIMER)
            }
            IpiStormTick => storm(abi::VECTOR_TICK),
            NativeClaimShortWindow => Plan::new(StayEmulated, Before, 0),
            ForgedShareAboveOneWhileloop => forge(abi::RESULT_WHILELOOP_LOADED_ITERATIONS, 1 << 50),
            ForgedShareAboveOneTick => forge(abi::RESULT_TICK_LOADED_ITERATIONS, 1 << 50),
            ForgedLostPerInterruptTiny => forge(abi::RESULT_WHILELOOP_INTERRUPT_LOST_CYCLES, 1),
            ForgedLostPerInterruptHuge => forge(abi::RESULT_WHILELOOP_INTERRUPTS_SEEN, 1),
            ForgedVioapicRate => forge(abi::RESULT_VIOAPIC_CYCLES, 1_000),
            ForgedRegisterReads => forge(abi::RESULT_VIOAPIC_READS, u64::MAX),
            ForgedSpurious => forge(abi::RESULT_VIOAPIC_SPURIOUS, u64::MAX),
            ForgedMaskToggles => forge(abi::RESULT_VIOAPIC_MASK_TOGGLES, u64::MAX),
            ForgedHandledZeroVioapic => Plan::new(Poke(Field::Handled(0), Exactly(0)), After, 0),
            ForgedCommandsRate => forge(abi::RESULT_IO_BATCH_CYCLES, 1_000),
            ForgedTickRate => forge(abi::RESULT_TICK_LOADED_CYCLES, 1_000),
            ForgedTickCount => forge(abi::RESULT_TICK_TICKS, 1_000),
            // About 96 ms per exit over 500 exits: each fits the window,
            // together they are 400 times it.
            ForgedUserspaceExitTotal => forge(abi::RESULT_EXIT_COST_USERSPACE_CYCLES, 1 << 37),
            // 20 TSC cycles per exit: above the TSC's resolution, below
            // what the VMM alone spends on one.
            ForgedUserspaceExitTiny => forge(abi::RESULT_EXIT_COST_USERSPACE_CYCLES, 10_000),
            // About 400 ns at this host's TSC rate.
            ForgedKernelExitP50 => forge(abi::RESULT_EXIT_COST_KERNEL_P50_CYCLES, 1_200),
            ForgedSendP50Tiny => forge(abi::RESULT_IPI_SEND_CYCLES, 1),
            SamplesZeroTimerLatency | SamplesZeroExitCost => Plan::new(FillSamples(0), After, 0),
            SamplesOneCycleIpi => Plan::new(FillSamples(1), After, 0),
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
            ForgedInfRate
            | WindowAtOnceVioapic
            | IpiStormVioapic
            | ForgedVioapicRate
            | ForgedRegisterReads
            | ForgedSpurious
            | ForgedMaskToggles
            | ForgedHandledZeroVioapic => short(Bench::Vioapic),
            WindowAtOnceIoBatch | IpiStormIoBatch | ForgedCommandsRate => short(Bench::IoBatch),
            WindowAtOnceIrqLatency | IpiStormIrqLatency => short(Bench::IrqLatency),
            WindowAtOnceHaltWakeup | IpiStormHaltWakeup => short(Bench::HaltWakeup),
            IpiStormTimerLatency | SamplesZeroTimerLatency => short(Bench::TimerLatency),
            IpiStormWhileloop
            | ForgedShareAboveOneWhileloop
            | ForgedLostPerInterruptTiny
            | ForgedLostPerInterruptHuge => BenchConfig::new(Bench::Whileloop),
            IpiStormTick
            | PitSameReloadFromVcpu1
            | ForgedShareAboveOneTick
            | ForgedTickRate
            | ForgedTickCount => BenchConfig::new(Bench::Tick),
            IpiStormExitCost
            | ForgedUserspaceExitTotal
            | ForgedUserspaceExitTiny
            | ForgedKernelExitP50
            | SamplesZeroExitCost => short(Bench::ExitCost),
            ForgedSendP50Tiny | SamplesOneCycleIpi => short(Bench::Ipi),
            // Ten interrupts: KVM's counts of so short a window were
            // once too few to tell emulation from native execution.
            NativeClaimShortWindow => {
                let mut config = BenchConfig::new(Bench::IrqLatency);
                let _ = config.params.set(Param::Count(10));
                config
            }
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
            // (Once refused as what followed: no samples, no disk commands,
            // a PIT never programmed, a LAPIC check never run.)
            WindowAtOnceTimerLatency
            | WindowAtOnceIpi
            | WindowAtOnceExitCost
            | WindowAtOnceTick
            | WindowAtOnceWhileloop
            | WindowAtOnceVioapic
            | WindowAtOnceIoBatch
            | WindowAtOnceIrqLatency
            | WindowAtOnceHaltWakeup => &[
                "with no exit on any vCPU in between: it measured nothing there",
                "vCPU 0 sent START out of order (START, END, DONE, each once): START came twice",
            ],
            SamplesValuesMax => &[
                "sample 0 is 18446744073709551615 TSC cycles",
                "longer than the whole measured window",
            ],
            SamplesInWhileloop => &["the guest claims 1 samples written; the run asked for 0"],
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
            // Once refused as the reload the PIT held, not who wrote it.
            PitReprogrammedFromVcpu1 => &["vCPU 1, which the tick bench leaves halted, made"],
            // Storms once refused as lost or doubled interrupts, a guest
            // failure, "not measurable on this host", or let through.
            IpiStormVioapic => &["vCPU 1, which the vioapic bench leaves halted, made"],
            IpiStormIrqLatency => &["vCPU 1, which the irq-latency bench leaves halted, made"],
            IpiStormTimerLatency => &["vCPU 1, which the timer-latency bench leaves halted, made"],
            IpiStormWhileloop => &["vCPU 1, which the whileloop bench leaves halted, made"],
            IpiStormTick => &["vCPU 1, which the tick bench leaves halted, made"],
            IpiStormExitCost => &["vCPU 1, which the exit-cost bench leaves halted, made"],
            IpiStormHaltWakeup => &["vCPU 1, which the halt-wakeup bench leaves halted, made"],
            IpiStormIoBatch => &["vCPU 1, which the io-batch bench leaves halted, made"],
            PitSameReloadFromVcpu1 => &["vCPU 1, which the tick bench leaves halted, made"],
            NativeClaimShortWindow => &[
                "vCPU 0: the guest claims native execution (bit 0 of the shared page's native_cpus), but KVM emulated",
                "--guest-exec native is not available on this host",
            ],
            ForgedShareAboveOneWhileloop => &["whileloop: the guest reported guest_share = ", "a share of the CPU is at most 1"],
            ForgedShareAboveOneTick => &["tick: the guest reported guest_share = ", "a share of the CPU is at most 1"],
            ForgedLostPerInterruptHuge => &["whileloop: the guest reported lost_per_interrupt_ns = ", "longer than the whole measured window"],
            ForgedVioapicRate => &["vioapic: the guest reported interrupts_per_s = ", "the VMM timed from START to END"],
            ForgedRegisterReads => &["vioapic: the guest reported register_reads_per_interrupt = ", "the VMM served 2000"],
            ForgedSpurious => &["vioapic: the guest reported spurious = ", "KVM injected"],
            ForgedMaskToggles => &["vioapic: the guest reported mask_toggles = ", "only in the race test"],
            ForgedHandledZeroVioapic => &["vioapic: the guest reported interrupts = 0, which is impossible: the guest serviced 500 device events"],
            ForgedCommandsRate => &["io-batch: the guest reported commands_per_s = ", "the VMM timed from START to END"],
            // The loaded loop's cycles give both the share and the rate.
            ForgedTickRate => &["tick: the guest reported guest_share = ", "tick: the guest reported timer_interrupts_per_s = "],
            ForgedTickCount => &["tick: the guest reported interrupts = 1000, which is impossible: KVM injected"],
            ForgedUserspaceExitTotal => &["exit-cost: the guest reported userspace_exit_ns = ", "500 exits to the VMM of"],
            // Once refused as "the run measured nothing".
            ForgedUserspaceExitTiny => &["exit-cost: the guest reported userspace_exit_ns = ", "the VMM alone spent at least"],
            ForgedSendP50Tiny => &["ipi: the guest reported send_p50_ns = 0, which is impossible: shorter than the platform's resolution"],
            SamplesZeroTimerLatency => &["is 0 TSC cycles (0 ns), the median, shorter than the platform's resolution"],
            SamplesZeroExitCost => &["sample 0 is 0 TSC cycles (0 ns), shorter than the platform's resolution"],
            SamplesOneCycleIpi => &["sample 0 is 1 TSC cycles (0 ns), shorter than the platform's resolution"],
            SerialStraddlesRangeEnd => &["4-byte access at I/O port 0x3fe, which runs past the end of the serial's ports"],
            ControlPortByteWrite => &["1-byte write of the control port, which takes 4 bytes"],
            TripleFaultVcpu1MidIpi => &["vCPU 1: the guest triple-faulted"],
            TripleFaultAfterWindow => &["vCPU 0: the guest triple-faulted"],
            PitProgrammedBeforeByVcpu1
            | PvLockChurnFromVcpu1
            | SerialByteFromVcpu1
            | ForgedLostPerInterruptTiny
            | ForgedKernelExitP50 => &[],
        }
    }

    /// The figures a case that survives must report as the guest's claim:
    /// a forgery no evidence can tell from the truth is reported as such.
    pub fn marked_claims(self) -> &'static [&'static str] {
        match self {
            AttackCase::ForgedKernelExitP50 => &["kernel_exit_p50_ns"],
            AttackCase::ForgedLostPerInterruptTiny => &["lost_per_interrupt_ns"],
            _ => &[],
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
