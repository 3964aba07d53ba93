//! Alibaba's GPU cluster trace v2023 (`openb_pod_list_*.csv` with
//! `openb_node_list_*.csv`), from "Beware of Fragmentation" (USENIX ATC '23).
//!
//! Host: the node list's GPUs, each model mapped to a catalogue model with a
//! speed relative to a V100-SXM2 ([`MODELS`]), optionally scaled down to a
//! number of GPUs that keeps every model's share. Trace: one task per pod that
//! has GPUs and ran, its workload the observed run time on the reference GPU,
//! its weight from the QoS class ([`QOS_WEIGHTS`]), its deadline the arrival
//! plus a slack factor times that run time. docs/import.md gives the reasons.

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

use serde::Serialize;

use super::{column_error, csv_error, unreadable, Conversion, HostEntry, ImportError};
use crate::input::InputError;
use gpu_agent_core::catalogue;
use gpu_agent_core::TaskSpec;
use gpu_agent_plugin_api::AppModel;

/// How one GPU model of the node list becomes a catalogue model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelMapping {
    /// The node list's `model` value.
    pub trace: &'static str,
    /// The GPU it is taken to be, whose datasheet figures give the speed.
    pub gpu: &'static str,
    /// The catalogue model written to the host.
    pub catalogue: &'static str,
    /// Memory (GB).
    pub mem_gb: f64,
    /// Peak FP32 throughput (TFLOPS, NVIDIA datasheet).
    pub fp32_tflops: f64,
    /// Memory bandwidth (GB/s, NVIDIA datasheet).
    pub mem_bw_gbs: f64,
    /// Speed relative to the reference: the geometric mean of the FP32 and
    /// bandwidth ratios to a V100-SXM2, to two decimals.
    pub speed: f64,
}

/// The reference GPU, speed 1.0.
pub const REFERENCE: &str = "V100-SXM2";
/// The reference's peak FP32 throughput (TFLOPS).
pub const REFERENCE_FP32_TFLOPS: f64 = 15.7;
/// The reference's memory bandwidth (GB/s).
pub const REFERENCE_MEM_BW_GBS: f64 = 900.0;

/// Every GPU model of the node list. G1–G3 are undisclosed; G2 and G3 come in
/// 8-GPU servers like the V100M32 nodes and are taken to be V100-class.
pub const MODELS: &[ModelMapping] = &[
    ModelMapping {
        trace: "G2",
        gpu: "undisclosed, assumed V100-SXM2 32 GB",
        catalogue: "V100-SXM2-32GB",
        mem_gb: 32.0,
        fp32_tflops: 15.7,
        mem_bw_gbs: 900.0,
        speed: 1.0,
    },
    ModelMapping {
        trace: "G3",
        gpu: "undisclosed, assumed V100-SXM2 32 GB",
        catalogue: "V100-SXM2-32GB",
        mem_gb: 32.0,
        fp32_tflops: 15.7,
        mem_bw_gbs: 900.0,
        speed: 1.0,
    },
    ModelMapping {
        trace: "V100M32",
        gpu: "Tesla V100-SXM2 32 GB",
        catalogue: "V100-SXM2-32GB",
        mem_gb: 32.0,
        fp32_tflops: 15.7,
        mem_bw_gbs: 900.0,
        speed: 1.0,
    },
    ModelMapping {
        trace: "V100M16",
        gpu: "Tesla V100-SXM2 16 GB",
        catalogue: "V100-SXM2-32GB",
        mem_gb: 16.0,
        fp32_tflops: 15.7,
        mem_bw_gbs: 900.0,
        speed: 1.0,
    },
    ModelMapping {
        trace: "P100",
        gpu: "Tesla P100 PCIe 16 GB",
        catalogue: "V100-SXM2-32GB",
        mem_gb: 16.0,
        fp32_tflops: 9.3,
        mem_bw_gbs: 732.0,
        speed: 0.69,
    },
    ModelMapping {
        trace: "T4",
        gpu: "Tesla T4",
        catalogue: "T4",
        mem_gb: 16.0,
        fp32_tflops: 8.1,
        mem_bw_gbs: 320.0,
        speed: 0.43,
    },
    ModelMapping {
        trace: "A10",
        gpu: "NVIDIA A10 24 GB",
        catalogue: "L4",
        mem_gb: 24.0,
        fp32_tflops: 31.2,
        mem_bw_gbs: 600.0,
        speed: 1.15,
    },
];

