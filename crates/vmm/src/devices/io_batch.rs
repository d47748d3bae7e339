//! The I/O batch doorbell (mechanisms.md section 8): a 32-bit write to its
//! port is the guest-physical address of a `struct dirq_io_batch` (a count,
//! then port, size and value per write) whose port writes the doorbell
//! replays, in order, to the devices it was given, as if the guest had made
//! them: N exits become one. The whole batch is checked before any of it
//! runs, so a bad entry anywhere leaves every device untouched.

use std::ops::Range;
use std::sync::Arc;

use vm_memory::{Bytes, GuestAddress};

use super::control::REGISTER32_PORTS;
use crate::abi::{IO_BATCH_ENTRY_SIZE, IO_BATCH_HEADER_SIZE, IO_BATCH_MAX};
use crate::bus::{
    check_access_size, check_fits, le_u32, Bus, BusError, DeviceError, Direction, PioDevice, Space,
};
use crate::memory::GuestMemory;

/// Why the doorbell refused what the guest rang it with.
#[derive(Debug, thiserror::Error)]
pub enum DoorbellError {
    #[error("the guest's batch at {gpa:#x}")]
    Batch {
        gpa: u64,
        #[source]
        source: IoBatchError,
    },
    #[error("the guest's batch at {gpa:#x}, replayed")]
    Replay {
        gpa: u64,
        #[source]
        source: BusError,
    },
    #[error("the guest read the doorbell, which only takes writes")]
    Read,
}

/// What is wrong with a guest's I/O batch: nothing of it is replayed then.
#[derive(Debug, thiserror::Error)]
pub enum IoBatchError {
    #[error("its {len} bytes are not all in guest RAM")]
    OutsideRam { len: usize },
    #[error("it holds {count} writes, at most {IO_BATCH_MAX} fit")]
    TooMany { count: u32 },
    #[error("its header's reserved word is {0:#x}, not 0")]
    ReservedHeader(u32),
    #[error("entry {index}: reserved byte is {value:#x}, not 0 (a batch holds port writes only)")]
    ReservedByte { index: usize, value: u8 },
    #[error("entry {index}: size {size}, not 1, 2 or 4")]
    BadSize { index: usize, size: u8 },
    #[error("entry {index}: value {value:#x} does not fit its {size} bytes")]
    ValueTooWide { index: usize, value: u32, size: u8 },
    #[error("entry {index}: port {port:#x} rings the doorbell itself")]
    Nested { index: usize, port: u16 },
    #[error("entry {index}: its {size}-byte write at port {port:#x} runs past the end of the {device}'s ports")]
    PortsStraddled {
        index: usize,
        port: u16,
        size: u8,
        device: &'static str,
    },
    #[error("entry {index}: port {port:#x} is owned by no device the doorbell replays to")]
    UnownedPort { index: usize, port: u16 },
}

/// One checked entry of an I/O batch.
struct BatchWrite {
    port: u16,
    bytes: [u8; 4],
    size: usize,
}

/// The doorbell at `port`, reading batches from guest RAM and replaying
/// them to the devices on its own bus.
pub struct IoBatchDoorbell {
    port: u16,
    memory: GuestMemory,
    targets: Bus,
}

impl IoBatchDoorbell {
    /// A doorbell at `port` whose batches, in `memory`, write to the ports
    /// of `targets` (devices that are on the machine's bus as well).
    pub fn new(port: u16, memory: GuestMemory, targets: Bus) -> Self {
        IoBatchDoorbell {
            port,
            memory,
            targets,
        }
    }

    /// The ports the doorbell answers at on the machine's bus: a 32-bit
    /// register.
    pub fn ports(&self) -> Range<u16> {
        self.port..self.port + REGISTER32_PORTS
    }

    /// Puts the doorbell on `bus` at its port.
    pub fn attach(self, bus: &mut Bus) {
        bus.add_pio(self.ports(), Arc::new(self));
    }

