//! Reading host descriptions (formats.md §2): the GPUs of one host.

use std::path::Path;

use gpu_agent_core::catalogue::{self, GpuModel};
use gpu_agent_core::host::{DeviceSpec, Host, Partition};
use gpu_agent_core::placement::{place_or_explain, Layout, Request};
use gpu_agent_input::{line_of, parse_toml, read_text, InputError};
use serde::Deserialize;
use toml::Spanned;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHost {
    #[serde(default)]
    gpu: Vec<RawGpu>,
    cluster: Option<Spanned<RawCluster>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCluster {
    servers: Spanned<i64>,
    idle_w: Option<Spanned<f64>>,
    turn_on_j: Option<Spanned<f64>>,
    sleep_after: Option<Spanned<i64>>,
}

/// The optional `[cluster]` table: the DVFS paper's cluster model
/// (docs/dvfs.md §3.1, §3.4), `servers` servers each holding the host's
/// GPUs. Read only by the simulator; the node agent is one server that never
/// sleeps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClusterSpec {
    /// m: servers, each with every `[[gpu]]` device of the file.
    pub servers: usize,
    /// Idle power of one GPU (W); default: the model's catalogue idle power.
    pub idle_w: f64,
    /// Δ: energy of one server turn-on (J).
    pub turn_on_j: f64,
    /// ρ: seconds (slots) with no busy GPU after which a server turns off;
    /// `None`: servers stay on once on (the offline model).
    pub sleep_after: Option<u32>,
    /// The line of the `[cluster]` table.
    pub line: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGpu {
    model: Spanned<String>,
    count: Option<Spanned<i64>>,
    speed: Spanned<f64>,
    mem_gb: Option<Spanned<f64>>,
    cost_per_hour: Option<Spanned<f64>>,
    mig: Option<Spanned<Vec<Spanned<String>>>>,
}

/// Reads and checks the description of one host (the node agent's, the
/// mock's): a `[cluster]` table is refused.
pub fn load(path: &Path) -> Result<Host, InputError> {
    parse(path, &read_text(path)?)
}

/// Parses the description of one host; `path` only names it in errors.
/// A `mig` layout is the mock's: its GPU starts with MIG on and those
/// instances (`mig = []`: MIG on, no instance, as after a reboot).
pub fn parse(path: &Path, text: &str) -> Result<Host, InputError> {
    match parse_with_cluster(path, text)? {
        (host, None) => Ok(host),
        (_, Some(cluster)) => Err(InputError::at(
            path,
            Some(cluster.line),
            Some("cluster".into()),
            "a cluster of servers is read only by `gpuctl simulate`; \
             a node agent runs one host that never sleeps (remove [cluster])",
        )),
    }
}

/// Reads a host description that may describe a cluster (the simulator).
pub fn load_with_cluster(path: &Path) -> Result<(Host, Option<ClusterSpec>), InputError> {
    parse_with_cluster(path, &read_text(path)?)
}

/// Parses a host description and its optional `[cluster]` table; a cluster's
/// GPUs must all be alike (one model and speed).
pub fn parse_with_cluster(
    path: &Path,
    text: &str,
) -> Result<(Host, Option<ClusterSpec>), InputError> {
    let raw: RawHost = parse_toml(path, text)?;
    if raw.gpu.is_empty() {
        return Err(InputError::at(
            path,
            None,
            None,
            "no [[gpu]] entries: a host needs at least one GPU",
        ));
    }
    let mut devices = Vec::new();
    let mut layouts: Vec<(u32, Layout)> = Vec::new();
    for (i, gpu) in raw.gpu.iter().enumerate() {
        let err = |span: std::ops::Range<usize>, key: &str, msg: String| {
            InputError::at(
                path,
                Some(line_of(text, span.start)),
                Some(format!("gpu[{i}].{key}")),
                msg,
            )
        };
        let model = catalogue::lookup(gpu.model.get_ref()).ok_or_else(|| {
            err(
                gpu.model.span(),
                "model",
                format!(
                    "unknown GPU model {:?}; known: {}",
                    gpu.model.get_ref(),
                    catalogue::names().join(", ")
                ),
            )
        })?;
        let count = match &gpu.count {
            None => 1,
            Some(c) if (1..=4096).contains(c.get_ref()) => *c.get_ref() as usize,
            Some(c) => {
                return Err(err(
                    c.span(),
                    "count",
                    format!("expected an integer from 1 to 4096, got {}", c.get_ref()),
                ))
            }
        };
        let positive = |v: &Spanned<f64>, key: &str| {
            let x = *v.get_ref();
            if x.is_finite() && x > 0.0 {
                Ok(x)
            } else {
                Err(err(
                    v.span(),
                    key,
                    format!("expected a number > 0, got {x}"),
                ))
            }
        };
        let speed = positive(&gpu.speed, "speed")?;
        let memory_gb = gpu
            .mem_gb
            .as_ref()
            .map(|m| positive(m, "mem_gb"))
            .transpose()?
            .unwrap_or(model.memory_gb);
        let cost_per_hour = match &gpu.cost_per_hour {
            None => 0.0,
            Some(c) if c.get_ref().is_finite() && *c.get_ref() >= 0.0 => *c.get_ref(),
            Some(c) => {
                return Err(err(
                    c.span(),
                    "cost_per_hour",
                    format!("expected a number >= 0, got {}", c.get_ref()),
                ))
            }
        };
        let layout = match &gpu.mig {
            None => None,
            Some(mig) => {
                if let Some(m) = &gpu.mem_gb {
                    return Err(err(
                        m.span(),
                        "mem_gb",
                        "mem_gb and mig exclude each other: a MIG instance has its profile's memory"
                            .into(),
                    ));
                }
                Some(mig_layout(model, mig, |span, key, msg| {
                    err(span, &format!("mig{key}"), msg)
                })?)
            }
        };
        for _ in 0..count {
            let index = devices.len() as u32;
            devices.push(DeviceSpec {
                index,
                model,
                memory_gb,
                speed,
                cost_per_hour,
                partition: Partition::Whole,
            });
            if let Some(layout) = &layout {
                layouts.push((index, layout.clone()));
            }
        }
    }
    let host = Host::partitioned(devices, &layouts);
    let cluster = match &raw.cluster {
        None => None,
        Some(c) => Some(cluster(path, text, &raw, c.get_ref(), &host)?),
    };
    Ok((host, cluster))
}

/// The layout a `mig = [...]` list asks for on a GPU of `model` (docs/mig.md
/// §6.1: profile names with an optional `@start`, the rest placed first fit
/// decreasing on the placement tree, §2); `err` makes an error of a span,
/// a key suffix (`""` or `[k]`) and a message.
fn mig_layout(
    model: &GpuModel,
    mig: &Spanned<Vec<Spanned<String>>>,
    err: impl Fn(std::ops::Range<usize>, &str, String) -> InputError,
) -> Result<Layout, InputError> {
    let Some(table) = model.mig else {
        let capable: Vec<&str> = catalogue::CATALOGUE
            .iter()
            .filter(|m| m.mig.is_some())
            .map(|m| m.name)
            .collect();
        return Err(err(
            mig.span(),
            "",
            format!(
                "{} has no MIG; MIG-capable models: {}",
                model.name,
                capable.join(", ")
            ),
        ));
    };
    let requests = mig
        .get_ref()
        .iter()
        .enumerate()
        .map(|(k, entry)| {
            Request::parse(table, entry.get_ref()).map_err(|why| {
                err(
                    entry.span(),
                    &format!("[{k}]"),
                    format!("{}: {why}", model.name),
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    place_or_explain(table, &requests)
        .map_err(|why| err(mig.span(), "", format!("{}: {why}", model.name)))
}

/// Checks a `[cluster]` table against the host's devices.
fn cluster(
    path: &Path,
    text: &str,
    raw: &RawHost,
    c: &RawCluster,
    host: &Host,
) -> Result<ClusterSpec, InputError> {
    let err = |span: std::ops::Range<usize>, key: &str, msg: String| {
        InputError::at(
            path,
            Some(line_of(text, span.start)),
            Some(key.to_string()),
            msg,
        )
    };
    let first = &host.devices[0];
    for (i, gpu) in raw.gpu.iter().enumerate() {
        if let Some(mig) = &gpu.mig {
            return Err(err(
                mig.span(),
                &format!("gpu[{i}].mig"),
                "a [cluster] server's GPUs are whole GPUs (remove mig)".into(),
            ));
        }
        if catalogue::lookup(gpu.model.get_ref()).map(|m| m.name) != Some(first.model.name) {
            return Err(err(
                gpu.model.span(),
                &format!("gpu[{i}].model"),
                format!(
                    "a [cluster] server's GPUs must all be alike: {:?} differs from {:?}",
                    gpu.model.get_ref(),
                    first.model.name
                ),
            ));
        }
        if *gpu.speed.get_ref() != first.speed {
            return Err(err(
                gpu.speed.span(),
                &format!("gpu[{i}].speed"),
                format!(
                    "a [cluster] server's GPUs must all be alike: speed {} differs from {}",
                    gpu.speed.get_ref(),
                    first.speed
                ),
            ));
        }
    }
    let servers = match *c.servers.get_ref() {
        n @ 1..=1_000_000 => n as usize,
        n => {
            return Err(err(
                c.servers.span(),
                "cluster.servers",
                format!("expected an integer from 1 to 1000000, got {n}"),
            ))
        }
    };
    let at_least_zero = |v: &Spanned<f64>, key: &str| {
        let x = *v.get_ref();
        if x.is_finite() && x >= 0.0 {
            Ok(x)
        } else {
            Err(err(
                v.span(),
                key,
                format!("expected a number >= 0, got {x}"),
            ))
        }
    };
    let idle_w = match &c.idle_w {
        Some(v) => at_least_zero(v, "cluster.idle_w")?,
        None => first.model.idle_w,
    };
    let turn_on_j = match &c.turn_on_j {
        Some(v) => at_least_zero(v, "cluster.turn_on_j")?,
        None => 0.0,
    };
    let sleep_after = match &c.sleep_after {
        None => None,
        Some(v) => match u32::try_from(*v.get_ref()) {
            Ok(n) => Some(n),
            Err(_) => {
                return Err(err(
                    v.span(),
                    "cluster.sleep_after",
                    format!("expected an integer >= 0 (seconds), got {}", v.get_ref()),
                ))
            }
        },
    };
    Ok(ClusterSpec {
        servers,
        idle_w,
        turn_on_j,
        sleep_after,
        line: line_of(text, raw.cluster.as_ref().map_or(0, |c| c.span().start)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Host, String> {
        super::parse(Path::new("host.toml"), text).map_err(|e| e.to_string())
    }

    #[test]
    fn expands_counts_in_file_order() {
        let host = parse(
            "[[gpu]]\nmodel = \"T4\"\ncount = 2\nspeed = 1\n\n[[gpu]]\nmodel = \"A100-SXM4-80GB\"\nspeed = 2.5\nmem_gb = 70\ncost_per_hour = 3\n",
        )
        .unwrap();
        let summary: Vec<_> = host
            .devices
            .iter()
            .map(|d| (d.index, d.model.name, d.memory_gb, d.speed, d.cost_per_hour))
            .collect();
        assert_eq!(
            summary,
            vec![
                (0, "T4", 16.0, 1.0, 0.0),
                (1, "T4", 16.0, 1.0, 0.0),
                (2, "A100-SXM4-80GB", 70.0, 2.5, 3.0)
            ]
        );
    }

    #[test]
    fn errors_name_line_and_key() {
        assert_eq!(
            parse("[[gpu]]\nmodel = \"T4\"\nspeed = -1\n").unwrap_err(),
            "host.toml:3: gpu[0].speed: expected a number > 0, got -1"
        );
        let unknown =
            parse("[[gpu]]\nmodel = \"T4\"\nspeed = 1\n[[gpu]]\nmodel = \"X1\"\nspeed = 1\n")
                .unwrap_err();
        assert!(
            unknown.starts_with(
                "host.toml:5: gpu[1].model: unknown GPU model \"X1\"; known: A100-SXM4-40GB"
            ),
            "{unknown}"
        );
        // A value of the wrong type: its key too (toml names only the line).
        assert_eq!(
            parse("[[gpu]]\nmodel = \"T4\"\nspeed = \"fast\"\n").unwrap_err(),
            "host.toml:3: gpu.speed: invalid type: string \"fast\", expected f64"
        );
        let typo = parse("[[gpu]]\nmodel = \"T4\"\nsped = 1\n").unwrap_err();
        assert!(
            typo.starts_with("host.toml:3: gpu: unknown field `sped`"),
            "{typo}"
        );
        assert_eq!(
            parse("").unwrap_err(),
            "host.toml: no [[gpu]] entries: a host needs at least one GPU"
        );
        assert_eq!(
            parse("[[gpu]]\nmodel = \"T4\"\ncount = 0\nspeed = 1\n").unwrap_err(),
            "host.toml:3: gpu[0].count: expected an integer from 1 to 4096, got 0"
        );
    }

    const CLUSTER: &str = "[cluster]\nservers = 128\nidle_w = 37\nturn_on_j = 200\nsleep_after = 2\n\n[[gpu]]\nmodel = \"T4\"\ncount = 16\nspeed = 1\n";

    fn cluster(text: &str) -> Result<ClusterSpec, String> {
        super::parse_with_cluster(Path::new("host.toml"), text)
            .map(|(_, c)| c.unwrap())
            .map_err(|e| e.to_string())
    }

    /// For the simulator (`parse_with_cluster`).
    fn simulated(text: &str) -> Result<Host, String> {
        super::parse_with_cluster(Path::new("host.toml"), text)
            .map(|(host, _)| host)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_mig_layout_makes_devices_after_the_gpus() {
        let host = simulated(
            "[[gpu]]\nmodel = \"A100-SXM4-40GB\"\ncount = 2\nspeed = 1.4\ncost_per_hour = 7\n\
             mig = [\"3g.20gb\", \"2g.10gb\", \"2g.10gb\"]\n\
             [[gpu]]\nmodel = \"A100-SXM4-40GB\"\nspeed = 1\nmig = [\"1g.5gb@6\", \"4g.20gb\"]\n\
             [[gpu]]\nmodel = \"T4\"\nspeed = 0.5\n",
        )
        .unwrap();
        let rows: Vec<(u32, String, f64, f64, f64, bool)> = host
            .devices
            .iter()
            .map(|d| {
                (
                    d.index,
                    d.label(),
                    d.memory_gb,
                    d.speed,
                    d.cost_per_hour,
                    d.schedulable(),
                )
            })
            .collect();
        // speed × (compute slices / 7): 1.4 × 2/7 = 0.4, 1.4 × 3/7 = 0.6 (in f64).
        let (s2, s3) = (1.4 * (2.0 / 7.0), 1.4 * (3.0 / 7.0));
        let (c2, c3) = (7.0 * (2.0 / 7.0), 7.0 * (3.0 / 7.0));
        let row = |i: u32, l: &str, m, s, c| (i, l.to_string(), m, s, c, true);
        assert_eq!(
            rows,
            [
                (0, "0".into(), 40.0, 1.4, 7.0, false),
                (1, "1".into(), 40.0, 1.4, 7.0, false),
                (2, "2".into(), 40.0, 1.0, 0.0, false),
                (3, "3".into(), 16.0, 0.5, 0.0, true),
                row(4, "0/mig/2g.10gb@0", 9.625, s2, c2),
                row(5, "0/mig/2g.10gb@2", 9.625, s2, c2),
                row(6, "0/mig/3g.20gb@4", 19.5, s3, c3),
                row(7, "1/mig/2g.10gb@0", 9.625, s2, c2),
                row(8, "1/mig/2g.10gb@2", 9.625, s2, c2),
                row(9, "1/mig/3g.20gb@4", 19.5, s3, c3),
                row(10, "2/mig/4g.20gb@0", 19.5, 4.0 / 7.0, 0.0),
                row(11, "2/mig/1g.5gb@6", 4.75, 1.0 / 7.0, 0.0),
            ]
        );
        // The agent's mock reads the same layout; `[]` is MIG on with no
        // instance: the GPU runs nothing and no device follows it.
        let agent =
            parse("[[gpu]]\nmodel = \"A100-SXM4-40GB\"\nspeed = 1\nmig = [\"7g.40gb\"]\n").unwrap();
        assert_eq!(agent.devices.len(), 2);
        assert_eq!(agent.devices[1].label(), "0/mig/7g.40gb@0");
        let empty = parse("[[gpu]]\nmodel = \"A100-SXM4-40GB\"\nspeed = 1\nmig = []\n").unwrap();
        assert_eq!(empty.devices.len(), 1);
        assert_eq!(
            empty.devices[0].partition,
            Partition::Split { free_slices: 7 }
        );
    }

    #[test]
    fn bad_mig_entries_name_line_and_key() {
        let a100 = |mig: &str| {
            simulated(&format!(
                "[[gpu]]\nmodel = \"T4\"\nspeed = 1\n[[gpu]]\nmodel = \"A100-SXM4-40GB\"\nspeed = 1\nmig = {mig}\n"
            ))
            .unwrap_err()
        };
        assert_eq!(
            a100("[\"3g.20gb\", \"3g.40gb\"]"),
            "host.toml:7: gpu[1].mig[1]: A100-SXM4-40GB: unknown MIG profile \"3g.40gb\"; \
             this model's: 1g.5gb, 1g.5gb+me, 1g.10gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb"
        );
        assert_eq!(
            a100("[\n  \"4g.20gb\",\n  \"3g.20gb@0\",\n]"),
            "host.toml:7: gpu[1].mig: A100-SXM4-40GB: 4g.20gb, 3g.20gb@0 cannot all be placed \
             on one GPU: no layout gives each its own memory slices at a valid start"
        );
        assert_eq!(
            a100("[\n  \"4g.20gb\",\n  \"3g.20gb@2\",\n]"),
            "host.toml:9: gpu[1].mig[1]: A100-SXM4-40GB: 3g.20gb cannot start at memory slice 2 \
             (valid starts: 0, 4)"
        );
        assert_eq!(
            a100("[\"2g.10gb\", \"2g.10gb\", \"2g.10gb\", \"2g.10gb\"]"),
            "host.toml:7: gpu[1].mig: A100-SXM4-40GB: 2g.10gb: at most 3 instance(s)"
        );
        assert_eq!(
            simulated("[[gpu]]\nmodel = \"T4\"\nspeed = 1\nmig = [\"1g.5gb\"]\n").unwrap_err(),
            "host.toml:4: gpu[0].mig: T4 has no MIG; MIG-capable models: A100-SXM4-40GB, \
             A100-SXM4-80GB, H100-SXM5-80GB, H100-PCIe-80GB, H200-SXM-141GB, A30-PCIe-24GB"
        );
        assert_eq!(
            simulated(
                "[[gpu]]\nmodel = \"A100-SXM4-40GB\"\nspeed = 1\nmem_gb = 30\nmig = [\"7g.40gb\"]\n"
            )
            .unwrap_err(),
            "host.toml:4: gpu[0].mem_gb: mem_gb and mig exclude each other: \
             a MIG instance has its profile's memory"
        );
    }

    #[test]
    fn reads_a_cluster_and_the_agent_refuses_it() {
        let (host, c) = super::parse_with_cluster(Path::new("host.toml"), CLUSTER).unwrap();
        assert_eq!(host.devices.len(), 16);
        assert_eq!(
            c,
            Some(ClusterSpec {
                servers: 128,
                idle_w: 37.0,
                turn_on_j: 200.0,
                sleep_after: Some(2),
                line: 1
            })
        );
        // Defaults: the catalogue's idle power, no turn-on energy, no sleep.
        let bare = cluster("[[gpu]]\nmodel = \"T4\"\nspeed = 1\n[cluster]\nservers = 2\n").unwrap();
        assert_eq!(
            (bare.idle_w, bare.turn_on_j, bare.sleep_after, bare.line),
            (catalogue::lookup("T4").unwrap().idle_w, 0.0, None, 4)
        );
        assert_eq!(
            parse(CLUSTER).unwrap_err(),
            "host.toml:1: cluster: a cluster of servers is read only by `gpuctl simulate`; \
             a node agent runs one host that never sleeps (remove [cluster])"
        );
    }

    #[test]
    fn cluster_errors_name_line_and_key() {
        let bad = |from: &str, to: &str| cluster(&CLUSTER.replace(from, to)).unwrap_err();
        assert_eq!(
            bad("servers = 128", "servers = 0"),
            "host.toml:2: cluster.servers: expected an integer from 1 to 1000000, got 0"
        );
        assert_eq!(
            bad("idle_w = 37", "idle_w = -1"),
            "host.toml:3: cluster.idle_w: expected a number >= 0, got -1"
        );
        assert_eq!(
            bad("turn_on_j = 200", "turn_on_j = nan"),
            "host.toml:4: cluster.turn_on_j: expected a number >= 0, got NaN"
        );
        assert_eq!(
            bad("sleep_after = 2", "sleep_after = -2"),
            "host.toml:5: cluster.sleep_after: expected an integer >= 0 (seconds), got -2"
        );
        assert!(
            bad("sleep_after", "sleep").starts_with("host.toml:5: cluster: unknown field `sleep`")
        );
        assert_eq!(
            cluster(&format!("{CLUSTER}[[gpu]]\nmodel = \"L4\"\nspeed = 1\n")).unwrap_err(),
            "host.toml:12: gpu[1].model: a [cluster] server's GPUs must all be alike: \"L4\" differs from \"T4\""
        );
        assert_eq!(
            cluster(&format!("{CLUSTER}[[gpu]]\nmodel = \"T4\"\nspeed = 2\n")).unwrap_err(),
            "host.toml:13: gpu[1].speed: a [cluster] server's GPUs must all be alike: speed 2 differs from 1"
        );
        let split = "[cluster]\nservers = 2\n[[gpu]]\nmodel = \"A100-SXM4-40GB\"\nspeed = 1\n\
                     mig = [\"7g.40gb\"]\n";
        assert_eq!(
            cluster(split).unwrap_err(),
            "host.toml:6: gpu[0].mig: a [cluster] server's GPUs are whole GPUs (remove mig)"
        );
    }
}
