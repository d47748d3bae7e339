//! The bus: routes the guest's port, MMIO and MSR accesses to the devices
//! that own them. Both `devices` and `interrupt`
//! put devices on it; it knows neither: a device's own error travels as
//! the source of `DeviceError::Model`.

use std::ops::Range;
use std::sync::Arc;

use dirq_arch::bits::low_u32;

/// Which way an access goes, for messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Direction {
    Read,
    Write,
}

impl Direction {
    /// The port instruction that accesses this way.
    pub fn port_instruction(self) -> &'static str {
        match self {
            Direction::Read => "in",
            Direction::Write => "out",
        }
    }

    /// The MSR instruction that accesses this way.
    pub fn msr_instruction(self) -> &'static str {
        match self {
            Direction::Read => "rdmsr",
            Direction::Write => "wrmsr",
        }
    }
}

impl std::fmt::Display for Direction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Direction::Read => "read",
            Direction::Write => "write",
        })
    }
}

/// Why a device refused an access: its width, or its own model's error
/// (an interrupt controller's, a PIT's, guest memory's...), kept as the
/// source so that the bus depends on no device.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("guest made a {len}-byte {direction} of {what}, which takes {expected} bytes")]
    BadAccessSize {
        what: &'static str,
        direction: Direction,
        len: usize,
        expected: usize,
    },
    #[error(transparent)]
    Model(Box<dyn std::error::Error + Send + Sync>),
}

impl DeviceError {
    /// The model's error, if it is an `E`.
    pub fn model<E: std::error::Error + 'static>(&self) -> Option<&E> {
        match self {
            DeviceError::Model(source) => source.downcast_ref(),
            DeviceError::BadAccessSize { .. } => None,
        }
    }
}

/// Lets `?` turn each of these errors of a device's model into a
/// `DeviceError::Model`.
macro_rules! device_model_errors {
    ($($error:ty),+ $(,)?) => {
        $(impl From<$error> for $crate::bus::DeviceError {
            fn from(err: $error) -> Self {
                $crate::bus::DeviceError::Model(Box::new(err))
            }
        })+
    };
}
pub(crate) use device_model_errors;

#[derive(Debug, thiserror::Error)]
pub enum BusError {
    #[error("guest accessed I/O port {port:#x} ({}), which no device owns", .direction.port_instruction())]
    UnownedPort { port: u16, direction: Direction },
    #[error("guest accessed guest-physical address {address:#x} ({direction}), which no RAM or device backs")]
    UnownedMmio { address: u64, direction: Direction },
    #[error(
        "guest accessed MSR {msr:#x} ({}), which neither KVM nor a VMM device handles", .direction.msr_instruction()
    )]
    UnownedMsr { msr: u32, direction: Direction },
    #[error("guest made a {len}-byte access at {} {at:#x}, which runs past the end of the {device}'s {} ({first:#x}-{last:#x})", .space.address(), .space.range())]
    Straddled {
        space: Space,
        at: u64,
        len: usize,
        device: &'static str,
        first: u64,
        last: u64,
    },
    #[error("{device} refused the guest's {} of MSR {msr:#x}", .direction.msr_instruction())]
    MsrRefused {
        device: &'static str,
        msr: u32,
        direction: Direction,
        #[source]
        source: DeviceError,
    },
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

/// Whether a `BankedMmio` device served an access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    Served,
    /// Not at an address this vCPU sees the device at: the access goes on
    /// to the bus's fixed ranges.
    NotHere,
}

/// An MMIO device each vCPU sees at its own address, one the guest moves
/// (a LAPIC's xAPIC page, SDM 10.4.5): the device says at each access
/// whether the address is its own. Offered every access before the fixed
/// ranges, as a processor's own APIC answers before the system bus.
pub trait BankedMmio: Send + Sync {
    fn name(&self) -> &'static str;
    fn read(&self, cpu: usize, address: u64, data: &mut [u8]) -> Result<Claim, DeviceError>;
    fn write(&self, cpu: usize, address: u64, data: &[u8]) -> Result<Claim, DeviceError>;
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
    banked_mmio: Vec<Arc<dyn BankedMmio>>,
    msr: Vec<(Range<u32>, Arc<dyn MsrDevice>)>,
    /// Set for guests that probe for hardware (`OpenBus`); dirq's own
    /// guest owns every address it touches, so there an unowned access
    /// ends the run.
    open_bus: Option<Arc<OpenBus>>,
}

