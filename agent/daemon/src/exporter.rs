//! Prometheus metrics: `/metrics` on `metrics_listen` (off unless set), in
//! the OpenMetrics text format that Prometheus scrapes, through the
//! Prometheus project's Rust client (`prometheus-client`).
//!
//! Every scrape reads the GPUs through the backend and asks the engine for
//! its task counts, so readings are never older than the scrape; the
//! histograms and counters ([`Telemetry`], `telemetry.rs`) are kept by the parts that see the
//! events (the bus service times `Submit`, the engine times the policy's
//! decisions and counts its faults). Names follow Prometheus conventions:
//! the `gpu_agent_` prefix, base units as suffixes, `_total` counters. Every
//! series carries the `node` label (`metrics_node`, default the host name),
//! so that a fleet's series are told apart by the name Slurm and the admin
//! use for the host. See docs/metrics.md.

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::devices;
use crate::engine::{Census, JobEnergy, Request};
use crate::states::Health;
use crate::telemetry::Telemetry;
use gpu_agent_backend::GpuBackend;
use gpu_agent_core::host::{DeviceSpec, Partition};

type Labels = Vec<(String, String)>;
type FloatGauge = Gauge<f64, AtomicU64>;

/// What one scrape shows, in the text format, every series labelled
/// `node`. `uuids`: each GPU's UUID as read when the exporter started, the
/// label of a GPU that no longer answers (so that its series go on through
/// a failure).
pub fn render(
    node: &str,
    backend: &dyn GpuBackend,
    specs: &[DeviceSpec],
    uuids: &[String],
    census: &Census,
    telemetry: &Telemetry,
) -> String {
    let mut registry = Registry::with_prefix_and_labels(
        "gpu_agent",
        [("node".into(), node.to_string().into())].into_iter(),
    );
    let gauge = |registry: &mut Registry, name: &str, help: &str, unit: Option<Unit>| {
        let family = Family::<Labels, FloatGauge>::default();
        match unit {
            Some(unit) => registry.register_with_unit(name, help, unit, family.clone()),
            None => registry.register(name, help, family.clone()),
        }
        family
    };
    let power = gauge(
        &mut registry,
        "gpu_power",
        "Power draw",
        Some(Unit::Other("watts".into())),
    );
    let energy = gauge(
        &mut registry,
        "gpu_energy",
        "Energy counter of the GPU since its driver loaded",
        Some(Unit::Joules),
    );
    let core_clock = gauge(
        &mut registry,
        "gpu_core_clock",
        "Current core (SM) clock",
        Some(Unit::Other("hertz".into())),
    );
    let mem_clock = gauge(
        &mut registry,
        "gpu_memory_clock",
        "Current memory clock",
        Some(Unit::Other("hertz".into())),
    );
    let utilization = gauge(
        &mut registry,
        "gpu_utilization",
        "Share of the last sample period a kernel ran",
        Some(Unit::Other("ratio".into())),
    );
    let memory = gauge(
        &mut registry,
        "gpu_memory",
        "Memory of the GPU",
        Some(Unit::Bytes),
    );
    let busy = gauge(
        &mut registry,
        "gpu_busy",
        "1 while a task runs on the GPU",
        None,
    );
    let online = gauge(
        &mut registry,
        "gpu_online",
        "1 while the GPU takes work; 0 after a failure (label health: lost, xid N: what) or an admin's drain",
        None,
    );
    for spec in specs {
        let target = crate::layout::Target::read(backend, spec);
        let status = devices::read(backend, spec, &target, String::new());
        let uuid = match uuids.get(spec.index as usize) {
            Some(known) if status.uuid.is_empty() => known.clone(),
            _ => status.uuid.clone(),
        };
        let labels: Labels = vec![
            ("gpu".into(), spec.index.to_string()),
            ("uuid".into(), uuid),
            ("model".into(), status.name.clone()),
        ];
        // A reading the GPU does not give is left out, not shown as 0.
        let set = |family: &Family<Labels, FloatGauge>, x: f64| {
            if x.is_finite() {
                family.get_or_create(&labels).set(x);
            }
        };
        set(&power, status.power_w);
        set(&energy, status.energy_j);
        if status.core_clock_mhz > 0 {
            set(&core_clock, f64::from(status.core_clock_mhz) * 1e6);
        }
        if status.mem_clock_mhz > 0 {
            set(&mem_clock, f64::from(status.mem_clock_mhz) * 1e6);
        }
        set(&utilization, status.utilization);
        set(&memory, status.memory_gb * 1e9);
        device_state(&busy, &online, labels, census, spec.index as usize);
    }
    mig_series(&mut registry, backend, census);
    job_series(&mut registry, backend, &census.jobs);
    let tasks = gauge(&mut registry, "tasks", "Tasks by state", None);
    for (state, n) in &census.tasks {
        tasks
            .get_or_create(&vec![("state".into(), state.to_string())])
            .set(*n as f64);
    }
    let queues = gauge(
        &mut registry,
        "queue_length",
        "Tasks waiting: in the central pending queue, or in the GPUs' local queues",
        None,
    );
    queues
        .get_or_create(&vec![("queue".into(), "pending".into())])
        .set(census.pending as f64);
    queues
        .get_or_create(&vec![("queue".into(), "local".into())])
        .set(census.local as f64);
    registry.register_with_unit(
        "submit_duration",
        "Time from a Submit call to its answer (stored)",
        Unit::Seconds,
        telemetry.submit_seconds.clone(),
    );
    registry.register_with_unit(
        "policy_decision_duration",
        "Time the scheduler core and its policy take per event",
        Unit::Seconds,
        telemetry.decision_seconds.clone(),
    );
    registry.register(
        "policy_faults",
        "Policy faults (each switches to the built-in FIFO order)",
        telemetry.policy_faults.clone(),
    );
    let mut text = String::new();
    encode(&mut text, &registry).expect("writing to a String cannot fail");
    text
}

