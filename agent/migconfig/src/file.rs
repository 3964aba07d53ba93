//! The mig-parted v1 file: model, reader and writer (docs/mig.md §3.1).

use std::collections::BTreeSet;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_saphyr::{FlowMap, FlowSeq, Spanned};

use gpu_agent_catalogue::mig::ProfileName;

use crate::error::{ConfigError, Pos};

/// A mig-parted configuration file (`version: v1`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MigConfigFile {
    /// The named configurations, in file order.
    pub configs: Vec<Config>,
}

/// One named configuration: entries applied in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Its name under `mig-configs`.
    pub name: String,
    /// Where its list of entries starts.
    pub pos: Pos,
    /// Its entries (at least one).
    pub entries: Vec<Entry>,
}

/// One entry of a configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Where the entry starts.
    pub pos: Pos,
    /// `device-filter`: PCI ids, empty = every GPU.
    pub device_filter: Vec<PciId>,
    /// `devices`.
    pub devices: Devices,
    /// Where `devices` stands.
    pub devices_pos: Pos,
    /// `mig-enabled`.
    pub mig_enabled: bool,
    /// Where `mig-enabled` stands.
    pub enabled_pos: Pos,
    /// `mig-devices`, in file order (empty when MIG is off).
    pub mig_devices: Vec<MigDevice>,
    /// Where `mig-devices` stands.
    pub mig_devices_pos: Pos,
}

impl Entry {
    /// An entry written by a program (export, planner): no positions.
    pub fn new(
        device_filter: Vec<PciId>,
        devices: Devices,
        mig_enabled: bool,
        mig_devices: Vec<(String, u32)>,
    ) -> Entry {
        Entry {
            pos: Pos::default(),
            device_filter,
            devices,
            devices_pos: Pos::default(),
            mig_enabled,
            enabled_pos: Pos::default(),
            mig_devices: mig_devices
                .into_iter()
                .map(|(profile, count)| MigDevice {
                    profile,
                    count,
                    pos: Pos::default(),
                })
                .collect(),
            mig_devices_pos: Pos::default(),
        }
    }
}

/// `devices`: every GPU, or some by index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Devices {
    /// `all`.
    All,
    /// GPU indices (distinct, at least one).
    List(Vec<u32>),
}

impl Devices {
    /// Whether GPU `index` is named.
    pub fn contains(&self, index: u32) -> bool {
        match self {
            Devices::All => true,
            Devices::List(l) => l.contains(&index),
        }
    }
}

/// One `mig-devices` item: a profile name and a count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigDevice {
    /// Profile name as written, e.g. `3g.20gb`.
    pub profile: String,
    /// How many instances.
    pub count: u32,
    /// Where the count stands.
    pub pos: Pos,
}

/// A `device-filter` PCI id: `0xDDDDVVVV`, optionally `:0xSSSSVVVV`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PciId {
    /// Device and vendor id, as NVML's `pciDeviceId` (`0x20B010DE`).
    pub device: u32,
    /// Subsystem device and vendor id, as NVML's `pciSubSystemId`.
    pub subsystem: Option<u32>,
}

impl PciId {
    /// Whether a GPU with these ids matches.
    pub fn matches(&self, device: u32, subsystem: Option<u32>) -> bool {
        self.device == device && self.subsystem.is_none_or(|s| Some(s) == subsystem)
    }
}