/// Weight of each `qos` class: Kubernetes' Guaranteed above Alibaba's
/// latency-sensitive (LS), above Burstable, above best effort (BE).
pub const QOS_WEIGHTS: &[(&str, f64)] = &[
    ("Guaranteed", 4.0),
    ("LS", 2.0),
    ("Burstable", 1.5),
    ("BE", 1.0),
];

/// The default slack factor: deadline = arrival + slack × reference run time.
pub const DEFAULT_SLACK: f64 = 2.0;

/// What to convert.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// Scale the host down to this many GPUs, each model keeping its share
    /// (largest remainders); `None`: every GPU of the node list.
    pub gpus: Option<u32>,
    /// Leave out pods created before this `creation_time` (s).
    pub from: u64,
    /// Stop after this many tasks.
    pub limit: Option<usize>,
    /// Deadline slack factor (> 0).
    pub slack: f64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            gpus: None,
            from: 0,
            limit: None,
            slack: DEFAULT_SLACK,
        }
    }
}

/// What happened to the pods.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Pods in the file.
    pub pods: usize,
    /// Pods that became tasks.
    pub kept: usize,
    /// Of those, pods that asked for part of one GPU.
    pub fractional: usize,
    /// Pods in the slice that did not become tasks, by reason.
    pub skipped: Skipped,
    /// Pods created before `--from`.
    pub before_from: usize,
    /// Pods after the `--limit`-th task, not examined.
    pub after_limit: usize,
    /// Devices in the host.
    pub devices: u32,
}

/// Skipped pods by reason (each pod counts under the first that applies).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Skipped {
    /// `num_gpu` is 0.
    pub no_gpu: usize,
    /// `creation_time`, `scheduled_time` or `deletion_time` is empty (never
    /// scheduled).
    pub no_time: usize,
    /// `deletion_time` <= `scheduled_time`.
    pub non_positive_run_time: usize,
    /// `num_gpu` is more than the host's devices.
    pub too_many_gpus: usize,
}

impl Skipped {
    /// All skipped pods.
    pub fn total(&self) -> usize {
        self.no_gpu + self.no_time + self.non_positive_run_time + self.too_many_gpus
    }
}

/// Reads `pods` and `nodes` and converts them.
pub fn import(
    pods: &Path,
    nodes: &Path,
    options: &Options,
) -> Result<(Conversion, Summary), ImportError> {
    let pod_file = std::fs::File::open(pods).map_err(|e| unreadable(pods, e))?;
    let node_file = std::fs::File::open(nodes).map_err(|e| unreadable(nodes, e))?;
    convert(pods, pod_file, nodes, node_file, options)
}

/// Converts a pod list and a node list; the paths only name them in errors.
pub fn convert(
    pods_path: &Path,
    pods: impl Read,
    nodes_path: &Path,
    nodes: impl Read,
    options: &Options,
) -> Result<(Conversion, Summary), ImportError> {
    check(options)?;
    let cluster = Cluster::read(nodes_path, nodes, options.gpus)?;
    let mut summary = Summary {
        pods: 0,
        kept: 0,
        fractional: 0,
        skipped: Skipped::default(),
        before_from: 0,
        after_limit: 0,
        devices: cluster.wanted as u32,
    };
    let kept = read_pods(pods_path, pods, options, &cluster, &mut summary)?;
    summary.kept = kept.len();
    let origin = kept.iter().map(|(c, _)| *c).min().unwrap_or(0);
    let tasks = kept
        .into_iter()
        .map(|(creation, mut task)| {
            task.arrival = (creation - origin) as f64;
            task.deadline = task.arrival + options.slack * task.workload;
            task
        })
        .collect();
    let host_header = format!(
        "# Converted by `gpuctl trace import alibaba-v2023` (/usr/share/doc/gpu-agent/import.md).\n\
         # Speeds are relative to a {REFERENCE} (1.0).\n"
    );
    Ok((
        Conversion {
            host_header,
            host: cluster.host,
            tasks,
        },
        summary,
    ))
}

