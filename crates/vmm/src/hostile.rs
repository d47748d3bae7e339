//! `dirq run hostile --case <name>`: guest code that attacks the VMM
//! (guest/bench_hostile.c), in the spirit of Firecracker's threat model and
//! kvm-unit-tests. Each case declares what the VMM must do: refuse it (the
//! run fails with a message naming the cause) or survive it (the run
//! completes and what it reports is right).

use std::fmt;
use std::str::FromStr;

use crate::config::params::HostileParams;
use crate::config::{
    ApicMode, AttackCase, Bench, BenchConfig, BenchParams, CommonSettings, ConfigError,
    HostileCase, Named,
};

/// The watchdog of a case that must survive.
const SURVIVOR_TIMEOUT_MS: u64 = 20_000;

/// What the VMM must do with a case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// The run ends with an error that names the cause.
    Refuses,
    /// The run completes, its results right.
    Survives,
}

impl fmt::Display for Expect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Expect::Refuses => "refuses",
            Expect::Survives => "survives",
        })
    }
}

/// Which host side a case attacks.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// The standard machine.
    Machine,
    /// The I/O batch doorbell on the bus.
    Doorbell,
    /// The VIOAPIC at its paravirtual level, whose device samples the line.
    PvVioapic,
    /// The irq-latency device, raising and waiting for acknowledgements.
    Device,
}

impl HostileCase {
    /// What the VMM must do with this attack.
    pub fn expect(self) -> Expect {
        use HostileCase::*;
        match self {
            EoiStormX2apic | EoiStormMmio | PvPageCorrupt | SerialFloodLines
            | SerialFloodNoNewline | SerialEscapes | PeriodicTimerCount1 => Expect::Survives,
            _ => Expect::Refuses,
        }
    }

    /// What a refusal's message must contain, one of these: the cause,
    /// named (it may show differently on different hosts). Empty for a
    /// case the VMM must survive.
    pub fn causes(self) -> &'static [&'static str] {
        use HostileCase::*;
        match self {
            TripleFaultVcpu0 => &["vCPU 0: the guest triple-faulted"],
            TripleFaultVcpu1 => &["vCPU 1: the guest triple-faulted"],
            InterruptsOffForever => &["did not finish within"],
            UnownedPort => &["I/O port 0x1234"],
            UnownedMmio => &["0xd0000000"],
            // KVM, not the VMM, owns unknown MSRs: the guest gets a #GP.
            UnownedMsr => &["#GP"],
            DoorbellOutsideRam | DoorbellStraddlesRamEnd => &["not all in guest RAM"],
            DoorbellHugeCount => &["4294967295 writes"],
            DoorbellBadSize => &["entry 0: size 3"],
            DoorbellReservedByte => &["entry 0: reserved byte is 0xff"],
            DoorbellUnownedPort => &["entry 0: port 0x1234 is owned by no device"],
            DoorbellNested => &["entry 0: port 0xfc rings the doorbell itself"],
            PvLockHeldForever | PvLockHeldThenUnmask => {
                &["held the VIOAPIC PV lock at every attempt"]
            }
            PvLockGarbage => &["0xdeadbeef to the VIOAPIC PV lock word"],
            // kvm_pvm raises #UD at the vmcall; VT-x/SVM KVM returns an error.
            UnknownHypercall => &["#UD", "hypercall 0xdead0000"],
            InitSipiVcpu1 => &["vCPU 1"],
            ForgedAck => &["acknowledged interrupt 18446744073709551615"],
            TprBlocksAll => &["device interrupt 1 was not acknowledged"],
            ForgedSampleCount => &["claims 18446744073709551615 samples"],
            ForgedNativeClaim => &[
                "vCPU 0: the guest claims native execution",
                "ran under the instruction emulator",
            ],
            SamplesMax => &[
                "sample 0 is 18446744073709551615 TSC cycles",
                "longer than the whole measured window",
            ],
            FewerSamples => &["claims 1 samples written; the run asked for 100"],
            EmptyWindow => &["claims 0 samples written; the run asked for 100"],
            DoneFromVcpu1 => &["vCPU 1 sent DONE, but only vCPU 0 runs the bench"],
            StartTwice => &["vCPU 0 sent START out of order", "START came twice"],
            ForgedExitCost => &["exit-cost: the guest reported userspace_exit_ns = "],
            EoiStormX2apic | EoiStormMmio | PvPageCorrupt | SerialFloodLines
            | SerialFloodNoNewline | SerialEscapes | PeriodicTimerCount1 => &[],
        }
    }

    /// The guest's `enum dirq_hostile` value.
    pub fn abi_id(self) -> u64 {
        use HostileCase::*;
        match self {
            TripleFaultVcpu0 => 1,
            TripleFaultVcpu1 => 2,
            InterruptsOffForever => 3,
            EoiStormX2apic | EoiStormMmio => 4,
            UnownedPort => 5,
            UnownedMmio => 6,
            UnownedMsr => 7,
            DoorbellOutsideRam => 8,
            DoorbellStraddlesRamEnd => 9,
            DoorbellHugeCount => 10,
            DoorbellBadSize => 11,
            DoorbellReservedByte => 12,
            DoorbellUnownedPort => 13,
            DoorbellNested => 14,
            PvLockHeldForever => 15,
            PvLockHeldThenUnmask => 16,
            PvLockGarbage => 17,
            PvPageCorrupt => 18,
            UnknownHypercall => 19,
            SerialFloodLines => 20,
            SerialFloodNoNewline => 21,
            SerialEscapes => 22,
            InitSipiVcpu1 => 23,
            ForgedAck => 24,
            TprBlocksAll => 25,
            PeriodicTimerCount1 => 26,
            ForgedSampleCount => 27,
            ForgedNativeClaim => 28,
            SamplesMax => 29,
            FewerSamples => 30,
            EmptyWindow => 31,
            DoneFromVcpu1 => 32,
            StartTwice => 33,
            ForgedExitCost => 34,
        }
    }

    /// Whether the case records samples as a latency bench does: one per
    /// round (`count`), which the VMM then holds it to.
    pub fn records_samples(self) -> bool {
        use HostileCase::*;
        matches!(self, SamplesMax | FewerSamples | EmptyWindow)
    }

    pub(crate) fn target(self) -> Target {
        use HostileCase::*;
        match self {
            DoorbellOutsideRam
            | DoorbellStraddlesRamEnd
            | DoorbellHugeCount
            | DoorbellBadSize
            | DoorbellReservedByte
            | DoorbellUnownedPort
            | DoorbellNested => Target::Doorbell,
            PvLockHeldForever | PvLockHeldThenUnmask | PvLockGarbage | PvPageCorrupt => {
                Target::PvVioapic
            }
            ForgedAck | TprBlocksAll => Target::Device,
            _ => Target::Machine,
        }
    }

    /// The run that mounts this attack, with the hostile bench's defaults.
    pub fn config(self) -> BenchConfig {
        let mut common = CommonSettings::new(Bench::Hostile);
        if self == HostileCase::EoiStormMmio {
            common.apic = ApicMode::Xapic;
        }
        // A case that must survive never waits for the watchdog; on a busy
        // host its work (a serial flood: an exit per byte) may take seconds.
        if self.expect() == Expect::Survives {
            common.timeout_ms = Some(SURVIVOR_TIMEOUT_MS);
        }
        let mut params = HostileParams {
            hostile: self,
            ..HostileParams::default()
        };
        // One interrupt is enough to forge its acknowledgement or block it.
        if self.target() == Target::Device {
            params.count = 1;
        }
        BenchConfig {
            params: BenchParams::Hostile(params),
            common,
        }
    }
}

