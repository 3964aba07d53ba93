//! A `gpu-agentd` under test: a private bus, a state directory and a plugin
//! directory of its own; stopped when dropped, so no process outlives a test.
//!
//! The fixture is synchronous. It owns a small tokio runtime and one zbus
//! connection to its bus for the tests that talk to the daemon through the
//! contract's proxy; `busctl`, `gdbus` and the daemon itself run as child
//! processes.

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use gpu_agent_dbus::private_bus::PrivateBus;
use gpu_agent_dbus::{Agent1Proxy, Dict, MigLayout, SubmitSpec, TaskInfo, TaskStatus, BUS_NAME};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tempfile::TempDir;
use zbus::proxy::CacheProperties;

use crate::harness::{artefacts, nvml_fake, plugin_dir, FIFO, GREEDY_EFT};

/// The root object and the agent's interface, for `busctl call`.
pub const AGENT: [&str; 3] = [
    "org.gpuagent.Agent1",
    "/org/gpuagent/Agent1",
    "org.gpuagent.Agent1",
];

/// How often waits poll.
const POLL: Duration = Duration::from_millis(20);
/// How long the daemon may take to appear on (or leave) the bus.
const START_LIMIT: Duration = Duration::from_secs(20);
/// How long a SIGTERM'd daemon may take to exit before it is killed.
const STOP_LIMIT: Duration = Duration::from_secs(10);

/// The bundled mock host: 2 × A100-40GB (speed 1), V100 (0.6), T4 (0.25).
pub fn host_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .join("examples/host.toml")
}

/// Polls `done` every 20 ms until it returns `Some`, or panics after `limit`
/// saying what was awaited.
pub fn wait_for<T>(what: &str, limit: Duration, mut done: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = done() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(POLL);
    }
}

/// A string no other test (or test run) uses.
pub fn unique(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .subsec_nanos();
    format!(
        "{prefix}-{}-{}-{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A simulated task's spec: the four required values, every option at its default.
pub fn spec(workload: f64, mem_gb: f64, deadline: f64, weight: f64) -> SubmitSpec {
    SubmitSpec::new(workload, mem_gb, deadline, weight)
}

/// The name and message of a D-Bus error reply; panics on any other outcome.
pub fn dbus_error<T: std::fmt::Debug>(result: zbus::Result<T>) -> (String, String) {
    match result {
        Err(zbus::Error::MethodError(name, message, _)) => {
            (name.to_string(), message.unwrap_or_default())
        }
        other => panic!("expected a D-Bus error reply, got {other:?}"),
    }
}

/// How a [`Daemon`] is started.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `--time-scale`.
    pub time_scale: f64,
    /// The text of an `agent.toml` given with `--config` (the command line's
    /// options override it).
    pub config: Option<String>,
    /// Extra environment of the daemon (test hooks).
    pub env: Vec<(String, String)>,
    /// The text of the `--mock` host file (`None`: the bundled
    /// `examples/host.toml`); a test may rewrite it ([`Daemon::host_path`])
    /// before a restart.
    pub host: Option<String>,
    /// The `--state-dir` (`None`: a fresh temporary directory), such as one
    /// on a file system the test mounted.
    pub state_dir: Option<PathBuf>,
    /// On the NVML backend instead of `--mock`: the stand-in driver library
    /// (tests/nvml-stand-in) with the host file as its GPUs, faults from
    /// [`Daemon::nvml_control`], and the GPUs' controls kept across restarts
    /// as a driver keeps them.
    pub nvml: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            time_scale: 100.0,
            config: None,
            env: Vec::new(),
            host: None,
            state_dir: None,
            nvml: false,
        }
    }
}

/// A running `gpu-agentd` on a private bus. See the module documentation.
pub struct Daemon {
    child: Option<Child>,
    settings: Settings,
    conn: Option<zbus::Connection>,
    rt: tokio::runtime::Runtime,
    /// Where the daemon's stderr goes, over every start.
    log: PathBuf,
    state: TempDir,
    plugins: TempDir,
    scratch: TempDir,
    bus: PrivateBus,
}

impl Daemon {
    /// Starts a bus and a daemon on it at time scale 100, and waits until it
    /// serves its name.
    pub fn start() -> Daemon {
        Daemon::start_with(Settings::default())
    }