/// The `mig_` series: each MIG instance that takes placements (as the
/// layouts stand now), labelled with its device index, its GPU, its UUID
/// (`""` when it could not be read) and its profile. Power and energy are
/// left to its GPU's series (an instance's are a share of them).
fn mig_series(registry: &mut Registry, backend: &dyn GpuBackend, census: &Census) {
    let memory = Family::<Labels, FloatGauge>::default();
    registry.register_with_unit(
        "mig_memory",
        "Memory of the MIG instance",
        Unit::Bytes,
        memory.clone(),
    );
    let busy = Family::<Labels, FloatGauge>::default();
    registry.register(
        "mig_busy",
        "1 while a task runs on the MIG instance",
        busy.clone(),
    );
    let online = Family::<Labels, FloatGauge>::default();
    registry.register(
        "mig_online",
        "1 while the MIG instance takes work; 0 otherwise (label health: its GPU's failure, drained, no-uuid)",
        online.clone(),
    );
    for spec in &census.devices {
        let Partition::Mig(slot) = &spec.partition else {
            continue;
        };
        let i = spec.index as usize;
        let target = crate::layout::Target::read(backend, spec);
        let labels: Labels = vec![
            ("device".into(), spec.index.to_string()),
            ("gpu".into(), slot.parent.to_string()),
            ("uuid".into(), target.uuid),
            ("profile".into(), slot.profile.name.to_string()),
        ];
        memory.get_or_create(&labels).set(
            target
                .mig
                .map_or(spec.memory_gb * 1e9, |m| m.memory_bytes as f64),
        );
        device_state(&busy, &online, labels, census, i);
    }
}