/// A case of `dirq run hostile --case`: an attack of the hostile bench,
/// or one mounted through another bench (`crate::attack`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Case {
    Hostile(HostileCase),
    Attack(AttackCase),
}

impl Case {
    /// Every case: the hostile bench's, then the attacks on other benches.
    pub fn all() -> impl Iterator<Item = Case> {
        let hostile = HostileCase::ALL.iter().map(|&case| Case::Hostile(case));
        hostile.chain(AttackCase::ALL.iter().map(|&case| Case::Attack(case)))
    }

    pub fn name(self) -> &'static str {
        match self {
            Case::Hostile(case) => case.name(),
            Case::Attack(case) => case.name(),
        }
    }

    pub fn expect(self) -> Expect {
        match self {
            Case::Hostile(case) => case.expect(),
            Case::Attack(case) => case.expect(),
        }
    }

    /// What a refusal's message must contain, one of these.
    pub fn causes(self) -> &'static [&'static str] {
        match self {
            Case::Hostile(case) => case.causes(),
            Case::Attack(case) => case.causes(),
        }
    }

    /// The figures a case that survives must report as the guest's claim.
    pub fn marked_claims(self) -> &'static [&'static str] {
        match self {
            Case::Hostile(_) => &[],
            Case::Attack(case) => case.marked_claims(),
        }
    }

    /// The run that mounts the attack.
    pub fn config(self) -> BenchConfig {
        match self {
            Case::Hostile(case) => case.config(),
            Case::Attack(case) => case.config(),
        }
    }

    /// Where the attack comes from, in words.
    fn describe(self) -> String {
        match self {
            Case::Hostile(_) => "hostile bench".into(),
            Case::Attack(case) => case.describe(),
        }
    }
}

impl fmt::Display for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Case {
    type Err = ConfigError;

    fn from_str(name: &str) -> Result<Self, ConfigError> {
        Case::all()
            .find(|case| case.name() == name)
            .ok_or_else(|| ConfigError::UnknownValue {
                what: "hostile case",
                value: name.to_string(),
                expected: "`dirq run hostile --list` names them".into(),
            })
    }
}

/// `--list`: every case, where it attacks from, and what the VMM must do
/// with it: refuse it with one of the causes named, or survive it.
pub fn list() -> String {
    Case::all()
        .map(|case| {
            let outcome = match (case.expect(), case.marked_claims()) {
                (Expect::Refuses, _) => {
                    format!("refused naming: {}", case.causes().join(" | "))
                }
                (Expect::Survives, []) => "completes, its figures checked".into(),
                (Expect::Survives, claims) => format!(
                    "completes, its figures checked, reporting {} as the guest's claim",
                    claims.join(", ")
                ),
            };
            format!(
                "{:<32} {:<8}  {}; {outcome}\n",
                case.name(),
                case.expect(),
                case.describe()
            )
        })
        .collect()
}
