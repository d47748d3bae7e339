//! KVM's tracepoints as typed events, decoded from raw perf records by each
//! tracepoint's format file (fields looked up by name, see [`super::format`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::account::ExitNames;
use super::format::{EventFormat, Field};

/// The `kvm:` tracepoints the observer reads, with the fields each needs.
/// The names are the kernel's (include/trace/events/kvm.h and
/// arch/x86/kvm/trace.h).
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    strum::Display,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Tracepoint {
    KvmExit,
    KvmEntry,
    KvmPio,
    KvmMmio,
    KvmMsr,
    KvmEmulateInsn,
    KvmUserspaceExit,
    KvmInjVirq,
    KvmApicAcceptIrq,
    KvmMsiSetIrq,
    KvmSetIrq,
    KvmIoapicSetIrq,
    KvmEoi,
    KvmPvEoi,
    KvmApicIpi,
    KvmApic,
    KvmVcpuWakeup,
    KvmHaltPollNs,
}

impl Tracepoint {
    pub const ALL: &'static [Tracepoint] = <Tracepoint as strum::VariantArray>::VARIANTS;

    pub fn name(self) -> &'static str {
        self.into()
    }

    /// The fields the decoder reads.
    fn fields(self) -> &'static [&'static str] {
        match self {
            Tracepoint::KvmExit => &[
                "exit_reason",
                "guest_rip",
                "isa",
                "info1",
                "info2",
                "intr_info",
                "vcpu_id",
            ],
            Tracepoint::KvmEntry => &["vcpu_id", "rip"],
            Tracepoint::KvmPio => &["rw", "port", "size", "count"],
            Tracepoint::KvmMmio => &["type", "gpa"],
            Tracepoint::KvmMsr => &["write", "ecx", "data", "exception"],
            Tracepoint::KvmEmulateInsn => &["rip", "csbase", "len", "insn", "failed"],
            Tracepoint::KvmUserspaceExit => &["reason", "errno"],
            Tracepoint::KvmInjVirq => &["vector", "soft"],
            Tracepoint::KvmApicAcceptIrq => &["apicid", "dm", "tm", "vec"],
            Tracepoint::KvmMsiSetIrq => &["address", "data"],
            Tracepoint::KvmSetIrq => &["gsi", "level"],
            Tracepoint::KvmIoapicSetIrq => &["e", "pin", "coalesced"],
            Tracepoint::KvmEoi | Tracepoint::KvmPvEoi => &["apicid", "vector"],
            Tracepoint::KvmApicIpi => &["icr_low", "dest_id"],
            Tracepoint::KvmApic => &["rw", "reg", "val"],
            Tracepoint::KvmVcpuWakeup => &["ns", "waited", "valid"],
            Tracepoint::KvmHaltPollNs => &["grow", "vcpu_id", "new", "old"],
        }
    }
}

/// `isa` of kvm_exit (arch/x86/kvm/trace.h: KVM_ISA_VMX 1, KVM_ISA_SVM 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Isa {
    Vmx,
    Svm,
    /// Another backend's code (e.g. a newer one's).
    Other(u32),
}

impl Isa {
    fn of(code: u64) -> Isa {
        match code {
            1 => Isa::Vmx,
            2 => Isa::Svm,
            other => Isa::Other(u32::try_from(other).unwrap_or(u32::MAX)),
        }
    }
}