    /// Starts a bus and a daemon with `settings`.
    pub fn start_with(settings: Settings) -> Daemon {
        let bus = PrivateBus::start().expect("a private dbus-daemon starts");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let address = bus.address().to_string();
        let conn = rt.block_on(async {
            zbus::connection::Builder::address(address.as_str())
                .expect("a bus address")
                .build()
                .await
                .expect("the test connects to its private bus")
        });
        let scratch = tempfile::tempdir().expect("temp dir");
        let mut daemon = Daemon {
            child: None,
            settings,
            conn: Some(conn),
            rt,
            log: scratch.path().join("gpu-agentd.stderr"),
            state: tempfile::tempdir().expect("temp dir"),
            plugins: plugin_dir(&[FIFO, GREEDY_EFT]),
            scratch,
            bus,
        };
        daemon.launch();
        daemon
    }

    /// The bus address (for `DBUS_SESSION_BUS_ADDRESS`).
    pub fn address(&self) -> &str {
        self.bus.address()
    }

    /// The state directory.
    pub fn state_dir(&self) -> &Path {
        self.settings
            .state_dir
            .as_deref()
            .unwrap_or(self.state.path())
    }

    /// The daemon's plugin directory (a test may add or remove files).
    pub fn plugin_dir(&self) -> &Path {
        self.plugins.path()
    }

    /// The `--config` file: the settings' text, empty without one (a test
    /// may rewrite it before a reload).
    pub fn config_file(&self) -> PathBuf {
        self.scratch.path().join("agent.toml")
    }

    /// The `--mock` host file the daemon starts on.
    pub fn host_path(&self) -> PathBuf {
        match &self.settings.host {
            Some(_) => self.scratch.path().join("host.toml"),
            None => host_file(),
        }
    }