impl fmt::Display for PciId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{:08X}", self.device)?;
        if let Some(s) = self.subsystem {
            write!(f, ":0x{s:08X}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for PciId {
    type Err = String;

    fn from_str(s: &str) -> Result<PciId, String> {
        let bad = || format!("`{s}` is not a PCI id (0xDDDDVVVV, optionally :0xSSSSVVVV)");
        let hex = |t: &str| {
            let digits = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X"))?;
            (digits.len() == 8 && digits.bytes().all(|b| b.is_ascii_hexdigit()))
                .then(|| u32::from_str_radix(digits, 16).ok())
                .flatten()
        };
        match s.split_once(':') {
            None => Ok(PciId {
                device: hex(s).ok_or_else(bad)?,
                subsystem: None,
            }),
            Some((d, sub)) => Ok(PciId {
                device: hex(d).ok_or_else(bad)?,
                subsystem: Some(hex(sub).ok_or_else(bad)?),
            }),
        }
    }
}

impl MigConfigFile {
    /// Reads a v1 file; every rule of docs/mig.md §3.1 is checked. Errors name the
    /// line, column and key.
    pub fn parse(text: &str) -> Result<MigConfigFile, ConfigError> {
        let options = serde_saphyr::options! {
            duplicate_keys: serde_saphyr::DuplicateKeyPolicy::Error,
        };
        let mut key = String::new();
        let raw: RawFile =
            serde_saphyr::with_deserializer_from_str_with_options(text, options, |d| {
                serde_path_to_error::deserialize(d).map_err(|e| {
                    key = key_path(&e.path().to_string());
                    e.into_inner()
                })
            })
            .map_err(|e| {
                let pos = e.location().map(|l| Pos::of(&l)).unwrap_or_default();
                let message =
                    e.without_snippet()
                        .render_with_options(serde_saphyr::render_options! {
                            snippets: serde_saphyr::SnippetMode::Off,
                        });
                ConfigError::invalid(pos, key, strip_location(&message))
            })?;
        raw.check()
    }

    /// The configuration `name`; without a name, the file's only one.
    pub fn config(&self, name: Option<&str>) -> Result<&Config, ConfigError> {
        let names = || {
            self.configs
                .iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        match name {
            Some(n) => self.configs.iter().find(|c| c.name == n).ok_or_else(|| {
                ConfigError::invalid(
                    Pos::default(),
                    "mig-configs",
                    format!("no configuration named `{n}`; the file has: {}", names()),
                )
            }),
            None if self.configs.len() == 1 => Ok(&self.configs[0]),
            None => Err(ConfigError::invalid(
                Pos::default(),
                "mig-configs",
                format!(
                    "the file has several configurations ({}); name one",
                    names()
                ),
            )),
        }
    }

    /// The file as mig-parted writes it: `version: v1`, block mappings, flow
    /// lists and `mig-devices` maps.
    pub fn to_yaml(&self) -> String {
        serde_saphyr::to_string(self).expect("a configuration file always serialises")
    }
}

/// The key path as the reader names it: `mig-configs.a[0].devices`, without
/// the span wrappers' own fields and the root (`.`).
fn key_path(path: &str) -> String {
    let path = path.replace(".value", "");
    let path = path.strip_suffix(".?").unwrap_or(&path);
    if path == "." || path == "?" {
        String::new()
    } else {
        path.to_string()
    }
}

/// Drops the location the YAML library appends to its messages: [`ConfigError`]
/// prints its own first.
fn strip_location(message: &str) -> String {
    let line = message.lines().next().unwrap_or(message).trim();
    let line = match line.rfind(" at line ") {
        Some(i) => &line[..i],
        None => line,
    };
    line.strip_suffix(", set DuplicateKeyPolicy in Options if acceptable")
        .unwrap_or(line)
        .to_string()
}

impl Serialize for MigConfigFile {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Out<'a> {
            version: &'static str,
            #[serde(rename = "mig-configs")]
            mig_configs: Configs<'a>,
        }
        Out {
            version: "v1",
            mig_configs: Configs(&self.configs),
        }
        .serialize(s)
    }
}

/// `mig-configs` in file order.
struct Configs<'a>(&'a [Config]);

impl Serialize for Configs<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for c in self.0 {
            let entries: Vec<OutEntry> = c.entries.iter().map(OutEntry::of).collect();
            map.serialize_entry(&c.name, &entries)?;
        }
        map.end()
    }
}

/// An entry as written.
#[derive(Serialize)]
struct OutEntry<'a> {
    #[serde(rename = "device-filter", skip_serializing_if = "Option::is_none")]
    device_filter: Option<OneOrMany>,
    devices: OutDevices,
    #[serde(rename = "mig-enabled")]
    mig_enabled: bool,
    #[serde(rename = "mig-devices", skip_serializing_if = "Option::is_none")]
    mig_devices: Option<FlowMap<Counts<'a>>>,
}