/// One decoded KVM tracepoint record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum KvmEvent {
    /// The vCPU left guest mode (VT-x and SVM only: kvm_pvm never fires it).
    Exit {
        vcpu: u32,
        isa: Isa,
        /// VMX: the basic exit reason (low 16 bits); SVM: the exit code.
        reason: u32,
        /// VMX bit 31 of the exit reason: the VM entry failed.
        failed_entry: bool,
        rip: u64,
        info1: u64,
        info2: u64,
        intr_info: u32,
    },
    Entry {
        vcpu: u32,
        rip: u64,
    },
    Pio {
        write: bool,
        port: u16,
        size: u8,
        count: u32,
    },
    Mmio {
        write: bool,
        gpa: u64,
    },
    Msr {
        write: bool,
        msr: u32,
        data: u64,
        faulted: bool,
    },
    /// An instruction KVM's emulator ran: under kvm_pvm's native mode, one
    /// trapped instruction; under its emulated mode, every instruction.
    EmulateInsn {
        /// Linear address: the code segment's base plus RIP.
        rip: u64,
        len: u8,
        insn: [u8; 15],
        failed: bool,
    },
    UserspaceExit {
        reason: u32,
        errno: i32,
    },
    InjectVirq {
        vector: u8,
        soft: bool,
    },
    AcceptIrq {
        apic_id: u32,
        delivery_mode: u8,
        level: bool,
        vector: u8,
    },
    MsiSetIrq {
        address: u64,
        data: u64,
    },
    SetIrq {
        gsi: u32,
        level: i32,
    },
    IoapicSetIrq {
        pin: u32,
        entry: u64,
        coalesced: bool,
    },
    /// An EOI KVM's LAPIC took; `vector` is the in-service vector it
    /// completed, none when nothing was in service (the kernel traces -1).
    Eoi {
        apic_id: u32,
        vector: Option<u8>,
    },
    PvEoi {
        apic_id: u32,
        vector: Option<u8>,
    },
    /// An ICR write KVM's LAPIC sent (low half, and the destination).
    ApicIpi {
        icr_low: u32,
        destination: u32,
    },
    /// An access to an in-kernel LAPIC register (by xAPIC offset).
    Apic {
        write: bool,
        register: u32,
        value: u64,
    },
    VcpuWakeup {
        ns: u64,
        /// Slept (true) rather than polled.
        waited: bool,
        valid: bool,
    },
    HaltPollNs {
        vcpu: u32,
        grow: bool,
        new: u32,
        old: u32,
    },
}

/// A tracepoint the decoder could not use, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unusable {
    pub tracepoint: Tracepoint,
    pub why: String,
}

/// Decodes records of the tracepoints whose formats were given.
#[derive(Clone, Debug, Default)]
pub struct Decoder {
    by_id: BTreeMap<u64, (Tracepoint, Vec<Field>)>,
    /// kvm_exit's reason names: VMX, then SVM (its print fmt's two tables).
    exit_names: [BTreeMap<u64, String>; 2],
    /// kvm_userspace_exit's reason names (`KVM_EXIT_IO`, ...).
    userspace_exit_names: BTreeMap<u64, String>,
}

impl Decoder {
    /// A decoder for every format given; a format that lacks a field the
    /// decoder reads is left out and named in the second value.
    pub fn new(formats: &[(Tracepoint, EventFormat)]) -> (Decoder, Vec<Unusable>) {
        let mut decoder = Decoder::default();
        let mut unusable = Vec::new();
        for (tracepoint, format) in formats {
            let fields: Result<Vec<Field>, &str> = tracepoint
                .fields()
                .iter()
                .map(|&name| format.field(name).cloned().ok_or(name))
                .collect();
            match fields {
                Ok(fields) => {
                    decoder.by_id.insert(format.id, (*tracepoint, fields));
                }
                Err(missing) => unusable.push(Unusable {
                    tracepoint: *tracepoint,
                    why: format!("its format has no field `{missing}`"),
                }),
            }
            match tracepoint {
                Tracepoint::KvmExit => {
                    for (slot, table) in decoder.exit_names.iter_mut().zip(&format.symbols) {
                        *slot = table.names.clone();
                    }
                }
                Tracepoint::KvmUserspaceExit => {
                    if let Some(table) = format.symbols.first() {
                        decoder.userspace_exit_names = table.names.clone();
                    }
                }
                _ => {}
            }
        }
        (decoder, unusable)
    }

    /// The tracepoint a record belongs to, by its `common_type`.
    pub fn tracepoint(&self, record: &[u8]) -> Option<Tracepoint> {
        let id = u16::from_le_bytes([*record.first()?, *record.get(1)?]);
        self.by_id
            .get(&u64::from(id))
            .map(|(tracepoint, _)| *tracepoint)
    }