/// Refuses a `--slack` that is not a number > 0 and a `--limit` of 0.
fn check(options: &Options) -> Result<(), ImportError> {
    if !(options.slack.is_finite() && options.slack > 0.0) {
        return Err(ImportError::Option {
            option: "--slack",
            message: format!("expected a number > 0, got {}", options.slack),
        });
    }
    if options.limit == Some(0) {
        return Err(ImportError::Option {
            option: "--limit",
            message: "expected at least 1".into(),
        });
    }
    Ok(())
}

/// The host a node list becomes.
struct Cluster {
    /// Its GPUs by model, each model's share kept.
    host: Vec<HostEntry>,
    /// How many GPUs it has.
    wanted: u64,
    /// The memory of its smallest GPU (GB): what a pod without a GPU type
    /// constraint may count on.
    unit_mem_gb: f64,
}

impl Cluster {
    /// The node list's GPUs, scaled down to `gpus` (`--gpus`) when given.
    fn read(path: &Path, nodes: impl Read, gpus: Option<u32>) -> Result<Cluster, ImportError> {
        let totals = read_nodes(path, nodes)?;
        let all: u64 = totals.iter().map(|(_, n)| n).sum();
        if all == 0 {
            return Err(InputError::at(path, None, None, "no node with GPUs").into());
        }
        let wanted = gpus.map_or(all, u64::from);
        if wanted == 0 || wanted > all {
            return Err(ImportError::Option {
                option: "--gpus",
                message: format!(
                    "expected 1 to {all} (the GPUs of {}), got {wanted}",
                    path.display()
                ),
            });
        }
        let seats = apportion(&totals, wanted);
        let host = totals
            .iter()
            .zip(&seats)
            .filter(|(_, &seats)| seats > 0)
            .map(|(&(m, total), &seats)| {
                let model = catalogue::lookup(m.catalogue).expect("MODELS names catalogue models");
                HostEntry {
                    note: format!(
                        "{}: {seats} of the node list's {total} GPUs ({}; speed {})",
                        m.trace, m.gpu, m.speed
                    ),
                    model,
                    count: seats as u32,
                    speed: m.speed,
                    mem_gb: (m.mem_gb != model.memory_gb).then_some(m.mem_gb),
                }
            })
            .collect();
        // A pod without a GPU type constraint could be placed on any GPU of
        // the cluster, so it needs at most the smallest one's memory.
        let unit_mem_gb = totals
            .iter()
            .map(|(m, _)| m.mem_gb)
            .fold(f64::INFINITY, f64::min);
        Ok(Cluster {
            host,
            wanted,
            unit_mem_gb,
        })
    }
}

/// The tasks of the pods `options` keeps, each with its creation time, in
/// file order; `summary` counts the pods.
fn read_pods(
    path: &Path,
    pods: impl Read,
    options: &Options,
    cluster: &Cluster,
    summary: &mut Summary,
) -> Result<Vec<(u64, TaskSpec)>, ImportError> {
    let mut kept: Vec<(u64, TaskSpec)> = Vec::new();
    let mut csv = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .from_reader(pods);
    let headers = csv.headers().map_err(|e| csv_error(path, e))?.clone();
    let columns = PodColumns::find(path, &headers)?;
    let mut lines_by_name: HashMap<String, u64> = HashMap::new();
    let mut record = csv::StringRecord::new();
    while csv
        .read_record(&mut record)
        .map_err(|e| csv_error(path, e))?
    {
        summary.pods += 1;
        if options.limit.is_some_and(|limit| kept.len() >= limit) {
            summary.after_limit += 1;
            continue;
        }
        let line = record.position().map_or(0, |p| p.line());
        let pod = Pod::parse(path, line, &record, &columns)?;
        if let Some(first) = lines_by_name.insert(pod.name.clone(), line) {
            return Err(column_error(
                path,
                line,
                "name",
                format!("duplicate name {:?} (first on line {first})", pod.name),
            ));
        }
        if pod.creation.is_some_and(|c| c < options.from) {
            summary.before_from += 1;
            continue;
        }
        kept.extend(pod.task(cluster, summary));
    }
    Ok(kept)
}