impl OutEntry<'_> {
    fn of(e: &Entry) -> OutEntry<'_> {
        let ids: Vec<String> = e.device_filter.iter().map(PciId::to_string).collect();
        OutEntry {
            device_filter: match ids.len() {
                0 => None,
                1 => Some(OneOrMany::One(ids.into_iter().next().expect("one id"))),
                _ => Some(OneOrMany::Many(FlowSeq(ids))),
            },
            devices: match &e.devices {
                Devices::All => OutDevices::All("all"),
                Devices::List(l) => OutDevices::List(FlowSeq(l.clone())),
            },
            mig_enabled: e.mig_enabled,
            mig_devices: e.mig_enabled.then_some(FlowMap(Counts(&e.mig_devices))),
        }
    }
}

#[derive(Serialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(FlowSeq<Vec<String>>),
}

#[derive(Serialize)]
#[serde(untagged)]
enum OutDevices {
    All(&'static str),
    List(FlowSeq<Vec<u32>>),
}

/// `mig-devices` in order.
struct Counts<'a>(&'a [MigDevice]);

impl Serialize for Counts<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for d in self.0 {
            map.serialize_entry(&d.profile, &d.count)?;
        }
        map.end()
    }
}

// ---- Reading: the document as written, then the rules. ----

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    version: Spanned<String>,
    #[serde(rename = "mig-configs")]
    mig_configs: Spanned<Ordered<String, Spanned<Vec<Spanned<RawEntry>>>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    #[serde(rename = "device-filter", default)]
    device_filter: Option<Spanned<RawFilter>>,
    devices: Spanned<RawDevices>,
    #[serde(rename = "mig-enabled")]
    mig_enabled: Spanned<bool>,
    #[serde(rename = "mig-devices", default)]
    mig_devices: Option<Spanned<Ordered<String, Spanned<i64>>>>,
}