/// The `slurm_job_` series: each adopted Slurm job, and each that ended in
/// the last ten minutes (`engine::adopt::RECENT_JOB_S`), labelled with its
/// Slurm job id and the agent's task id. A running job's energy reads its
/// GPUs' counters now.
fn job_series(registry: &mut Registry, backend: &dyn GpuBackend, jobs: &[JobEnergy]) {
    let energy = Family::<Labels, FloatGauge>::default();
    registry.register_with_unit(
        "slurm_job_energy",
        "GPU energy of an adopted Slurm job so far (its GPUs' counters since it was adopted; its share of a MIG instance's GPU)",
        Unit::Joules,
        energy.clone(),
    );
    let running = Family::<Labels, FloatGauge>::default();
    registry.register(
        "slurm_job_running",
        "1 while a Slurm job's GPUs are adopted; 0 for ten minutes after its release",
        running.clone(),
    );
    for job in jobs {
        let labels: Labels = vec![
            ("slurm_job_id".into(), job.job.to_string()),
            ("task".into(), job.task.clone()),
        ];
        if let Some(j) = job.energy_j(|gpu| backend.energy_mj(gpu).ok().flatten()) {
            energy.get_or_create(&labels).set(j);
        }
        running
            .get_or_create(&labels)
            .set(if job.running { 1.0 } else { 0.0 });
    }
}

/// Device `i`'s busy series (1 while a task runs on it) and its online
/// series, labelled with its health (`ok` where the census has none).
fn device_state(
    busy: &Family<Labels, FloatGauge>,
    online: &Family<Labels, FloatGauge>,
    mut labels: Labels,
    census: &Census,
    i: usize,
) {
    let running = census.busy.get(i).copied().unwrap_or(false);
    busy.get_or_create(&labels)
        .set(if running { 1.0 } else { 0.0 });
    let health = census.health.get(i).unwrap_or(&Health::Ok);
    labels.push(("health".into(), health.to_string()));
    online
        .get_or_create(&labels)
        .set(if health.is_ok() { 1.0 } else { 0.0 });
}

/// `text` (OpenMetrics, as [`render`] writes it) in the classic Prometheus
/// text format (0.0.4), for scrapers that do not ask for OpenMetrics
/// (`promtool check metrics`, curl): without the `# UNIT` and `# EOF` lines,
/// and with a counter's `HELP` and `TYPE` under its sample's `_total` name.
pub fn classic(text: &str) -> String {
    let counters: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|tag| {
            let rest = line.strip_prefix(tag)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(&name)
                .then(|| format!("{tag}{name}_total {tail}"))
        });
        out.push_str(renamed.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}

/// The host's name, the `node` label when `metrics_node` is not set;
/// `"localhost"` if the system has none to give.
pub fn host_name() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|name| name.into_string().ok())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// Serves `/metrics` on `addr` until the task is aborted, every series
/// labelled `node`.
pub async fn serve(
    node: String,
    listener: TcpListener,
    backend: Arc<dyn GpuBackend>,
    specs: Vec<DeviceSpec>,
    engine: mpsc::Sender<Request>,
    telemetry: Telemetry,
) {
    let uuids: Arc<Vec<String>> = Arc::new(
        specs
            .iter()
            .map(|spec| {
                backend
                    .device_info(spec.index)
                    .map(|i| i.uuid)
                    .unwrap_or_default()
            })
            .collect(),
    );
    let node: Arc<str> = node.into();
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return; // never closed
        };
        let (mut stream, peer) = match listener.accept().await {
            Ok(conn) => conn,
            Err(e) => {
                log::warn!("metrics: cannot accept a connection: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (node, backend, specs, uuids, engine, telemetry) = (
            node.clone(),
            backend.clone(),
            specs.clone(),
            uuids.clone(),
            engine.clone(),
            telemetry.clone(),
        );
        tokio::spawn(async move {
            let answer = async {
                let (path, openmetrics) = read_request(&mut stream).await?;
                let response = if path.as_deref() == Some("/metrics") {
                    let census = census(&engine).await;
                    let body = match census {
                        Some(census) => tokio::task::spawn_blocking(move || {
                            render(&node, &*backend, &specs, &uuids, &census, &telemetry)
                        })
                        .await
                        .ok(),
                        None => None,
                    };
                    match body {
                        Some(body) if openmetrics => response(
                            "200 OK",
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                            &body,
                        ),
                        Some(body) => response(
                            "200 OK",
                            "text/plain; version=0.0.4; charset=utf-8",
                            &classic(&body),
                        ),
                        None => response(
                            "503 Service Unavailable",
                            "text/plain",
                            "the engine is not answering\n",
                        ),
                    }
                } else {
                    response(
                        "404 Not Found",
                        "text/plain",
                        "only /metrics is served here\n",
                    )
                };
                stream.write_all(response.as_bytes()).await?;
                stream.shutdown().await
            };
            if let Err(e) = tokio::time::timeout(CONNECTION_LIMIT, answer)
                .await
                .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))
            {
                log::debug!("metrics: {peer}: {e}");
            }
            drop(slot);
        });
    }
}