    fn read_batch(&self, gpa: u64) -> Result<Vec<BatchWrite>, IoBatchError> {
        let read = |len: usize| {
            let mut bytes = vec![0u8; len];
            self.memory
                .read_slice(&mut bytes, GuestAddress(gpa))
                .map(|()| bytes)
                .map_err(|_| IoBatchError::OutsideRam { len })
        };
        let header = read(IO_BATCH_HEADER_SIZE)?;
        let word = |at: usize| {
            u32::from_le_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]])
        };
        let count = word(0);
        if count as usize > IO_BATCH_MAX {
            return Err(IoBatchError::TooMany { count });
        }
        if word(4) != 0 {
            return Err(IoBatchError::ReservedHeader(word(4)));
        }
        let batch = read(IO_BATCH_HEADER_SIZE + count as usize * IO_BATCH_ENTRY_SIZE)?;
        batch[IO_BATCH_HEADER_SIZE..]
            .chunks_exact(IO_BATCH_ENTRY_SIZE)
            .enumerate()
            .map(|(index, entry)| self.check_entry(index, entry))
            .collect()
    }

    fn check_entry(&self, index: usize, entry: &[u8]) -> Result<BatchWrite, IoBatchError> {
        let port = u16::from_le_bytes([entry[0], entry[1]]);
        let (size, reserved) = (entry[2], entry[3]);
        let bytes = [entry[4], entry[5], entry[6], entry[7]];
        let value = u32::from_le_bytes(bytes);
        if reserved != 0 {
            return Err(IoBatchError::ReservedByte {
                index,
                value: reserved,
            });
        }
        if !matches!(size, 1 | 2 | 4) {
            return Err(IoBatchError::BadSize { index, size });
        }
        if size < 4 && value >> (8 * u32::from(size)) != 0 {
            return Err(IoBatchError::ValueTooWide { index, value, size });
        }
        if port == self.port {
            return Err(IoBatchError::Nested { index, port });
        }
        let Some((range, device)) = self.targets.pio_device(port) else {
            return Err(IoBatchError::UnownedPort { index, port });
        };
        if check_fits(Space::Pio, range, port, usize::from(size), device.name()).is_err() {
            return Err(IoBatchError::PortsStraddled {
                index,
                port,
                size,
                device: device.name(),
            });
        }
        Ok(BatchWrite {
            port,
            bytes,
            size: usize::from(size),
        })
    }
}