impl RawFile {
    fn check(self) -> Result<MigConfigFile, ConfigError> {
        if self.version.value != "v1" {
            return Err(ConfigError::invalid(
                Pos::of(&self.version.referenced),
                "version",
                format!("`{}` is not supported; only v1 is", self.version.value),
            ));
        }
        let configs_pos = Pos::of(&self.mig_configs.referenced);
        if self.mig_configs.value.0.is_empty() {
            return Err(ConfigError::invalid(
                configs_pos,
                "mig-configs",
                "the file names no configuration",
            ));
        }
        let configs = self
            .mig_configs
            .value
            .0
            .into_iter()
            .map(|(name, entries)| {
                let key = format!("mig-configs.{name}");
                if entries.value.is_empty() {
                    return Err(ConfigError::invalid(
                        Pos::of(&entries.referenced),
                        key,
                        "a configuration needs at least one entry",
                    ));
                }
                let entries_pos = Pos::of(&entries.referenced);
                let entries = entries
                    .value
                    .into_iter()
                    .enumerate()
                    .map(|(k, e)| check_entry(e, &format!("{key}[{k}]")))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(Config {
                    pos: entries_pos,
                    name,
                    entries,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(MigConfigFile { configs })
    }
}

fn check_entry(raw: Spanned<RawEntry>, key: &str) -> Result<Entry, ConfigError> {
    let e = raw.value;
    let mut device_filter = Vec::new();
    if let Some(f) = &e.device_filter {
        let pos = Pos::of(&f.referenced);
        let ids = &f.value.0;
        if ids.is_empty() {
            return Err(ConfigError::invalid(
                pos,
                format!("{key}.device-filter"),
                "an empty filter matches no GPU; leave the key out to match every GPU",
            ));
        }
        for id in ids {
            device_filter.push(
                id.parse::<PciId>()
                    .map_err(|m| ConfigError::invalid(pos, format!("{key}.device-filter"), m))?,
            );
        }
    }
    let devices_pos = Pos::of(&e.devices.referenced);
    let devices = match e.devices.value {
        RawDevices::All => Devices::All,
        RawDevices::List(l) => {
            let k = format!("{key}.devices");
            if l.is_empty() {
                return Err(ConfigError::invalid(
                    devices_pos,
                    k,
                    "an empty list selects no GPU; write `all` or GPU indices",
                ));
            }
            let mut seen = BTreeSet::new();
            for &i in &l {
                if !seen.insert(i) {
                    return Err(ConfigError::invalid(
                        devices_pos,
                        k,
                        format!("GPU {i} is listed twice"),
                    ));
                }
            }
            Devices::List(l)
        }
    };
    let enabled_pos = Pos::of(&e.mig_enabled.referenced);
    let mig_enabled = e.mig_enabled.value;
    let md_key = format!("{key}.mig-devices");
    let (mig_devices_pos, raw_devices) = match e.mig_devices {
        Some(m) => (Pos::of(&m.referenced), m.value.0),
        None if mig_enabled => {
            return Err(ConfigError::invalid(
                Pos::of(&raw.referenced),
                md_key,
                "required when mig-enabled is true (`{}` for MIG on without instances)",
            ))
        }
        None => (Pos::default(), Vec::new()),
    };
    if !mig_enabled && !raw_devices.is_empty() {
        return Err(ConfigError::invalid(
            mig_devices_pos,
            md_key,
            "must be empty when mig-enabled is false",
        ));
    }
    let mut mig_devices = Vec::with_capacity(raw_devices.len());
    for (name, count) in raw_devices {
        let pos = Pos::of(&count.referenced);
        if let Err(why) = ProfileName::parse(&name) {
            return Err(ConfigError::invalid(
                pos,
                md_key,
                format!(
                    "`{name}` is not a profile name: {why} ([<c>c.]<g>g.<mem>gb[+attributes|-attributes], e.g. 3g.20gb, 1g.10gb+me, 1c.3g.20gb)"
                ),
            ));
        }
        let count = u32::try_from(count.value).map_err(|_| {
            ConfigError::invalid(
                pos,
                format!("{md_key}.{name}"),
                format!("count {} is not a whole number ≥ 0", count.value),
            )
        })?;
        mig_devices.push(MigDevice {
            profile: name,
            count,
            pos,
        });
    }
    if !mig_devices.is_empty() && mig_devices.iter().all(|d| d.count == 0) {
        return Err(ConfigError::invalid(
            mig_devices_pos,
            md_key,
            "every count is 0; write `{}` for MIG on without instances",
        ));
    }
    Ok(Entry {
        pos: Pos::of(&raw.referenced),
        device_filter,
        devices,
        devices_pos,
        mig_enabled,
        enabled_pos,
        mig_devices,
        mig_devices_pos,
    })
}

/// A mapping kept in file order.
struct Ordered<K, V>(Vec<(K, V)>);

impl<'de, K: Deserialize<'de>, V: Deserialize<'de>> Deserialize<'de> for Ordered<K, V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V2<K, V>(PhantomData<(K, V)>);
        impl<'de, K: Deserialize<'de>, V: Deserialize<'de>> Visitor<'de> for V2<K, V> {
            type Value = Ordered<K, V>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a mapping")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(kv) = m.next_entry()? {
                    out.push(kv);
                }
                Ok(Ordered(out))
            }
        }
        d.deserialize_map(V2(PhantomData))
    }
}

/// `devices`: `all` or a list of GPU indices.
enum RawDevices {
    All,
    List(Vec<u32>),
}

impl<'de> Deserialize<'de> for RawDevices {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawDevices;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("`all` or a list of GPU indices")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<RawDevices, E> {
                if s == "all" {
                    Ok(RawDevices::All)
                } else {
                    Err(E::invalid_value(de::Unexpected::Str(s), &self))
                }
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<RawDevices, A::Error> {
                let mut l = Vec::new();
                while let Some(i) = a.next_element::<u32>()? {
                    l.push(i);
                }
                Ok(RawDevices::List(l))
            }
        }
        d.deserialize_any(V)
    }
}

/// `device-filter`: one PCI id or a list.
struct RawFilter(Vec<String>);

impl<'de> Deserialize<'de> for RawFilter {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawFilter;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a PCI id string or a list of them")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<RawFilter, E> {
                Ok(RawFilter(vec![s.to_string()]))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<RawFilter, A::Error> {
                let mut l = Vec::new();
                while let Some(s) = a.next_element::<String>()? {
                    l.push(s);
                }
                Ok(RawFilter(l))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests;