/// The most `/metrics` connections served at once; the next ones wait in
/// the listen backlog (the kernel's, no descriptor of the daemon's), so that
/// a flood of connections cannot use up the daemon's file descriptors.
pub const MAX_CONNECTIONS: usize = 16;

/// How long one `/metrics` connection may take, request to response: an
/// idle or half-open one is dropped then.
pub const CONNECTION_LIMIT: Duration = Duration::from_secs(10);

/// Binds `addr` for [`serve`].
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// The engine's counts, or `None` when it does not answer in 5 s.
async fn census(engine: &mpsc::Sender<Request>) -> Option<Census> {
    let (reply, answer) = tokio::sync::oneshot::channel();
    engine.send(Request::Census { reply }).ok()?;
    tokio::time::timeout(Duration::from_secs(5), answer)
        .await
        .ok()?
        .ok()
}

/// The path of a `GET` request (`None` for another method), and whether it
/// accepts OpenMetrics.
async fn read_request(
    stream: &mut tokio::net::TcpStream,
) -> std::io::Result<(Option<String>, bool)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut chunk).await?;
        if n == 0 || buf.len() > 16 * 1024 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let text = String::from_utf8_lossy(&buf);
    let mut words = text.lines().next().unwrap_or("").split_whitespace();
    let path = match (words.next(), words.next()) {
        (Some("GET"), Some(target)) => Some(target.split('?').next().unwrap_or("").to_string()),
        _ => None,
    };
    let openmetrics = text.lines().any(|l| {
        l.to_ascii_lowercase().starts_with("accept:") && l.contains("application/openmetrics-text")
    });
    Ok((path, openmetrics))
}