/// What a PC does with an access nobody claims, for guests written for a
/// PC (kvm-unit-tests probes ports and MSRs it may not find): a port or
/// MMIO read returns all-ones (a floating bus), a write is dropped, and an
/// MSR access nobody handles, or one the owning device refuses, raises
/// #GP as the SDM's RDMSR/WRMSR pages say. Every such access is counted,
/// by address, for the run's report.
#[derive(Debug, Default)]
pub struct OpenBus {
    counts: std::sync::Mutex<std::collections::BTreeMap<UnclaimedAccess, u64>>,
}

/// An access `OpenBus` answered in the device's place.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum UnclaimedAccess {
    Port {
        port: u16,
        direction: Direction,
    },
    Mmio {
        address: u64,
        direction: Direction,
    },
    /// An MSR access answered with #GP.
    Msr {
        msr: u32,
        direction: Direction,
    },
}

impl std::fmt::Display for UnclaimedAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UnclaimedAccess::Port { port, direction } => {
                write!(f, "port {port:#x} {direction}")
            }
            UnclaimedAccess::Mmio { address, direction } => {
                write!(f, "MMIO {address:#x} {direction}")
            }
            UnclaimedAccess::Msr { msr, direction } => write!(f, "MSR {msr:#x} {direction} (#GP)"),
        }
    }
}

impl OpenBus {
    fn count(&self, access: UnclaimedAccess) {
        *self
            .counts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .entry(access)
            .or_default() += 1;
    }

    /// Every unclaimed access so far, with how often it came.
    pub fn counts(&self) -> Vec<(UnclaimedAccess, u64)> {
        self.counts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .iter()
            .map(|(access, count)| (*access, *count))
            .collect()
    }
}

impl Bus {
    /// Answers unclaimed accesses as `open_bus` says instead of failing.
    pub fn set_open_bus(&mut self, open_bus: Arc<OpenBus>) {
        self.open_bus = Some(open_bus);
    }

    /// Whether `err`, from an MSR access, is the guest's fault to be
    /// answered with #GP (with an open bus) rather than the run's end.
    pub fn msr_faults_guest(&self, err: &BusError) -> bool {
        let Some(open_bus) = &self.open_bus else {
            return false;
        };
        let access = match err {
            BusError::UnownedMsr { msr, direction } => UnclaimedAccess::Msr {
                msr: *msr,
                direction: *direction,
            },
            BusError::MsrRefused { msr, direction, .. } => UnclaimedAccess::Msr {
                msr: *msr,
                direction: *direction,
            },
            _ => return false,
        };
        open_bus.count(access);
        true
    }

    /// The open bus's answer to an unclaimed access, if the bus has one.
    fn unclaimed(&self, access: UnclaimedAccess) -> Option<()> {
        self.open_bus
            .as_ref()
            .map(|open_bus| open_bus.count(access))
    }

    pub fn add_pio(&mut self, ports: Range<u16>, device: Arc<dyn PioDevice>) {
        self.pio.push((ports, device));
    }

    pub fn add_mmio(&mut self, addresses: Range<u64>, device: Arc<dyn MmioDevice>) {
        self.mmio.push((addresses, device));
    }

    pub fn add_banked_mmio(&mut self, device: Arc<dyn BankedMmio>) {
        self.banked_mmio.push(device);
    }

    /// Offers an access to the banked devices; true if one served it.
    fn banked(
        &self,
        mut access: impl FnMut(&dyn BankedMmio) -> Result<Claim, DeviceError>,
    ) -> Result<bool, BusError> {
        for device in &self.banked_mmio {
            if access(device.as_ref()).map_err(wrap(device.name()))? == Claim::Served {
                return Ok(true);
            }
        }
        Ok(false)
    }

    pub fn add_msr(&mut self, msrs: Range<u32>, device: Arc<dyn MsrDevice>) {
        self.msr.push((msrs, device));
    }

    pub fn pio_read(&self, cpu: usize, port: u16, data: &mut [u8]) -> Result<(), BusError> {
        self.access::<PortSpace>(cpu, port, Access::Read(data))
    }

    /// An access to the device whose range holds `at` in space `S`, at its
    /// offset there; without one, the open bus's answer or `S`'s error.
    fn access<S: AddressSpace>(
        &self,
        cpu: usize,
        at: S::Address,
        access: Access<'_>,
    ) -> Result<(), BusError> {
        let direction = access.direction();
        let Some((range, device)) = find(S::devices(self), at) else {
            self.unclaimed(S::unclaimed(at, direction))
                .ok_or_else(|| S::unowned(at, direction))?;
            if let Access::Read(data) = access {
                data.fill(0xff);
            }
            return Ok(());
        };
        let name = S::name(device);
        check_fits(S::SPACE, range, at, access.len(), name)?;
        S::dispatch(device, cpu, at - range.start, access).map_err(wrap(name))
    }

