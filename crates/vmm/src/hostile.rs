//! `dirq run hostile --case <name>`: guest code that attacks the VMM
//! (guest/bench_hostile.c), in the spirit of Firecracker's threat model and
//! kvm-unit-tests. Each case declares what the VMM must do: refuse it (the
//! run fails with a message naming the cause) or survive it (the run
//! completes and what it reports is right).

use std::collections::BTreeMap;
use std::fmt;

use crate::abi;
use crate::bench::{window_exits, BenchError};
use crate::config::{ApicMode, Bench, BenchConfig, HostileCase, VioapicMode};
use crate::designs::vioapic::{attach_controller, start_back_to_back, Controller, KernelLine};
use crate::devices::msi_device::{self, DeviceEnv};
use crate::machine::{self, Attach, DeviceThread, Extensions};
use crate::report::RunReport;

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
enum Target {
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
            InterruptsOffForever => &["the guest hung"],
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
            PvLockHeldForever | PvLockHeldThenUnmask => &["held the VIOAPIC PV lock"],
            PvLockGarbage => &["0xdeadbeef to the VIOAPIC PV lock word"],
            // kvm_pvm raises #UD at the vmcall; VT-x/SVM KVM returns an error.
            UnknownHypercall => &["#UD", "hypercall 0xdead0000"],
            InitSipiVcpu1 => &["vCPU 1"],
            ForgedAck => &["acknowledged interrupt 18446744073709551615"],
            TprBlocksAll => &["device interrupt 1 was not acknowledged"],
            ForgedSampleCount => &["claims 18446744073709551615 samples"],
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
        }
    }

    fn target(self) -> Target {
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
        let mut config = BenchConfig::new(Bench::Hostile);
        config.hostile = self;
        if self == HostileCase::EoiStormMmio {
            config.apic = ApicMode::Xapic;
        }
        if self.target() == Target::PvVioapic {
            config.vioapic = VioapicMode::Pv;
        }
        if self.target() == Target::Device {
            config.count = 1;
        }
        // A case that must survive never waits for the watchdog; on a busy
        // host its work (a serial flood: an exit per byte) may take seconds.
        if self.expect() == Expect::Survives {
            config.timeout_ms = SURVIVOR_TIMEOUT_MS;
        }
        config
    }
}

/// Runs `config.hostile` and judges what the VMM did with it.
pub fn run(config: &BenchConfig, echo_console: bool) -> Result<RunReport, BenchError> {
    let case = config.hostile;
    let controller = Controller::new();
    let kernel_line = KernelLine::new();
    let attach = |attach: &mut Attach| match case.target() {
        Target::Doorbell => {
            attach
                .bus
                .enable_io_batch(abi::PORT_IO_BATCH, attach.memory.clone());
            Ok(())
        }
        Target::PvVioapic => attach_controller(attach, &controller, &kernel_line),
        Target::Machine | Target::Device => Ok(()),
    };
    let count = config.count;
    let device: DeviceThread<()> = Box::new(|env: &DeviceEnv| match case.target() {
        Target::Device => msi_device::ping_pong(env, count, 0).map(drop),
        Target::PvVioapic => match controller.get() {
            Some(controller) => start_back_to_back(env, controller),
            None => Ok(()),
        },
        Target::Machine | Target::Doorbell => Ok(()),
    });
    let output = machine::run(
        config,
        echo_console,
        Extensions {
            attach: Some(&attach),
            device: Some(device),
        },
    )?;
    let invariant = |what: String| {
        Err(BenchError::Invariant {
            bench: "hostile",
            what,
        })
    };
    if case.expect() == Expect::Refuses {
        return invariant(format!(
            "the VMM let case {case} complete; it must refuse it"
        ));
    }
    let handled = output.shared.handled[0];
    let want = match case {
        // After the storm the guest's self-IPIs must all still arrive.
        HostileCase::EoiStormX2apic | HostileCase::EoiStormMmio => Some(count),
        _ => None,
    };
    if want.is_some_and(|want| want != handled) {
        return Err(BenchError::Delivery {
            bench: "hostile",
            raised: count,
            handled,
        });
    }
    if case == HostileCase::PeriodicTimerCount1 && handled == 0 {
        return invariant("the periodic timer never fired".into());
    }
    let (exits, duration_s) = window_exits(&output);
    Ok(RunReport::new(
        config,
        handled,
        exits,
        None,
        duration_s,
        BTreeMap::new(),
        output.facts,
    ))
}

/// `--list`: every case with what the VMM must do with it.
pub fn list() -> String {
    HostileCase::ALL
        .iter()
        .map(|case| format!("{:<28} {}\n", case.name(), case.expect()))
        .collect()
}