    /// Appends `line` to the stand-in NVML library's control file (its
    /// syntax: tests/nvml-stand-in/src/control.rs), e.g. `xid 0 79`.
    pub fn nvml_control(&self, line: &str) {
        assert!(self.settings.nvml, "the daemon is on the mock");
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.scratch.path().join("nvml-control"))
            .expect("open the NVML control file");
        writeln!(file, "{line}").expect("write the NVML control file");
    }

    /// The controls the stand-in NVML library keeps for the next process
    /// (as a driver keeps them), one a line: `GPU core|memory MIN MAX`,
    /// `GPU applications CORE MEM`, `GPU power MW`.
    pub fn nvml_state(&self) -> String {
        assert!(self.settings.nvml, "the daemon is on the mock");
        std::fs::read_to_string(self.scratch.path().join("nvml-state")).unwrap_or_default()
    }

    /// The daemon's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("the daemon is running").id()
    }

    /// Everything the daemon wrote to stderr so far, over every start.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn launch(&mut self) {
        assert!(self.child.is_none(), "the daemon is already running");
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("open the daemon's log");
        let mut command = Command::new(artefacts().join("gpu-agentd"));
        // Always a file of the test's own: the daemon never reads the
        // host's /etc/gpu-agent/agent.toml.
        let file = self.config_file();
        match &self.settings.config {
            Some(text) => std::fs::write(&file, text).expect("write agent.toml"),
            None if !file.exists() => std::fs::write(&file, "").expect("write agent.toml"),
            None => {}
        }
        command.arg("--config").arg(file);
        let host = self.host_path();
        if let (Some(text), false) = (&self.settings.host, host.exists()) {
            std::fs::write(&host, text).expect("write the host file");
        }
        if self.settings.nvml {
            command
                .env("LD_LIBRARY_PATH", nvml_fake())
                .env("NVML_FAKE_HOST", host)
                .env(
                    "NVML_FAKE_CONTROL",
                    self.scratch.path().join("nvml-control"),
                )
                .env("NVML_FAKE_STATE", self.scratch.path().join("nvml-state"));
        } else {
            command.arg("--mock").arg(host);
        }
        let child = command
            .arg("--session")
            .arg("--time-scale")
            .arg(self.settings.time_scale.to_string())
            .arg("--state-dir")
            .arg(self.state_dir())
            .arg("--plugin-dir")
            .arg(self.plugins.path())
            .env("DBUS_SESSION_BUS_ADDRESS", self.bus.address())
            .env_remove("JOURNAL_STREAM")
            .env_remove("NOTIFY_SOCKET")
            .env_remove("WATCHDOG_USEC")
            .env_remove("WATCHDOG_PID")
            .envs(self.settings.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("gpu-agentd starts");
        self.child = Some(child);
        let deadline = Instant::now() + START_LIMIT;
        loop {
            if self.name_owned() {
                return;
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.child = None;
                panic!(
                    "gpu-agentd exited with {status} before serving {BUS_NAME}; stderr:\n{}",
                    self.stderr()
                );
            }
            assert!(
                Instant::now() < deadline,
                "gpu-agentd did not serve {BUS_NAME} within {START_LIMIT:?}; stderr:\n{}",
                self.stderr()
            );
            std::thread::sleep(POLL);
        }
    }

    /// Whether someone owns the daemon's name on the bus.
    pub fn name_owned(&self) -> bool {
        let conn = self.conn().clone();
        self.block_on(async move {
            let dbus = zbus::fdo::DBusProxy::new(&conn).await.expect("bus proxy");
            dbus.name_has_owner(BUS_NAME.try_into().expect("valid name"))
                .await
                .expect("NameHasOwner")
        })
    }

    /// Waits until the name is released (the old process's connection is
    /// gone), so that a restart cannot be mistaken for the old daemon.
    fn wait_name_released(&self) {
        wait_for("the daemon's name to leave the bus", START_LIMIT, || {
            (!self.name_owned()).then_some(())
        });
    }

    /// SIGKILL: the daemon dies at once, mid-whatever.
    pub fn kill9(&mut self) {
        let mut child = self.child.take().expect("the daemon is running");
        child.kill().expect("SIGKILL the daemon");
        child.wait().expect("reap the daemon");
        self.wait_name_released();
    }

    /// Waits for a daemon that ends by itself (a test hook killed it);
    /// returns the exit status.
    pub fn wait_exit(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("the daemon is running");
        let status = child.wait().expect("reap the daemon");
        self.wait_name_released();
        status
    }

    /// SIGTERM, then waits for the exit; returns the exit status.
    pub fn terminate(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("the daemon is running");
        let status = stop(&mut child).unwrap_or_else(|| {
            panic!(
                "gpu-agentd did not exit within {STOP_LIMIT:?} of SIGTERM; stderr:\n{}",
                self.stderr()
            )
        });
        self.wait_name_released();
        status
    }

    /// Starts the daemon again on the same bus, state and plugins.
    pub fn restart(&mut self) {
        self.launch();
    }

    /// The test's connection to the bus.
    pub fn conn(&self) -> &zbus::Connection {
        self.conn.as_ref().expect("connected")
    }

    /// Enters the fixture's runtime: zbus proxies that subscribed to signals
    /// must be dropped inside it.
    pub fn enter(&self) -> tokio::runtime::EnterGuard<'_> {
        self.rt.enter()
    }

    /// Runs `f` on the fixture's runtime.
    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    /// Spawns `f` on the fixture's runtime.
    pub fn spawn<F>(&self, f: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.rt.spawn(f)
    }

    /// A proxy of the agent on the test's connection (no property cache: every
    /// read asks the daemon).
    pub fn proxy(&self) -> Agent1Proxy<'static> {
        self.block_on(proxy_on(self.conn()))
    }

    /// A proxy on a connection of its own (a second client).
    pub fn new_client(&self) -> Agent1Proxy<'static> {
        let address = self.address().to_string();
        self.block_on(async move {
            let conn = zbus::connection::Builder::address(address.as_str())
                .expect("a bus address")
                .build()
                .await
                .expect("a client connects");
            proxy_on(&conn).await
        })
    }

    /// `Submit` through the proxy.
    pub fn submit(&self, spec: &SubmitSpec) -> zbus::Result<String> {
        self.submit_dict(spec.to_dict())
    }

    /// `Submit` of a raw dictionary through the proxy.
    pub fn submit_dict(&self, dict: Dict) -> zbus::Result<String> {
        let proxy = self.proxy();
        self.block_on(async move { proxy.submit(dict).await })
    }

    /// `GetTask` through the proxy, read with the contract.
    pub fn task(&self, id: &str) -> TaskInfo {
        let proxy = self.proxy();
        let dict = self
            .block_on(async move { proxy.get_task(id).await })
            .unwrap_or_else(|e| panic!("GetTask {id}: {e}"));
        TaskInfo::from_dict(&dict).expect("a task dictionary the contract reads")
    }

    /// `GetMigLayout(gpu)` through the proxy, read with the contract.
    pub fn mig_layout(&self, gpu: u32) -> MigLayout {
        let proxy = self.proxy();
        let dict = self
            .block_on(async move { proxy.get_mig_layout(gpu).await })
            .unwrap_or_else(|e| panic!("GetMigLayout {gpu}: {e}"));
        MigLayout::from_dict(&dict).expect("a MIG layout the contract reads")
    }

    /// `ListTasks("")` through the proxy.
    pub fn tasks(&self) -> Vec<TaskInfo> {
        let proxy = self.proxy();
        self.block_on(async move { proxy.list_tasks("").await })
            .expect("ListTasks")
            .iter()
            .map(|d| TaskInfo::from_dict(d).expect("a task dictionary the contract reads"))
            .collect()
    }

    /// Waits until task `id` is in `state`; panics if it ends in another.
    pub fn wait_state(&self, id: &str, state: TaskStatus, limit: Duration) -> TaskInfo {
        wait_for(&format!("task {id} to be {state}"), limit, || {
            let t = self.task(id);
            if t.state == state {
                return Some(t);
            }
            assert!(
                !t.state.is_terminal(),
                "task {id} ended {} ({:?}) instead of {state}",
                t.state,
                t.reason
            );
            None
        })
    }

    /// Waits until every task has ended; returns them all.
    pub fn wait_all_ended(&self, limit: Duration) -> Vec<TaskInfo> {
        wait_for("every task to end", limit, || {
            let tasks = self.tasks();
            tasks.iter().all(|t| t.state.is_terminal()).then_some(tasks)
        })
    }

    /// Runs `busctl --user ARGS` against this bus.
    pub fn busctl(&self, args: &[&str]) -> Output {
        Command::new("busctl")
            .arg("--user")
            .args(args)
            .env("DBUS_SESSION_BUS_ADDRESS", self.address())
            .output()
            .expect("run busctl")
    }

    /// `busctl --user --json=short ARGS`, asserting success; the parsed JSON.
    pub fn busctl_json(&self, args: &[&str]) -> serde_json::Value {
        let mut all = vec!["--json=short"];
        all.extend_from_slice(args);
        let out = self.busctl(&all);
        assert!(
            out.status.success(),
            "busctl {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        if out.stdout.is_empty() {
            // busctl prints nothing for an empty reply.
            return serde_json::Value::Null;
        }
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "busctl {args:?}: not JSON ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }

    /// `busctl call` of an agent method: `ARGS` are the signature and values.
    /// Returns the reply's `data` array.
    pub fn call(&self, method: &str, args: &[&str]) -> Vec<serde_json::Value> {
        let mut all = vec!["call"];
        all.extend_from_slice(&AGENT);
        all.push(method);
        all.extend_from_slice(args);
        let reply = self.busctl_json(&all);
        match &reply["data"] {
            serde_json::Value::Array(values) => values.clone(),
            _ => Vec::new(),
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // SIGTERM first: the daemon ends its task processes on a clean stop.
        if let Some(mut child) = self.child.take() {
            if stop(&mut child).is_none() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        let _runtime = self.rt.enter();
        drop(self.conn.take());
    }
}

/// SIGTERM to `child` and waits for it; `None` when it outlives [`STOP_LIMIT`].
fn stop(child: &mut Child) -> Option<ExitStatus> {
    if let Ok(Some(status)) = child.try_wait() {
        return Some(status);
    }
    let pid = Pid::from_raw(child.id() as i32);
    let _ = kill(pid, Signal::SIGTERM);
    let deadline = Instant::now() + STOP_LIMIT;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(POLL);
    }
    None
}

async fn proxy_on(conn: &zbus::Connection) -> Agent1Proxy<'static> {
    Agent1Proxy::builder(conn)
        .cache_properties(CacheProperties::No)
        .build()
        .await
        .expect("an Agent1 proxy")
}