    /// The record's event; `None` for a tracepoint not given or a record
    /// too short for its format.
    pub fn decode(&self, record: &[u8]) -> Option<KvmEvent> {
        let id = u16::from_le_bytes([*record.first()?, *record.get(1)?]);
        let (tracepoint, fields) = self.by_id.get(&u64::from(id))?;
        let value = |index: usize| fields.get(index)?.value(record);
        let small = |index: usize| value(index).and_then(|v| u32::try_from(v & 0xFFFF_FFFF).ok());
        let byte = |index: usize| value(index).and_then(|v| u8::try_from(v & 0xFF).ok());
        let flag = |index: usize| value(index).map(|v| v != 0);
        let signed = |index: usize| value(index).and_then(|v| i32::try_from(v.cast_signed()).ok());
        Some(match tracepoint {
            Tracepoint::KvmExit => {
                let reason = value(0)?;
                let isa = Isa::of(value(2)?);
                let (reason, failed_entry) = match isa {
                    Isa::Vmx => (reason & 0xFFFF, reason & 1 << 31 != 0),
                    _ => (reason, false),
                };
                KvmEvent::Exit {
                    vcpu: small(6)?,
                    isa,
                    reason: u32::try_from(reason & 0xFFFF_FFFF).ok()?,
                    failed_entry,
                    rip: value(1)?,
                    info1: value(3)?,
                    info2: value(4)?,
                    intr_info: small(5)?,
                }
            }
            Tracepoint::KvmEntry => KvmEvent::Entry {
                vcpu: small(0)?,
                rip: value(1)?,
            },
            Tracepoint::KvmPio => KvmEvent::Pio {
                write: flag(0)?,
                port: u16::try_from(value(1)? & 0xFFFF).ok()?,
                size: byte(2)?,
                count: small(3)?,
            },
            // kvm_mmio's type: 0 unsatisfied read, 1 read, 2 write.
            Tracepoint::KvmMmio => KvmEvent::Mmio {
                write: value(0)? == 2,
                gpa: value(1)?,
            },
            Tracepoint::KvmMsr => KvmEvent::Msr {
                write: flag(0)?,
                msr: small(1)?,
                data: value(2)?,
                faulted: flag(3)?,
            },
            Tracepoint::KvmEmulateInsn => {
                let mut insn = [0u8; 15];
                let bytes = fields.get(3)?.bytes(record)?;
                let length = bytes.len().min(insn.len());
                insn[..length].copy_from_slice(&bytes[..length]);
                KvmEvent::EmulateInsn {
                    rip: value(0)?.wrapping_add(value(1)?),
                    len: byte(2)?.min(15),
                    insn,
                    failed: flag(4)?,
                }
            }
            Tracepoint::KvmUserspaceExit => KvmEvent::UserspaceExit {
                reason: small(0)?,
                errno: signed(1)?,
            },
            Tracepoint::KvmInjVirq => KvmEvent::InjectVirq {
                vector: byte(0)?,
                soft: flag(1)?,
            },
            // dm carries the ICR's delivery-mode bits (10:8); tm is 0 edge.
            Tracepoint::KvmApicAcceptIrq => KvmEvent::AcceptIrq {
                apic_id: small(0)?,
                delivery_mode: u8::try_from((value(1)? >> 8) & 0b111).ok()?,
                level: flag(2)?,
                vector: byte(3)?,
            },
            Tracepoint::KvmMsiSetIrq => KvmEvent::MsiSetIrq {
                address: value(0)?,
                data: value(1)?,
            },
            Tracepoint::KvmSetIrq => KvmEvent::SetIrq {
                gsi: small(0)?,
                level: signed(1)?,
            },
            Tracepoint::KvmIoapicSetIrq => KvmEvent::IoapicSetIrq {
                entry: value(0)?,
                pin: small(1)?,
                coalesced: flag(2)?,
            },
            Tracepoint::KvmEoi => KvmEvent::Eoi {
                apic_id: small(0)?,
                vector: u8::try_from(signed(1)?).ok(),
            },
            Tracepoint::KvmPvEoi => KvmEvent::PvEoi {
                apic_id: small(0)?,
                vector: u8::try_from(signed(1)?).ok(),
            },
            Tracepoint::KvmApicIpi => KvmEvent::ApicIpi {
                icr_low: small(0)?,
                destination: small(1)?,
            },
            Tracepoint::KvmApic => KvmEvent::Apic {
                write: flag(0)?,
                register: small(1)?,
                value: value(2)?,
            },
            Tracepoint::KvmVcpuWakeup => KvmEvent::VcpuWakeup {
                ns: value(0)?,
                waited: flag(1)?,
                valid: flag(2)?,
            },
            Tracepoint::KvmHaltPollNs => KvmEvent::HaltPollNs {
                grow: flag(0)?,
                vcpu: small(1)?,
                new: small(2)?,
                old: small(3)?,
            },
        })
    }
}

impl ExitNames for Decoder {
    /// The kernel's name of an exit reason ("EXTERNAL_INTERRUPT", "vintr").
    fn exit_name(&self, isa: Isa, reason: u32) -> Option<&str> {
        let table = match isa {
            Isa::Vmx => &self.exit_names[0],
            Isa::Svm => &self.exit_names[1],
            Isa::Other(_) => return None,
        };
        table.get(&u64::from(reason)).map(String::as_str)
    }

    fn userspace_exit_name(&self, reason: u32) -> Option<&str> {
        self.userspace_exit_names
            .get(&u64::from(reason))
            .map(String::as_str)
    }
}