    /// The device that owns `port`, with its ports.
    pub fn pio_device(&self, port: u16) -> Option<(&Range<u16>, &Arc<dyn PioDevice>)> {
        find(&self.pio, port)
    }

    pub fn pio_write(&self, cpu: usize, port: u16, data: &[u8]) -> Result<(), BusError> {
        self.access::<PortSpace>(cpu, port, Access::Write(data))
    }

    pub fn mmio_read(&self, cpu: usize, address: u64, data: &mut [u8]) -> Result<(), BusError> {
        if self.banked(|device| device.read(cpu, address, data))? {
            return Ok(());
        }
        self.access::<MmioSpace>(cpu, address, Access::Read(data))
    }

    pub fn mmio_write(&self, cpu: usize, address: u64, data: &[u8]) -> Result<(), BusError> {
        if self.banked(|device| device.write(cpu, address, data))? {
            return Ok(());
        }
        self.access::<MmioSpace>(cpu, address, Access::Write(data))
    }

    pub fn msr_read(&self, cpu: usize, msr: u32) -> Result<u64, BusError> {
        let (_, device) = find(&self.msr, msr).ok_or(BusError::UnownedMsr {
            msr,
            direction: Direction::Read,
        })?;
        device
            .read(cpu, msr)
            .map_err(msr_refused(device.name(), msr, Direction::Read))
    }

    pub fn msr_write(&self, cpu: usize, msr: u32, value: u64) -> Result<(), BusError> {
        let (_, device) = find(&self.msr, msr).ok_or(BusError::UnownedMsr {
            msr,
            direction: Direction::Write,
        })?;
        device
            .write(cpu, msr, value)
            .map_err(msr_refused(device.name(), msr, Direction::Write))
    }
}

/// Devices with the range each owns.
type Owners<K, D> = [(Range<K>, Arc<D>)];

fn find<K: PartialOrd, D: ?Sized>(entries: &Owners<K, D>, key: K) -> Option<(&Range<K>, &Arc<D>)> {
    entries
        .iter()
        .find(|(range, _)| range.contains(&key))
        .map(|(range, device)| (range, device))
}

/// Where a device lives: its ports or its guest-physical addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Space {
    Pio,
    Mmio,
}

impl Space {
    fn address(self) -> &'static str {
        match self {
            Space::Pio => "I/O port",
            Space::Mmio => "guest-physical address",
        }
    }

    fn range(self) -> &'static str {
        match self {
            Space::Pio => "ports",
            Space::Mmio => "range",
        }
    }
}

/// One access's data: filled by a read, taken by a write.
enum Access<'a> {
    Read(&'a mut [u8]),
    Write(&'a [u8]),
}

impl Access<'_> {
    fn direction(&self) -> Direction {
        match self {
            Access::Read(_) => Direction::Read,
            Access::Write(_) => Direction::Write,
        }
    }

    fn len(&self) -> usize {
        match self {
            Access::Read(data) => data.len(),
            Access::Write(data) => data.len(),
        }
    }
}

/// An address space whose devices own ranges and are accessed at an offset
/// with a buffer: what `Bus::access` needs to know of it.
trait AddressSpace {
    type Address: Copy + PartialOrd + Into<u64> + std::ops::Sub<Output = Self::Address>;
    type Device: ?Sized;
    const SPACE: Space;
    fn devices(bus: &Bus) -> &Owners<Self::Address, Self::Device>;
    fn name(device: &Self::Device) -> &'static str;
    fn dispatch(
        device: &Self::Device,
        cpu: usize,
        offset: Self::Address,
        access: Access<'_>,
    ) -> Result<(), DeviceError>;
    /// How the open bus counts an access nobody owns.
    fn unclaimed(at: Self::Address, direction: Direction) -> UnclaimedAccess;
    /// The error for an access nobody owns, without an open bus.
    fn unowned(at: Self::Address, direction: Direction) -> BusError;
}

