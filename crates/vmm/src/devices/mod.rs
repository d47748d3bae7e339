//! Devices and the bus that routes guest port, MMIO and MSR accesses to them.
//! A new device is a new file implementing `PioDevice`, `MmioDevice` or
//! `MsrDevice`, registered on the `Bus` when the machine is built.

pub mod control;
pub mod interrupt;
pub mod ioapic;
pub mod msi_device;
pub mod serial;
pub mod userspace_irqchip;

use std::ops::Range;
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("guest wrote {len} bytes to {what}, which takes {expected}")]
    BadAccessSize {
        what: &'static str,
        len: usize,
        expected: usize,
    },
    #[error("{0}")]
    Device(String),
}

#[derive(Debug, thiserror::Error)]
pub enum BusError {
    #[error("guest accessed I/O port {port:#x} ({direction}), which no device owns")]
    UnownedPort { port: u16, direction: &'static str },
    #[error("guest accessed guest-physical address {address:#x} ({direction}), which no RAM or device backs")]
    UnownedMmio {
        address: u64,
        direction: &'static str,
    },
    #[error(
        "guest accessed MSR {msr:#x} ({direction}), which neither KVM nor a VMM device handles"
    )]
    UnownedMsr { msr: u32, direction: &'static str },
    #[error("{device}")]
    Device {
        device: &'static str,
        #[source]
        source: DeviceError,
    },
}

/// A device on the I/O port bus. `offset` is relative to its base port.
pub trait PioDevice: Send + Sync {
    fn name(&self) -> &'static str;
    fn read(&self, cpu: usize, offset: u16, data: &mut [u8]) -> Result<(), DeviceError>;
    fn write(&self, cpu: usize, offset: u16, data: &[u8]) -> Result<(), DeviceError>;
}

/// A device on the MMIO bus. `offset` is relative to its base address.
pub trait MmioDevice: Send + Sync {
    fn name(&self) -> &'static str;
    fn read(&self, cpu: usize, offset: u64, data: &mut [u8]) -> Result<(), DeviceError>;
    fn write(&self, cpu: usize, offset: u64, data: &[u8]) -> Result<(), DeviceError>;
}

/// A device owning MSRs that KVM sends to userspace.
pub trait MsrDevice: Send + Sync {
    fn name(&self) -> &'static str;
    fn read(&self, cpu: usize, msr: u32) -> Result<u64, DeviceError>;
    fn write(&self, cpu: usize, msr: u32, value: u64) -> Result<(), DeviceError>;
}

/// Routes exits to devices by address range.
#[derive(Default)]
pub struct Bus {
    pio: Vec<(Range<u16>, Arc<dyn PioDevice>)>,
    mmio: Vec<(Range<u64>, Arc<dyn MmioDevice>)>,
    msr: Vec<(Range<u32>, Arc<dyn MsrDevice>)>,
}

impl Bus {
    pub fn add_pio(&mut self, ports: Range<u16>, device: Arc<dyn PioDevice>) {
        self.pio.push((ports, device));
    }

    pub fn add_mmio(&mut self, addresses: Range<u64>, device: Arc<dyn MmioDevice>) {
        self.mmio.push((addresses, device));
    }

    pub fn add_msr(&mut self, msrs: Range<u32>, device: Arc<dyn MsrDevice>) {
        self.msr.push((msrs, device));
    }

    pub fn pio_read(&self, cpu: usize, port: u16, data: &mut [u8]) -> Result<(), BusError> {
        let (range, device) = find(&self.pio, port).ok_or(BusError::UnownedPort {
            port,
            direction: "in",
        })?;
        device
            .read(cpu, port - range.start, data)
            .map_err(wrap(device.name()))
    }

    pub fn pio_write(&self, cpu: usize, port: u16, data: &[u8]) -> Result<(), BusError> {
        let (range, device) = find(&self.pio, port).ok_or(BusError::UnownedPort {
            port,
            direction: "out",
        })?;
        device
            .write(cpu, port - range.start, data)
            .map_err(wrap(device.name()))
    }