fn response(status: &str, content_type: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Meter;

    #[test]
    fn classic_text_names_counters_by_their_samples() {
        let om = "# HELP a_faults Faults.\n# TYPE a_faults counter\na_faults_total 2\n\
                  # HELP a_power_watts Power.\n# TYPE a_power_watts gauge\n# UNIT a_power_watts watts\n\
                  a_power_watts 3.0\n# EOF\n";
        assert_eq!(
            classic(om),
            "# HELP a_faults_total Faults.\n# TYPE a_faults_total counter\na_faults_total 2\n\
             # HELP a_power_watts Power.\n# TYPE a_power_watts gauge\na_power_watts 3.0\n"
        );
    }

    #[test]
    fn a_scrape_of_the_mock_shows_every_family() {
        let host = gpu_agent_core::host::Host {
            devices: vec![gpu_agent_core::host::DeviceSpec {
                index: 0,
                model: gpu_agent_core::catalogue::lookup("T4").unwrap(),
                memory_gb: 16.0,
                speed: 1.0,
                cost_per_hour: 0.0,
                partition: gpu_agent_core::host::Partition::Whole,
            }],
        };
        let clock = Arc::new(gpu_agent_backend::mock::VirtualClock::new());
        let mock = gpu_agent_backend::mock::MockBackend::new(&host, clock);
        let telemetry = Telemetry::default();
        telemetry.policy_faults.inc();
        telemetry.submit_seconds.observe(0.002);
        let census = Census {
            tasks: vec![(gpu_agent_dbus::TaskStatus::Running, 1)],
            pending: 2,
            local: 3,
            busy: vec![true],
            health: vec!["xid 79: GPU has fallen off the bus".into()],
            devices: host.devices.clone(),
            jobs: vec![],
        };
        let uuid = mock.device_info(0).unwrap().uuid;
        let text = classic(&render(
            "gpu01",
            &mock,
            &host.devices,
            &[],
            &census,
            &telemetry,
        ));
        for line in [
            "# TYPE gpu_agent_gpu_power_watts gauge",
            "gpu_agent_gpu_memory_bytes{node=\"gpu01\",gpu=\"0\",",
            "gpu_agent_gpu_busy{node=\"gpu01\",gpu=\"0\",",
            "health=\"xid 79: GPU has fallen off the bus\"} 0.0",
            "gpu_agent_tasks{node=\"gpu01\",state=\"running\"} 1.0",
            "gpu_agent_queue_length{node=\"gpu01\",queue=\"pending\"} 2.0",
            "gpu_agent_queue_length{node=\"gpu01\",queue=\"local\"} 3.0",
            "gpu_agent_submit_duration_seconds_count{node=\"gpu01\"} 1",
            "# TYPE gpu_agent_policy_faults_total counter",
            "gpu_agent_policy_faults_total{node=\"gpu01\"} 1",
            "gpu_agent_policy_decision_duration_seconds_count{node=\"gpu01\"} 0",
        ] {
            assert!(text.contains(line), "{line} not in:\n{text}");
        }
        // A GPU that no longer answers keeps the UUID it had.
        mock.inject(0, gpu_agent_backend::mock::Fault::GpuLost);
        let text = classic(&render(
            "gpu01",
            &mock,
            &host.devices,
            std::slice::from_ref(&uuid),
            &census,
            &telemetry,
        ));
        let online = format!("gpu_agent_gpu_online{{node=\"gpu01\",gpu=\"0\",uuid=\"{uuid}\",");
        assert!(text.contains(&online), "{online} not in:\n{text}");
    }

    #[test]
    fn a_scrape_shows_each_mig_instance_apart_from_its_gpu() {
        let host = gpu_agent_hostspec::host::parse(
            std::path::Path::new("host.toml"),
            "[[gpu]]\nmodel = \"A100-SXM4-40GB\"\nspeed = 7\nmig = [\"3g.20gb@0\", \"3g.20gb@4\"]\n",
        )
        .unwrap();
        let clock = Arc::new(gpu_agent_backend::mock::VirtualClock::new());
        let mock = gpu_agent_backend::mock::MockBackend::new(&host, clock);
        let physical: Vec<DeviceSpec> = host
            .devices
            .iter()
            .filter(|d| d.mig().is_none())
            .cloned()
            .collect();
        let indices: Vec<u32> = host.devices.iter().map(|d| d.index).collect();
        assert_eq!(indices, [0, 1, 2]);
        let census = Census {
            tasks: vec![],
            pending: 0,
            local: 0,
            busy: vec![false, false, true],
            health: vec!["mig".into(), "no-uuid".into(), "ok".into()],
            devices: host.devices.clone(),
            jobs: vec![],
        };
        let text = classic(&render(
            "n",
            &mock,
            &physical,
            &[],
            &census,
            &Telemetry::default(),
        ));
        let uuid = |d: &DeviceSpec| crate::layout::Target::read(&mock, d).uuid;
        let (a, b) = (uuid(&host.devices[1]), uuid(&host.devices[2]));
        assert!(a.starts_with("MIG-") && b.starts_with("MIG-") && a != b);
        for line in [
            "# TYPE gpu_agent_mig_busy gauge".to_string(),
            format!("gpu_agent_mig_busy{{node=\"n\",device=\"1\",gpu=\"0\",uuid=\"{a}\",profile=\"3g.20gb\"}} 0.0"),
            format!("gpu_agent_mig_busy{{node=\"n\",device=\"2\",gpu=\"0\",uuid=\"{b}\",profile=\"3g.20gb\"}} 1.0"),
            format!("gpu_agent_mig_online{{node=\"n\",device=\"1\",gpu=\"0\",uuid=\"{a}\",profile=\"3g.20gb\",health=\"no-uuid\"}} 0.0"),
            format!("gpu_agent_mig_online{{node=\"n\",device=\"2\",gpu=\"0\",uuid=\"{b}\",profile=\"3g.20gb\",health=\"ok\"}} 1.0"),
            "gpu_agent_gpu_online{node=\"n\",gpu=\"0\",".to_string(),
        ] {
            assert!(text.contains(&line), "{line} not in:\n{text}");
        }
        let memory = format!("gpu_agent_mig_memory_bytes{{node=\"n\",device=\"2\",gpu=\"0\",uuid=\"{b}\",profile=\"3g.20gb\"}} ");
        let bytes: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix(&memory))
            .unwrap_or_else(|| panic!("{memory} not in:\n{text}"))
            .parse()
            .unwrap();
        assert!(
            bytes > 19.0 * (1u64 << 30) as f64 && bytes < 21.0 * (1u64 << 30) as f64,
            "{bytes}"
        );
        // The instances are not `gpu_` series.
        assert!(
            !text.contains("gpu_agent_gpu_busy{node=\"n\",gpu=\"1\""),
            "{text}"
        );
    }

    #[test]
    fn a_scrape_shows_each_slurm_job_with_its_energy_so_far() {
        let host = gpu_agent_hostspec::host::parse(
            std::path::Path::new("host.toml"),
            "[[gpu]]\nmodel = \"A100-SXM4-40GB\"\nspeed = 7\nmig = [\"3g.20gb@0\", \"3g.20gb@4\"]\n\n[[gpu]]\nmodel = \"T4\"\nspeed = 1\n",
        )
        .unwrap();
        let clock = Arc::new(gpu_agent_backend::mock::VirtualClock::new());
        let mock = gpu_agent_backend::mock::MockBackend::new(&host, clock.clone());
        // An hour at idle power: both counters well past 7000 mJ.
        clock.advance(3600.0);
        let counter = |gpu| mock.energy_mj(gpu).unwrap().unwrap();
        let (a100, t4) = (counter(0), counter(1));
        let job = |job, task: &str, running, energy_j, meters| JobEnergy {
            job,
            task: task.into(),
            running,
            energy_j,
            meters,
            ended: (!running).then_some(1.0e9),
        };
        let census = Census {
            jobs: vec![
                // On the T4 since its counter read 2000 mJ less, 5 J stored
                // before a stop: 5 + 2 J.
                job(
                    41,
                    "t3",
                    true,
                    Some(5.0),
                    vec![Meter {
                        gpu: 1,
                        at_start_mj: Some(t4 - 2000),
                        share: 1.0,
                    }],
                ),
                // On a 3g.20gb instance (3 of the A100's 7 slices) since
                // its GPU's counter read 7000 mJ less: 3 J.
                job(
                    42,
                    "t4",
                    true,
                    None,
                    vec![Meter {
                        gpu: 0,
                        at_start_mj: Some(a100 - 7000),
                        share: 3.0 / 7.0,
                    }],
                ),
                job(40, "t1", false, Some(123.5), vec![]),
                // A counter that could not be read: no energy series.
                job(
                    43,
                    "t5",
                    true,
                    None,
                    vec![Meter {
                        gpu: 1,
                        at_start_mj: None,
                        share: 1.0,
                    }],
                ),
            ],
            ..Census::default()
        };
        let text = classic(&render(
            "gpu07",
            &mock,
            &[],
            &[],
            &census,
            &Telemetry::default(),
        ));
        let value = |series: &str| -> Option<f64> {
            text.lines()
                .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
                .map(|v| v.parse().unwrap())
        };
        let series = |name: &str, job: u32, task: &str| {
            format!("gpu_agent_slurm_job_{name}{{node=\"gpu07\",slurm_job_id=\"{job}\",task=\"{task}\"}}")
        };
        let close = |got: Option<f64>, want: f64| got.is_some_and(|g| (g - want).abs() < 1e-9);
        assert!(
            close(value(&series("energy_joules", 41, "t3")), 7.0),
            "{text}"
        );
        assert!(
            close(value(&series("energy_joules", 42, "t4")), 3.0),
            "{text}"
        );
        assert!(
            close(value(&series("energy_joules", 40, "t1")), 123.5),
            "{text}"
        );
        assert_eq!(value(&series("energy_joules", 43, "t5")), None, "{text}");
        assert_eq!(value(&series("running", 41, "t3")), Some(1.0), "{text}");
        assert_eq!(value(&series("running", 40, "t1")), Some(0.0), "{text}");
        assert_eq!(value(&series("running", 43, "t5")), Some(1.0), "{text}");
    }
}