impl PioDevice for IoBatchDoorbell {
    fn name(&self) -> &'static str {
        "I/O batch doorbell"
    }

    fn read(&self, _cpu: usize, _offset: u16, _data: &mut [u8]) -> Result<(), DeviceError> {
        Err(DoorbellError::Read.into())
    }

    fn write(&self, cpu: usize, _offset: u16, data: &[u8]) -> Result<(), DeviceError> {
        check_access_size("the I/O batch doorbell", Direction::Write, data.len(), 4)?;
        let gpa = u64::from(le_u32(data));
        let writes = self
            .read_batch(gpa)
            .map_err(|source| DoorbellError::Batch { gpa, source })?;
        for write in writes {
            self.targets
                .pio_write(cpu, write.port, &write.bytes[..write.size])
                .map_err(|source| DoorbellError::Replay { gpa, source })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::bus::le_value;

    const DOORBELL: u16 = 0xfc;
    const BATCH: u64 = 0x5000;

    /// Records the offsets it is written at.
    #[derive(Default)]
    struct Recorder(Mutex<Vec<(u16, u64)>>);

    impl PioDevice for Recorder {
        fn name(&self) -> &'static str {
            "recorder"
        }
        fn read(&self, _cpu: usize, _offset: u16, data: &mut [u8]) -> Result<(), DeviceError> {
            data.fill(0);
            Ok(())
        }
        fn write(&self, _cpu: usize, offset: u16, data: &[u8]) -> Result<(), DeviceError> {
            self.0
                .lock()
                .expect("not poisoned")
                .push((offset, le_value(data)));
            Ok(())
        }
    }

    /// The machine's bus with a recorder on 0x1f0-0x1f7, the doorbell on
    /// 0xfc replaying to it, and a second recorder on 0x3f8 that the
    /// doorbell was not given.
    fn machine() -> (GuestMemory, Arc<Recorder>, Bus) {
        let memory = crate::memory::create_guest_memory().expect("guest RAM");
        let device = Arc::new(Recorder::default());
        let mut targets = Bus::default();
        targets.add_pio(0x1f0..0x1f8, device.clone());
        let mut bus = Bus::default();
        bus.add_pio(0x1f0..0x1f8, device.clone());
        bus.add_pio(0x3f8..0x400, Arc::new(Recorder::default()));
        IoBatchDoorbell::new(DOORBELL, memory.clone(), targets).attach(&mut bus);
        (memory, device, bus)
    }

    /// Writes a batch of `entries` (port, size, value) at `BATCH`.
    fn write_batch(memory: &GuestMemory, entries: &[(u16, u8, u32)]) {
        memory
            .write_obj(
                u32::try_from(entries.len()).expect("a few entries"),
                GuestAddress(BATCH),
            )
            .expect("header");
        for (index, (port, size, value)) in entries.iter().enumerate() {
            let mut entry = [0u8; 8];
            entry[..2].copy_from_slice(&port.to_le_bytes());
            entry[2] = *size;
            entry[4..].copy_from_slice(&value.to_le_bytes());
            memory
                .write_slice(&entry, GuestAddress(BATCH + 8 + 8 * index as u64))
                .expect("entry");
        }
    }

    /// Rings the doorbell with `gpa` through the machine's bus.
    fn ring(bus: &Bus, gpa: u32) -> Result<(), BusError> {
        bus.pio_write(0, DOORBELL, &gpa.to_le_bytes())
    }

    /// The doorbell's refusal of a batch, from the bus's error.
    fn refusal(err: &BusError) -> &DoorbellError {
        let BusError::Device { device, source } = err else {
            panic!("expected the doorbell's error, got {err}");
        };
        assert_eq!(*device, "I/O batch doorbell");
        source.model().expect("the doorbell's own error")
    }

    #[test]
    fn io_batch_doorbell_replays_the_guests_writes_in_order() {
        let (memory, device, bus) = machine();
        write_batch(
            &memory,
            &[(0x1f2, 1, 8), (0x1f3, 2, 0x1234), (0x1f7, 1, 0x34)],
        );
        ring(&bus, 0x5000).expect("doorbell");
        assert_eq!(
            *device.0.lock().expect("not poisoned"),
            vec![(2, 8), (3, 0x1234), (7, 0x34)]
        );
        // A batch that rings the doorbell again is refused, not recursed into.
        write_batch(&memory, &[(DOORBELL, 4, 0)]);
        let err = ring(&bus, 0x5000).expect_err("nested doorbell");
        assert!(
            matches!(
                refusal(&err),
                DoorbellError::Batch {
                    gpa: BATCH,
                    source: IoBatchError::Nested {
                        index: 0,
                        port: DOORBELL
                    },
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn a_bad_io_batch_entry_is_named_and_nothing_of_the_batch_runs() {
        let (memory, device, bus) = machine();
        let good = [0xf2, 0x01, 1, 0, 8, 0, 0, 0];
        for (bad, message) in [
            (
                [0xf3, 0x01, 1, 0xff, 0, 0, 0, 0],
                "entry 1: reserved byte is 0xff",
            ),
            ([0xf3, 0x01, 3, 0, 0, 0, 0, 0], "entry 1: size 3"),
            (
                [0xf3, 0x01, 1, 0, 0, 1, 0, 0],
                "entry 1: value 0x100 does not fit",
            ),
            (
                [0x34, 0x12, 1, 0, 0, 0, 0, 0],
                "entry 1: port 0x1234 is owned by no device",
            ),
            // On the machine's bus, but not a device the doorbell replays to.
            (
                [0xf8, 0x03, 1, 0, 0, 0, 0, 0],
                "entry 1: port 0x3f8 is owned by no device the doorbell replays to",
            ),
            (
                [0xf6, 0x01, 4, 0, 0, 0, 0, 0],
                "entry 1: its 4-byte write at port 0x1f6 runs past the end of the recorder's ports",
            ),
        ] {
            memory.write_obj(2u32, GuestAddress(BATCH)).expect("header");
            memory
                .write_slice(&[good, bad].concat(), GuestAddress(BATCH + 8))
                .expect("entries");
            let err = ring(&bus, 0x5000).expect_err("bad entry");
            let DoorbellError::Batch { source, .. } = refusal(&err) else {
                panic!("{err}");
            };
            assert!(source.to_string().starts_with(message), "{source}");
        }
        assert!(device.0.lock().expect("not poisoned").is_empty());
        let err = ring(&bus, 0x00ff_fffc).expect_err("straddles the end of RAM");
        assert!(matches!(
            refusal(&err),
            DoorbellError::Batch {
                source: IoBatchError::OutsideRam { .. },
                ..
            }
        ));
    }

    #[test]
    fn the_doorbell_takes_only_32_bit_writes() {
        let (_, _, bus) = machine();
        let err = bus.pio_write(0, DOORBELL, &[0]).expect_err("a byte");
        assert!(
            matches!(
                err,
                BusError::Device {
                    source: DeviceError::BadAccessSize { len: 1, .. },
                    ..
                }
            ),
            "{err}"
        );
        let mut data = [0u8; 4];
        let err = bus.pio_read(0, DOORBELL, &mut data).expect_err("a read");
        assert!(matches!(refusal(&err), DoorbellError::Read), "{err}");
    }
}