/// Builds records the way the kernel lays them out under a format, for
/// tests and for the observer's own fixtures: each named field written at
/// its offset with its size.
pub fn encode(format: &EventFormat, values: &[(&str, u64)]) -> Vec<u8> {
    let end = format
        .fields
        .iter()
        .map(|field| field.offset + field.size)
        .max()
        .unwrap_or(0);
    let mut record = vec![0u8; end];
    let mut put = |field: &Field, value: u64| {
        let bytes = value.to_le_bytes();
        let width = field.size.min(8);
        record[field.offset..field.offset + width].copy_from_slice(&bytes[..width]);
    };
    if let Some(common_type) = format.field("common_type") {
        put(common_type, format.id);
    }
    for (name, value) in values {
        if let Some(field) = format.field(name) {
            put(field, *value);
        }
    }
    record
}

/// The formats of this kernel (6.18) as tracefs published them, kept
/// beside the code: the decoder's tests build records from them.
#[cfg(test)]
pub(crate) fn published_formats() -> Vec<(Tracepoint, EventFormat)> {
    macro_rules! formats {
        ($($tracepoint:ident => $file:literal),* $(,)?) => {
            vec![$((Tracepoint::$tracepoint, EventFormat::parse(include_str!(concat!("formats/", $file))).unwrap())),*]
        };
    }
    formats!(
        KvmExit => "kvm_exit", KvmEntry => "kvm_entry", KvmPio => "kvm_pio", KvmMmio => "kvm_mmio",
        KvmMsr => "kvm_msr", KvmEmulateInsn => "kvm_emulate_insn",
        KvmUserspaceExit => "kvm_userspace_exit", KvmInjVirq => "kvm_inj_virq",
        KvmApicAcceptIrq => "kvm_apic_accept_irq", KvmMsiSetIrq => "kvm_msi_set_irq",
        KvmSetIrq => "kvm_set_irq", KvmIoapicSetIrq => "kvm_ioapic_set_irq", KvmEoi => "kvm_eoi",
        KvmPvEoi => "kvm_pv_eoi", KvmApicIpi => "kvm_apic_ipi", KvmApic => "kvm_apic",
        KvmVcpuWakeup => "kvm_vcpu_wakeup", KvmHaltPollNs => "kvm_halt_poll_ns",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use dirq_arch::exit::VmxExit;

    fn format(tracepoint: Tracepoint) -> EventFormat {
        published_formats()
            .into_iter()
            .find(|(t, _)| *t == tracepoint)
            .map(|(_, format)| format)
            .unwrap()
    }

    #[test]
    fn every_tracepoint_has_a_published_format_and_decodes_from_it() {
        let formats = published_formats();
        let (decoder, unusable) = Decoder::new(&formats);
        assert!(unusable.is_empty(), "{unusable:?}");
        for &tracepoint in Tracepoint::ALL {
            let record = encode(&format(tracepoint), &[]);
            assert_eq!(decoder.tracepoint(&record), Some(tracepoint));
            assert!(decoder.decode(&record).is_some(), "{tracepoint}");
        }
    }

    /// Every exit reason dirq names, as a VMX kvm_exit record and, where
    /// SVM has one, as an SVM record: decoded to the reason the kernel's
    /// own table names, and that name to dirq's one naming.
    #[test]
    fn every_exit_reason_dirq_names_decodes_on_vmx_and_svm() {
        let (decoder, _) = Decoder::new(&published_formats());
        let exit = format(Tracepoint::KvmExit);
        let vmx_code = |name: &str| -> u64 {
            *exit.symbols[0]
                .names
                .iter()
                .find(|(_, n)| *n == name)
                .unwrap_or_else(|| panic!("VMX table lacks {name}"))
                .0
        };
        for &reason in VmxExit::ALL {
            if reason == VmxExit::Other {
                continue;
            }
            let code = vmx_code(reason.name());
            let record = encode(
                &exit,
                &[
                    ("exit_reason", code),
                    ("isa", 1),
                    ("guest_rip", 0x1234),
                    ("vcpu_id", 3),
                ],
            );
            let Some(KvmEvent::Exit {
                isa,
                reason: decoded,
                rip,
                vcpu,
                ..
            }) = decoder.decode(&record)
            else {
                panic!("{reason}");
            };
            assert_eq!((isa, rip, vcpu), (Isa::Vmx, 0x1234, 3));
            let name = decoder.exit_name(isa, decoded).unwrap();
            assert_eq!(VmxExit::from_name(name), Some(reason));
        }
        let svm = [
            ("interrupt", VmxExit::ExternalInterrupt),
            ("vintr", VmxExit::InterruptWindow),
            ("hlt", VmxExit::Hlt),
            ("io", VmxExit::IoInstruction),
            ("msr", VmxExit::MsrWrite),
            ("npf", VmxExit::EptViolation),
            ("nmi", VmxExit::ExceptionNmi),
            ("avic_unaccelerated_access", VmxExit::ApicAccess),
        ];
        for (name, reason) in svm {
            let code = *exit.symbols[1]
                .names
                .iter()
                .find(|(_, n)| *n == name)
                .unwrap()
                .0;
            let record = encode(&exit, &[("exit_reason", code), ("isa", 2), ("info1", 1)]);
            let Some(KvmEvent::Exit {
                isa,
                reason: decoded,
                info1,
                ..
            }) = decoder.decode(&record)
            else {
                panic!("{name}");
            };
            let decoded_name = decoder.exit_name(isa, decoded).unwrap();
            assert_eq!(
                VmxExit::of_svm(decoded_name, info1 & 1 == 1),
                reason,
                "{name}"
            );
        }
    }

    #[test]
    fn a_failed_vm_entry_is_the_reasons_bit_31() {
        let (decoder, _) = Decoder::new(&published_formats());
        let record = encode(
            &format(Tracepoint::KvmExit),
            &[("exit_reason", 33 | 1 << 31), ("isa", 1)],
        );
        let Some(KvmEvent::Exit {
            reason,
            failed_entry,
            ..
        }) = decoder.decode(&record)
        else {
            panic!()
        };
        assert_eq!((reason, failed_entry), (33, true));
        assert_eq!(decoder.exit_name(Isa::Vmx, reason), Some("INVALID_STATE"));
    }

    #[test]
    fn fields_decode_at_the_formats_offsets() {
        let (decoder, _) = Decoder::new(&published_formats());
        let msr = encode(
            &format(Tracepoint::KvmMsr),
            &[("write", 1), ("ecx", 0x80B), ("data", 0), ("exception", 0)],
        );
        assert_eq!(
            decoder.decode(&msr),
            Some(KvmEvent::Msr {
                write: true,
                msr: 0x80B,
                data: 0,
                faulted: false
            })
        );
        let emulate = encode(
            &format(Tracepoint::KvmEmulateInsn),
            &[
                ("rip", 0x1000),
                ("csbase", 0x10),
                ("len", 2),
                ("insn", 0x300F),
            ],
        );
        let Some(KvmEvent::EmulateInsn { rip, len, insn, .. }) = decoder.decode(&emulate) else {
            panic!()
        };
        assert_eq!((rip, len, &insn[..2]), (0x1010, 2, &[0x0F, 0x30][..]));
        let accept = encode(
            &format(Tracepoint::KvmApicAcceptIrq),
            &[("apicid", 1), ("dm", 0x400), ("tm", 1), ("vec", 0x41)],
        );
        assert_eq!(
            decoder.decode(&accept),
            Some(KvmEvent::AcceptIrq {
                apic_id: 1,
                delivery_mode: 4,
                level: true,
                vector: 0x41
            })
        );
        let nothing_in_service = encode(
            &format(Tracepoint::KvmEoi),
            &[("apicid", 1), ("vector", u64::from(u32::MAX))],
        );
        assert_eq!(
            decoder.decode(&nothing_in_service),
            Some(KvmEvent::Eoi {
                apic_id: 1,
                vector: None
            })
        );
        let wakeup = encode(
            &format(Tracepoint::KvmUserspaceExit),
            &[("reason", 2), ("errno", (-4i64).cast_unsigned())],
        );
        assert_eq!(
            decoder.decode(&wakeup),
            Some(KvmEvent::UserspaceExit {
                reason: 2,
                errno: -4
            })
        );
    }

    #[test]
    fn a_format_missing_a_field_is_unusable_and_named() {
        let mut exit = format(Tracepoint::KvmExit);
        exit.fields.retain(|field| field.name != "guest_rip");
        let (decoder, unusable) = Decoder::new(&[(Tracepoint::KvmExit, exit.clone())]);
        assert_eq!(unusable.len(), 1);
        assert!(unusable[0].why.contains("guest_rip"), "{:?}", unusable[0]);
        assert_eq!(decoder.decode(&encode(&exit, &[])), None);
        assert_eq!(decoder.decode(&[1]), None, "shorter than common_type");
    }
}