    pub fn mmio_read(&self, cpu: usize, address: u64, data: &mut [u8]) -> Result<(), BusError> {
        let (range, device) = find(&self.mmio, address).ok_or(BusError::UnownedMmio {
            address,
            direction: "read",
        })?;
        device
            .read(cpu, address - range.start, data)
            .map_err(wrap(device.name()))
    }

    pub fn mmio_write(&self, cpu: usize, address: u64, data: &[u8]) -> Result<(), BusError> {
        let (range, device) = find(&self.mmio, address).ok_or(BusError::UnownedMmio {
            address,
            direction: "write",
        })?;
        device
            .write(cpu, address - range.start, data)
            .map_err(wrap(device.name()))
    }

    pub fn msr_read(&self, cpu: usize, msr: u32) -> Result<u64, BusError> {
        let (_, device) = find(&self.msr, msr).ok_or(BusError::UnownedMsr {
            msr,
            direction: "rdmsr",
        })?;
        device.read(cpu, msr).map_err(wrap(device.name()))
    }

    pub fn msr_write(&self, cpu: usize, msr: u32, value: u64) -> Result<(), BusError> {
        let (_, device) = find(&self.msr, msr).ok_or(BusError::UnownedMsr {
            msr,
            direction: "wrmsr",
        })?;
        device.write(cpu, msr, value).map_err(wrap(device.name()))
    }
}

fn find<K: PartialOrd, D: ?Sized>(
    entries: &[(Range<K>, Arc<D>)],
    key: K,
) -> Option<(&Range<K>, &Arc<D>)> {
    entries
        .iter()
        .find(|(range, _)| range.contains(&key))
        .map(|(range, device)| (range, device))
}

fn wrap(device: &'static str) -> impl FnOnce(DeviceError) -> BusError {
    move |source| BusError::Device { device, source }
}

/// Reads a little-endian value of 1, 2, 4 or 8 bytes.
pub fn le_value(data: &[u8]) -> u64 {
    data.iter()
        .rev()
        .fold(0, |value, &byte| (value << 8) | u64::from(byte))
}

/// Fills `data` with the low bytes of `value`, little-endian.
pub fn fill_le(data: &mut [u8], value: u64) {
    for (index, byte) in data.iter_mut().enumerate() {
        *byte = (value >> (8 * index)) as u8;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Records the offsets it is written at.
    #[derive(Default)]
    struct Recorder(Mutex<Vec<(u16, u64)>>);

    impl PioDevice for Recorder {
        fn name(&self) -> &'static str {
            "recorder"
        }
        fn read(&self, _cpu: usize, offset: u16, data: &mut [u8]) -> Result<(), DeviceError> {
            fill_le(data, u64::from(offset));
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

    #[test]
    fn bus_routes_by_range_with_relative_offsets() {
        let device = Arc::new(Recorder::default());
        let mut bus = Bus::default();
        bus.add_pio(0x3f8..0x400, device.clone());
        bus.pio_write(0, 0x3fd, &[0x34, 0x12]).expect("owned port");
        let mut data = [0u8; 1];
        bus.pio_read(0, 0x3fa, &mut data).expect("owned port");
        assert_eq!(data, [2]);
        assert_eq!(*device.0.lock().expect("not poisoned"), vec![(5, 0x1234)]);
    }

    #[test]
    fn unowned_accesses_name_what_was_touched() {
        let bus = Bus::default();
        let err = bus.pio_write(1, 0x1234, &[0]).expect_err("nobody owns it");
        assert!(matches!(
            err,
            BusError::UnownedPort {
                port: 0x1234,
                direction: "out"
            }
        ));
        let err = bus
            .mmio_read(0, 0xd000_0000, &mut [0; 4])
            .expect_err("nobody owns it");
        assert!(err.to_string().contains("0xd0000000"), "{err}");
        let err = bus
            .msr_write(0, 0x4b56_4d04, 1)
            .expect_err("nobody owns it");
        assert!(matches!(
            err,
            BusError::UnownedMsr {
                msr: 0x4b56_4d04,
                ..
            }
        ));
    }

    #[test]
    fn little_endian_helpers_round_trip() {
        let mut data = [0u8; 4];
        fill_le(&mut data, 0xdead_beef);
        assert_eq!(data, [0xef, 0xbe, 0xad, 0xde]);
        assert_eq!(le_value(&data), 0xdead_beef);
    }
}