/// Defines `$space`, the `AddressSpace` of `$address`es owned by
/// `$device`s in `Bus::$owners`, whose unowned accesses the open bus counts
/// as `UnclaimedAccess::$unclaimed` and the bus refuses otherwise as
/// `BusError::$unowned` (both naming the address `$at`).
macro_rules! address_space {
    ($(#[$meta:meta])* $space:ident: $address:ty, $device:ident, $kind:expr, $owners:ident,
     $unclaimed:ident, $unowned:ident, $at:ident) => {
        $(#[$meta])*
        struct $space;

        impl AddressSpace for $space {
            type Address = $address;
            type Device = dyn $device;
            const SPACE: Space = $kind;

            fn devices(bus: &Bus) -> &Owners<$address, dyn $device> {
                &bus.$owners
            }

            fn name(device: &dyn $device) -> &'static str {
                device.name()
            }

            fn dispatch(
                device: &dyn $device,
                cpu: usize,
                offset: $address,
                access: Access<'_>,
            ) -> Result<(), DeviceError> {
                match access {
                    Access::Read(data) => device.read(cpu, offset, data),
                    Access::Write(data) => device.write(cpu, offset, data),
                }
            }

            fn unclaimed($at: $address, direction: Direction) -> UnclaimedAccess {
                UnclaimedAccess::$unclaimed { $at, direction }
            }

            fn unowned($at: $address, direction: Direction) -> BusError {
                BusError::$unowned { $at, direction }
            }
        }
    };
}

address_space!(
    /// I/O ports.
    PortSpace: u16, PioDevice, Space::Pio, pio, Port, UnownedPort, port
);
address_space!(
    /// Guest-physical addresses that no RAM backs.
    MmioSpace: u64, MmioDevice, Space::Mmio, mmio, Mmio, UnownedMmio, address
);

/// Refuses an access that starts in a device's range and runs past its
/// end: what lies beyond is not the device's to serve.
pub(crate) fn check_fits<K: Copy + Into<u64>>(
    space: Space,
    range: &Range<K>,
    at: K,
    len: usize,
    device: &'static str,
) -> Result<(), BusError> {
    let (at, end) = (at.into(), range.end.into());
    if u128::from(at) + len as u128 <= u128::from(end) {
        return Ok(());
    }
    Err(BusError::Straddled {
        space,
        at,
        len,
        device,
        first: range.start.into(),
        last: end - 1,
    })
}

fn msr_refused(
    device: &'static str,
    msr: u32,
    direction: Direction,
) -> impl FnOnce(DeviceError) -> BusError {
    move |source| BusError::MsrRefused {
        device,
        msr,
        direction,
        source,
    }
}

fn wrap(device: &'static str) -> impl FnOnce(DeviceError) -> BusError {
    move |source| BusError::Device { device, source }
}

/// Refuses an access of `len` bytes to `what`, whose registers take exactly
/// `expected` bytes.
pub fn check_access_size(
    what: &'static str,
    direction: Direction,
    len: usize,
    expected: usize,
) -> Result<(), DeviceError> {
    if len == expected {
        Ok(())
    } else {
        Err(DeviceError::BadAccessSize {
            what,
            direction,
            len,
            expected,
        })
    }
}

/// Reads a little-endian value of 1, 2, 4 or 8 bytes.
pub fn le_value(data: &[u8]) -> u64 {
    data.iter()
        .rev()
        .fold(0, |value, &byte| (value << 8) | u64::from(byte))
}

/// The low 32 bits of a little-endian access: all of it for the 1-, 2-
/// and 4-byte accesses a 32-bit register takes.
pub fn le_u32(data: &[u8]) -> u32 {
    low_u32(le_value(data))
}

/// The low byte of a little-endian access: all of a 1-byte one.
pub fn le_u8(data: &[u8]) -> u8 {
    data.first().copied().unwrap_or(0)
}

/// Fills `data` with the low bytes of `value`, little-endian.
pub fn fill_le(data: &mut [u8], value: u64) {
    let bytes = value.to_le_bytes();
    for (index, byte) in data.iter_mut().enumerate() {
        *byte = bytes.get(index).copied().unwrap_or(0);
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
    fn an_access_running_past_a_devices_range_is_refused_naming_both() {
        let device = Arc::new(Recorder::default());
        let mut bus = Bus::default();
        bus.add_pio(0x3f8..0x400, device.clone());
        bus.pio_write(0, 0x3fc, &[0; 4])
            .expect("ends at the last port");
        let err = bus
            .pio_write(0, 0x3fe, &[0; 4])
            .expect_err("runs past 0x3ff");
        assert_eq!(
            err.to_string(),
            "guest made a 4-byte access at I/O port 0x3fe, which runs past the end of the recorder's ports (0x3f8-0x3ff)"
        );
        let mut data = [0u8; 2];
        assert!(bus.pio_read(0, 0x3ff, &mut data).is_err());
        assert_eq!(device.0.lock().expect("not poisoned").len(), 1);
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
                direction: Direction::Write
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

    /// The same recorder on MMIO, at offsets below 64 KiB.
    impl MmioDevice for Recorder {
        fn name(&self) -> &'static str {
            "mmio recorder"
        }
        fn read(&self, cpu: usize, offset: u64, data: &mut [u8]) -> Result<(), DeviceError> {
            let offset = u16::try_from(offset).expect("a small test range");
            PioDevice::read(self, cpu, offset, data)
        }
        fn write(&self, cpu: usize, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
            let offset = u16::try_from(offset).expect("a small test range");
            PioDevice::write(self, cpu, offset, data)
        }
    }

    #[test]
    fn each_space_refuses_unowned_and_straddling_accesses_in_both_directions() {
        let device = Arc::new(Recorder::default());
        let mut bus = Bus::default();
        bus.add_pio(0x70..0x72, device.clone());
        bus.add_mmio(0xfed0_0000..0xfed0_1000, device.clone());
        let mut data = [0u8; 4];
        let unowned_port = |direction| BusError::UnownedPort {
            port: 0x80,
            direction,
        };
        let unowned_mmio = |direction| BusError::UnownedMmio {
            address: 0xfed0_1000,
            direction,
        };
        for (err, expected) in [
            (
                bus.pio_read(0, 0x80, &mut data),
                unowned_port(Direction::Read),
            ),
            (
                bus.pio_write(0, 0x80, &data),
                unowned_port(Direction::Write),
            ),
            (
                bus.mmio_read(0, 0xfed0_1000, &mut data),
                unowned_mmio(Direction::Read),
            ),
            (
                bus.mmio_write(0, 0xfed0_1000, &data),
                unowned_mmio(Direction::Write),
            ),
        ] {
            let err = err.expect_err("nobody owns it");
            assert_eq!(err.to_string(), expected.to_string());
        }
        let straddled = |err: Result<(), BusError>| match err {
            Err(BusError::Straddled {
                space,
                at,
                len,
                first,
                last,
                ..
            }) => (space, at, len, first, last),
            other => panic!("not a straddle: {other:?}"),
        };
        assert_eq!(
            straddled(bus.pio_read(0, 0x71, &mut data[..2])),
            (Space::Pio, 0x71, 2, 0x70, 0x71)
        );
        assert_eq!(
            straddled(bus.pio_write(0, 0x70, &data[..4])),
            (Space::Pio, 0x70, 4, 0x70, 0x71)
        );
        assert_eq!(
            straddled(bus.mmio_read(0, 0xfed0_0ffe, &mut data)),
            (Space::Mmio, 0xfed0_0ffe, 4, 0xfed0_0000, 0xfed0_0fff)
        );
        assert_eq!(
            straddled(bus.mmio_write(0, 0xfed0_0ffd, &data)),
            (Space::Mmio, 0xfed0_0ffd, 4, 0xfed0_0000, 0xfed0_0fff)
        );
        // An access that fits reaches the device at its offset.
        bus.mmio_read(0, 0xfed0_0ffc, &mut data).expect("fits");
        assert_eq!(le_value(&data), 0xffc);
        assert!(device.0.lock().expect("not poisoned").is_empty());
    }

    #[test]
    fn an_open_bus_reads_all_ones_drops_writes_and_counts_both() {
        let open_bus = Arc::new(OpenBus::default());
        let mut bus = Bus::default();
        bus.set_open_bus(open_bus.clone());
        let mut data = [0u8; 2];
        bus.pio_read(0, 0x80, &mut data).expect("open bus");
        assert_eq!(data, [0xff; 2]);
        bus.pio_write(0, 0x80, &[1]).expect("dropped");
        let mut data = [0u8; 4];
        bus.mmio_read(0, 0xd000_0000, &mut data).expect("open bus");
        assert_eq!(data, [0xff; 4]);
        bus.mmio_write(0, 0xd000_0000, &data).expect("dropped");
        bus.mmio_write(0, 0xd000_0000, &data).expect("dropped");
        let port = |direction| UnclaimedAccess::Port {
            port: 0x80,
            direction,
        };
        let mmio = |direction| UnclaimedAccess::Mmio {
            address: 0xd000_0000,
            direction,
        };
        assert_eq!(
            open_bus.counts(),
            [
                (port(Direction::Read), 1),
                (port(Direction::Write), 1),
                (mmio(Direction::Read), 1),
                (mmio(Direction::Write), 2),
            ]
        );
    }

    #[test]
    fn little_endian_helpers_round_trip() {
        let mut data = [0u8; 4];
        fill_le(&mut data, 0xdead_beef);
        assert_eq!(data, [0xef, 0xbe, 0xad, 0xde]);
        assert_eq!(le_value(&data), 0xdead_beef);
    }
}