/// The `data` of a `busctl --json` `a{sv}` entry: key → (type, data).
pub fn json_dict(value: &serde_json::Value) -> HashMap<String, (String, serde_json::Value)> {
    value
        .as_object()
        .unwrap_or_else(|| panic!("not an a{{sv}}: {value}"))
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                (
                    v["type"].as_str().expect("a variant's type").to_string(),
                    v["data"].clone(),
                ),
            )
        })
        .collect()
}

/// The pids of live processes whose environment holds `NAME=VALUE` exactly.
pub fn processes_with_env(name: &str, value: &str) -> Vec<u32> {
    let needle = format!("{name}={value}");
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .map(|env| env.split(|&b| b == 0).any(|kv| kv == needle.as_bytes()))
                .unwrap_or(false)
        })
        .collect()
}

/// Kills, when dropped, every process whose environment holds
/// `E2E_MARK=<mark>`: what a test's tasks left behind if the daemon did not
/// end them (the test fails then, and must still leave nothing running).
pub struct Reap(pub String);

impl Drop for Reap {
    fn drop(&mut self) {
        for pid in processes_with_env("E2E_MARK", &self.0) {
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
        }
    }
}

/// `gpuctl --session ARGS` against `d`'s bus.
pub fn gpuctl(d: &Daemon, args: &[&str]) -> Output {
    Command::new(artefacts().join("gpuctl"))
        .args(args)
        .arg("--session")
        .env("DBUS_SESSION_BUS_ADDRESS", d.address())
        .env("NO_COLOR", "1")
        .output()
        .expect("run gpuctl")
}