/// The GPUs of each model in the node list, in order of first appearance.
fn read_nodes(
    path: &Path,
    reader: impl Read,
) -> Result<Vec<(&'static ModelMapping, u64)>, ImportError> {
    let mut csv = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .from_reader(reader);
    let headers = csv.headers().map_err(|e| csv_error(path, e))?.clone();
    let [gpu_col, model_col] = find_columns(path, &headers, ["gpu", "model"])?;
    let mut totals: Vec<(&'static ModelMapping, u64)> = Vec::new();
    let mut record = csv::StringRecord::new();
    while csv
        .read_record(&mut record)
        .map_err(|e| csv_error(path, e))?
    {
        let line = record.position().map_or(0, |p| p.line());
        let text = record.get(gpu_col).unwrap_or("");
        let gpus: u64 = text.parse().map_err(|_| {
            column_error(
                path,
                line,
                "gpu",
                format!("expected an integer >= 0, got {text:?}"),
            )
        })?;
        if gpus == 0 {
            continue;
        }
        let name = record.get(model_col).unwrap_or("");
        let mapping = MODELS.iter().find(|m| m.trace == name).ok_or_else(|| {
            let known: Vec<_> = MODELS.iter().map(|m| m.trace).collect();
            column_error(
                path,
                line,
                "model",
                format!("unknown GPU model {name:?}; known: {}", known.join(", ")),
            )
        })?;
        match totals.iter_mut().find(|(m, _)| m.trace == name) {
            Some((_, n)) => *n += gpus,
            None => totals.push((mapping, gpus)),
        }
    }
    Ok(totals)
}

/// `wanted` seats shared in proportion to `totals` (Hamilton's largest
/// remainders; equal remainders go to the earlier model).
fn apportion(totals: &[(&ModelMapping, u64)], wanted: u64) -> Vec<u64> {
    let all: u64 = totals.iter().map(|(_, n)| n).sum();
    let mut seats: Vec<u64> = totals.iter().map(|(_, n)| wanted * n / all).collect();
    let left = wanted - seats.iter().sum::<u64>();
    let mut order: Vec<usize> = (0..totals.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(wanted * totals[i].1 % all));
    for &i in order.iter().take(left as usize) {
        seats[i] += 1;
    }
    seats
}

/// The positions of the columns named `names`.
fn find_columns<const N: usize>(
    path: &Path,
    headers: &csv::StringRecord,
    names: [&str; N],
) -> Result<[usize; N], ImportError> {
    let mut found = [0; N];
    let mut missing = Vec::new();
    for (slot, name) in found.iter_mut().zip(names) {
        match headers.iter().position(|h| h == name) {
            Some(i) => *slot = i,
            None => missing.push(format!("{name:?}")),
        }
    }
    match missing.as_slice() {
        [] => Ok(found),
        [one] => Err(header_error(path, format!("missing required column {one}"))),
        many => Err(header_error(
            path,
            format!("missing required columns {}", many.join(", ")),
        )),
    }
}

fn header_error(path: &Path, message: String) -> ImportError {
    InputError::at(path, Some(1), None, message).into()
}

/// Where the pod list's columns are.
struct PodColumns {
    name: usize,
    num_gpu: usize,
    gpu_milli: usize,
    qos: usize,
    creation: usize,
    deletion: usize,
    scheduled: usize,
}

impl PodColumns {
    fn find(path: &Path, headers: &csv::StringRecord) -> Result<PodColumns, ImportError> {
        let [name, num_gpu, gpu_milli, qos, creation, deletion, scheduled] = find_columns(
            path,
            headers,
            [
                "name",
                "num_gpu",
                "gpu_milli",
                "qos",
                "creation_time",
                "deletion_time",
                "scheduled_time",
            ],
        )?;
        Ok(PodColumns {
            name,
            num_gpu,
            gpu_milli,
            qos,
            creation,
            deletion,
            scheduled,
        })
    }
}

/// One checked row of the pod list.
struct Pod {
    name: String,
    gpus: u32,
    /// Thousandths of each GPU it uses: `gpu_milli` for a one-GPU pod,
    /// 1000 otherwise.
    milli: u64,
    weight: f64,
    creation: Option<u64>,
    scheduled: Option<u64>,
    deletion: Option<u64>,
}

impl Pod {
    fn parse(
        path: &Path,
        line: u64,
        record: &csv::StringRecord,
        columns: &PodColumns,
    ) -> Result<Pod, ImportError> {
        let field = |i: usize| record.get(i).unwrap_or("");
        let integer = |i: usize, column: &str| {
            let text = field(i);
            text.parse::<u64>().map_err(|_| {
                column_error(
                    path,
                    line,
                    column,
                    format!("expected an integer >= 0, got {text:?}"),
                )
            })
        };
        let time = |i: usize, column: &str| match field(i) {
            "" => Ok(None),
            _ => integer(i, column).map(Some),
        };
        let name = field(columns.name);
        if name.is_empty() || name.starts_with('#') {
            return Err(column_error(
                path,
                line,
                "name",
                format!("expected a non-empty name not starting with '#', got {name:?}"),
            ));
        }
        let gpus = integer(columns.num_gpu, "num_gpu")?;
        let gpus = u32::try_from(gpus)
            .map_err(|_| column_error(path, line, "num_gpu", format!("too large: {gpus}")))?;
        let milli = integer(columns.gpu_milli, "gpu_milli")?;
        if gpus == 1 && !(1..=1000).contains(&milli) {
            return Err(column_error(
                path,
                line,
                "gpu_milli",
                format!("expected 1 to 1000 thousandths of the pod's one GPU, got {milli}"),
            ));
        }
        let qos = field(columns.qos);
        let weight = QOS_WEIGHTS
            .iter()
            .find(|(class, _)| *class == qos)
            .map(|&(_, w)| w)
            .ok_or_else(|| {
                let known: Vec<_> = QOS_WEIGHTS.iter().map(|(c, _)| *c).collect();
                column_error(
                    path,
                    line,
                    "qos",
                    format!("expected one of {}, got {qos:?}", known.join(", ")),
                )
            })?;
        Ok(Pod {
            name: name.to_string(),
            gpus,
            milli: if gpus == 1 { milli } else { 1000 },
            weight,
            creation: time(columns.creation, "creation_time")?,
            scheduled: time(columns.scheduled, "scheduled_time")?,
            deletion: time(columns.deletion, "deletion_time")?,
        })
    }

    /// The task this pod of the slice becomes on `cluster`, with its
    /// creation time (its arrival and deadline still to be set), or `None`
    /// for a pod skipped; `summary` counts it.
    fn task(self, cluster: &Cluster, summary: &mut Summary) -> Option<(u64, TaskSpec)> {
        let skipped = &mut summary.skipped;
        if self.gpus == 0 {
            skipped.no_gpu += 1;
            return None;
        }
        let (Some(creation), Some(scheduled), Some(deletion)) =
            (self.creation, self.scheduled, self.deletion)
        else {
            skipped.no_time += 1;
            return None;
        };
        if deletion <= scheduled {
            skipped.non_positive_run_time += 1;
            return None;
        }
        if u64::from(self.gpus) > cluster.wanted {
            skipped.too_many_gpus += 1;
            return None;
        }
        let run = deletion - scheduled;
        // A fractional pod becomes a whole-GPU task doing the same GPU
        // work: its run time times its share.
        let workload = run as f64 * self.milli as f64 / 1000.0;
        let share = self.milli as f64 / 1000.0;
        if self.milli < 1000 {
            summary.fractional += 1;
        }
        Some((
            creation,
            TaskSpec {
                id: self.name,
                arrival: 0.0,
                workload,
                mem_gb: share * cluster.unit_mem_gb,
                deadline: 0.0,
                weight: self.weight,
                gpus: self.gpus,
                alt_gpus: Vec::new(),
                runtimes: Vec::new(),
                app: AppModel::builtin_default(),
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_agent_core::apps::AppLibrary;

    const NODES: &str = "sn,cpu_milli,memory_mib,gpu,model\n\
        n0,1,1,2,P100\n\
        n1,1,1,8,G2\n\
        n2,1,1,0,\n\
        n3,1,1,4,V100M16\n\
        n4,1,1,2,T4\n\
        n5,1,1,8,V100M32\n\
        n6,1,1,8,G3\n\
        n7,1,1,1,A10\n\
        n8,1,1,2,T4\n";

    const HEAD: &str = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n";

    /// One pod of every kind.
    const PODS: &str = "p0,1,1,1,1000,,LS,Running,100,1100,100\n\
        p1,1,1,0,0,,BE,Running,150,200,150\n\
        p2,1,1,1,460,,BE,Failed,200,1434,200\n\
        p3,1,1,8,1000,,Guaranteed,Succeeded,300,400,310\n\
        p4,1,1,1,1000,,Burstable,Pending,400,450,\n\
        p5,1,1,2,1000,,Burstable,Running,500,500,500\n\
        p6,1,1,64,1000,,LS,Running,550,600,550\n\
        p7,1,1,4,1000,,Burstable,Running,600,700,650\n\
        p8,1,1,0,0,,BE,Pending,700,800,\n";

    fn convert_text(
        pods: &str,
        nodes: &str,
        options: &Options,
    ) -> Result<(Conversion, Summary), String> {
        convert(
            Path::new("pods.csv"),
            pods.as_bytes(),
            Path::new("nodes.csv"),
            nodes.as_bytes(),
            options,
        )
        .map_err(|e| e.to_string())
    }

    #[test]
    fn speeds_are_the_geometric_mean_of_the_fp32_and_bandwidth_ratios() {
        for m in MODELS {
            let ratio = (m.fp32_tflops / REFERENCE_FP32_TFLOPS * m.mem_bw_gbs
                / REFERENCE_MEM_BW_GBS)
                .sqrt();
            assert_eq!(m.speed, (ratio * 100.0).round() / 100.0, "{}", m.trace);
            assert!(catalogue::lookup(m.catalogue).is_some(), "{}", m.catalogue);
        }
    }

    #[test]
    fn the_host_holds_every_gpu_of_the_node_list_by_model() {
        let (c, summary) = convert_text(HEAD, NODES, &Options::default()).unwrap();
        assert_eq!(summary.devices, 35);
        assert_eq!(
            c.host_toml(),
            "# Converted by `gpuctl trace import alibaba-v2023` (/usr/share/doc/gpu-agent/import.md).\n\
             # Speeds are relative to a V100-SXM2 (1.0).\n\
             \n# P100: 2 of the node list's 2 GPUs (Tesla P100 PCIe 16 GB; speed 0.69)\n\
             [[gpu]]\nmodel = \"V100-SXM2-32GB\"\ncount = 2\nspeed = 0.69\nmem_gb = 16.0\n\
             \n# G2: 8 of the node list's 8 GPUs (undisclosed, assumed V100-SXM2 32 GB; speed 1)\n\
             [[gpu]]\nmodel = \"V100-SXM2-32GB\"\ncount = 8\nspeed = 1.0\n\
             \n# V100M16: 4 of the node list's 4 GPUs (Tesla V100-SXM2 16 GB; speed 1)\n\
             [[gpu]]\nmodel = \"V100-SXM2-32GB\"\ncount = 4\nspeed = 1.0\nmem_gb = 16.0\n\
             \n# T4: 4 of the node list's 4 GPUs (Tesla T4; speed 0.43)\n\
             [[gpu]]\nmodel = \"T4\"\ncount = 4\nspeed = 0.43\n\
             \n# V100M32: 8 of the node list's 8 GPUs (Tesla V100-SXM2 32 GB; speed 1)\n\
             [[gpu]]\nmodel = \"V100-SXM2-32GB\"\ncount = 8\nspeed = 1.0\n\
             \n# G3: 8 of the node list's 8 GPUs (undisclosed, assumed V100-SXM2 32 GB; speed 1)\n\
             [[gpu]]\nmodel = \"V100-SXM2-32GB\"\ncount = 8\nspeed = 1.0\n\
             \n# A10: 1 of the node list's 1 GPUs (NVIDIA A10 24 GB; speed 1.15)\n\
             [[gpu]]\nmodel = \"L4\"\ncount = 1\nspeed = 1.15\n"
        );
        let host = crate::input::host::parse(Path::new("host.toml"), &c.host_toml()).unwrap();
        assert_eq!(host.devices.len(), 35);
        assert_eq!(
            (host.devices[0].memory_gb, host.devices[0].speed),
            (16.0, 0.69)
        );
    }

    #[test]
    fn a_smaller_host_keeps_each_models_share_by_largest_remainders() {
        let options = Options {
            gpus: Some(10),
            ..Options::default()
        };
        let (c, summary) = convert_text(HEAD, NODES, &options).unwrap();
        // Quotas 10 × n / 35: P100 0.57, G2 2.29, V100M16 1.14, T4 1.14,
        // V100M32 2.29, G3 2.29, A10 0.29. Floors give 8; the two largest
        // remainders (P100, then G2 first of the equal ones) get one more.
        let counts: Vec<_> = c
            .host
            .iter()
            .map(|e| (e.note.split(':').next().unwrap().to_string(), e.count))
            .collect();
        let expected = [
            ("P100", 1),
            ("G2", 3),
            ("V100M16", 1),
            ("T4", 1),
            ("V100M32", 2),
            ("G3", 2),
        ];
        assert_eq!(counts, expected.map(|(m, n)| (m.to_string(), n)).to_vec());
        assert_eq!(summary.devices, 10);
        assert_eq!(
            convert_text(
                HEAD,
                NODES,
                &Options {
                    gpus: Some(36),
                    ..Options::default()
                }
            )
            .unwrap_err(),
            "--gpus: expected 1 to 35 (the GPUs of nodes.csv), got 36"
        );
    }

    #[test]
    fn pods_become_tasks_by_the_documented_rules() {
        let (c, summary) =
            convert_text(&format!("{HEAD}{PODS}"), NODES, &Options::default()).unwrap();
        // p0: whole GPU, LS. p2: 46% of a GPU for 1234 s, BE. p3: 8 GPUs for
        // 90 s (queued 10 s, which is ignored), Guaranteed. p7: 4 GPUs for
        // 50 s, Burstable. Arrivals count from p0's creation (100 s);
        // deadlines are arrival + 2 × workload; memory is the share of 16 GB.
        assert_eq!(
            c.trace_csv(),
            "id,arrival,workload,mem_gb,deadline,weight,gpus\n\
             p0,0,1000,16,2000,2,1\n\
             p2,100,567.64,7.36,1235.28,1,1\n\
             p3,200,90,16,380,4,8\n\
             p7,500,50,16,600,1.5,4\n"
        );
        assert_eq!(
            summary,
            Summary {
                pods: 9,
                kept: 4,
                fractional: 1,
                skipped: Skipped {
                    no_gpu: 2,
                    no_time: 1,
                    non_positive_run_time: 1,
                    too_many_gpus: 1,
                },
                before_from: 0,
                after_limit: 0,
                devices: 35,
            }
        );
        assert_eq!(summary.skipped.total(), 5);
        let (_, trace) = c.read_back(&AppLibrary::default()).unwrap();
        assert_eq!(trace.tasks.len(), 4);
        assert!(trace.warnings.is_empty());
    }

    #[test]
    fn slack_scales_the_deadline_and_a_slice_counts_what_it_leaves_out() {
        let options = Options {
            from: 150,
            limit: Some(2),
            slack: 1.5,
            ..Options::default()
        };
        let (c, summary) = convert_text(&format!("{HEAD}{PODS}"), NODES, &options).unwrap();
        // p0 was created before 150; p1 (no GPU) is skipped; p2 and p3 are the
        // two tasks; p4..p8 are not examined. Arrivals count from p2.
        assert_eq!(
            c.trace_csv(),
            "id,arrival,workload,mem_gb,deadline,weight,gpus\n\
             p2,0,567.64,7.36,851.46,1,1\n\
             p3,100,90,16,235,4,8\n"
        );
        assert_eq!(
            (
                summary.kept,
                summary.skipped.total(),
                summary.before_from,
                summary.after_limit
            ),
            (2, 1, 1, 5)
        );
        // A pod that needs more GPUs than a smaller host has is skipped.
        let small = Options {
            gpus: Some(4),
            ..Options::default()
        };
        let (c, summary) = convert_text(&format!("{HEAD}{PODS}"), NODES, &small).unwrap();
        assert_eq!(summary.skipped.too_many_gpus, 2);
        assert_eq!(c.tasks.len(), 3);
    }

    #[test]
    fn bad_input_is_named_by_file_line_and_column() {
        let ok = "p0,1,1,1,1000,,LS,Running,100,1100,100\n";
        let cases = [
            (
                "p0,1,1,x,1000,,LS,Running,100,1100,100\n",
                "pods.csv:2: column num_gpu: expected an integer >= 0, got \"x\"",
            ),
            (
                "p0,1,1,1,0,,LS,Running,100,1100,100\n",
                "pods.csv:2: column gpu_milli: expected 1 to 1000 thousandths of the pod's one GPU, got 0",
            ),
            (
                "p0,1,1,1,1000,,Gold,Running,100,1100,100\n",
                "pods.csv:2: column qos: expected one of Guaranteed, LS, Burstable, BE, got \"Gold\"",
            ),
            (
                "p0,1,1,1,1000,,LS,Running,100.5,1100,100\n",
                "pods.csv:2: column creation_time: expected an integer >= 0, got \"100.5\"",
            ),
            (
                "p0,1,1,1,1000,,LS,Running,100,-1,100\n",
                "pods.csv:2: column deletion_time: expected an integer >= 0, got \"-1\"",
            ),
            (
                ",1,1,1,1000,,LS,Running,100,1100,100\n",
                "pods.csv:2: column name: expected a non-empty name not starting with '#', got \"\"",
            ),
            (
                "p0,1,1,1,1000,,LS,Running,100,1100\n",
                "pods.csv:2: expected 11 fields like the header, got 10",
            ),
        ];
        for (row, expected) in cases {
            let err = convert_text(&format!("{HEAD}{ok}{row}"), NODES, &Options::default());
            let expected = expected.replace("pods.csv:2", "pods.csv:3");
            assert_eq!(err.unwrap_err(), expected, "{row}");
        }
        assert_eq!(
            convert_text(&format!("{HEAD}{ok}{ok}"), NODES, &Options::default()).unwrap_err(),
            "pods.csv:3: column name: duplicate name \"p0\" (first on line 2)"
        );
        assert_eq!(
            convert_text(
                "name,num_gpu,gpu_milli,qos,deletion_time\n",
                NODES,
                &Options::default()
            )
            .unwrap_err(),
            "pods.csv:1: missing required columns \"creation_time\", \"scheduled_time\""
        );
        assert_eq!(
            convert_text(HEAD, "sn,gpu,model\nn0,2,K80\n", &Options::default()).unwrap_err(),
            "nodes.csv:2: column model: unknown GPU model \"K80\"; known: G2, G3, V100M32, V100M16, P100, T4, A10"
        );
        assert_eq!(
            convert_text(HEAD, "sn,gpu,model\nn0,two,T4\n", &Options::default()).unwrap_err(),
            "nodes.csv:2: column gpu: expected an integer >= 0, got \"two\""
        );
        assert_eq!(
            convert_text(HEAD, "sn,gpu,model\nn0,0,\n", &Options::default()).unwrap_err(),
            "nodes.csv: no node with GPUs"
        );
        assert_eq!(
            convert_text(HEAD, "sn,model\n", &Options::default()).unwrap_err(),
            "nodes.csv:1: missing required column \"gpu\""
        );
        let slack = Options {
            slack: 0.0,
            ..Options::default()
        };
        assert_eq!(
            convert_text(HEAD, NODES, &slack).unwrap_err(),
            "--slack: expected a number > 0, got 0"
        );
    }
}
