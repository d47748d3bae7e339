//! The built-in scenarios: the TOML files in `scenarios/`, embedded.

use super::{Scenario, ScenarioError};

const BUILTINS: [(&str, &str); 17] = [
    (
        "did-udp-rx",
        include_str!("../../../../scenarios/did-udp-rx.toml"),
    ),
    (
        "did-cyclictest",
        include_str!("../../../../scenarios/did-cyclictest.toml"),
    ),
    (
        "did-whileloop",
        include_str!("../../../../scenarios/did-whileloop.toml"),
    ),
    (
        "did-apicv",
        include_str!("../../../../scenarios/did-apicv.toml"),
    ),
    (
        "did-fio",
        include_str!("../../../../scenarios/did-fio.toml"),
    ),
    (
        "eli-2012",
        include_str!("../../../../scenarios/eli-2012.toml"),
    ),
    (
        "did-netpipe",
        include_str!("../../../../scenarios/did-netpipe.toml"),
    ),
    (
        "did-iperf",
        include_str!("../../../../scenarios/did-iperf.toml"),
    ),
    (
        "did-dpdk",
        include_str!("../../../../scenarios/did-dpdk.toml"),
    ),
    (
        "did-memcached",
        include_str!("../../../../scenarios/did-memcached.toml"),
    ),
    (
        "did-voip",
        include_str!("../../../../scenarios/did-voip.toml"),
    ),
    ("ipi", include_str!("../../../../scenarios/ipi.toml")),
    (
        "did-overcommit",
        include_str!("../../../../scenarios/did-overcommit.toml"),
    ),
    (
        "fleet-overcommit",
        include_str!("../../../../scenarios/fleet-overcommit.toml"),
    ),
    (
        "ipi-blog",
        include_str!("../../../../scenarios/ipi-blog.toml"),
    ),
    (
        "loongson-vioapic",
        include_str!("../../../../scenarios/loongson-vioapic.toml"),
    ),
    (
        "design-gap",
        include_str!("../../../../scenarios/design-gap.toml"),
    ),
];

/// Names of the built-in scenarios.
pub fn builtin_names() -> Vec<&'static str> {
    BUILTINS.iter().map(|(name, _)| *name).collect()
}

/// A built-in scenario by name.
pub fn builtin(name: &str) -> Result<Scenario, ScenarioError> {
    let (_, text) = BUILTINS
        .iter()
        .find(|(builtin, _)| *builtin == name)
        .ok_or_else(|| ScenarioError::UnknownBuiltin(name.to_string()))?;
    Scenario::from_toml(text)
}
