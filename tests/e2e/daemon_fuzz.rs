//! Fuzzing the daemon's whole D-Bus surface: random calls of every method
//! of `Agent1`, `Device1`, `Mock1` and the standard interfaces, with
//! arguments drawn from pools of valid, borderline and hostile values (and,
//! now and then, of the wrong types), against one daemon on mock GPUs that
//! can be split into MIG instances.
//!
//! Every call must be answered within [`ANSWER_LIMIT`], either with success
//! or with a documented error name (`org.gpuagent.Agent1.Error.*` or one of
//! the standard `org.freedesktop.DBus.Error.*`); `Properties` and
//! `ObjectManager` too, which the agent serves strictly
//! (`gpu_agent_dbus::strict`). The one exception is the two standard
//! interfaces zbus keeps private in zbus 5 (`Introspectable`, `Peer`): should
//! they answer zbus's own `org.freedesktop.zbus.Error`, that is counted
//! apart. The daemon must outlive
//! the run, stop on SIGTERM with status 0, and, restarted after a kill -9,
//! still hold every task whose `Submit` was answered with an id.
//!
//! `cargo test` runs `GPU_AGENT_FUZZ_CALLS` calls (default 300);
//! `bench/fuzz.sh N` runs N in a release build. The seed is printed, and
//! `GPU_AGENT_FUZZ_SEED` replays a run.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use zbus::zvariant::{OwnedValue, StructureBuilder, Value};

use crate::daemon::{Daemon, Settings, AGENT};

/// How long one call may go unanswered before the run fails.
const ANSWER_LIMIT: Duration = Duration::from_secs(15);

/// The error names a reply may carry besides the agent's own.
const STANDARD_ERRORS: &[&str] = &[
    "org.freedesktop.DBus.Error.InvalidArgs",
    "org.freedesktop.DBus.Error.UnknownMethod",
    "org.freedesktop.DBus.Error.UnknownInterface",
    "org.freedesktop.DBus.Error.UnknownObject",
    "org.freedesktop.DBus.Error.UnknownProperty",
    "org.freedesktop.DBus.Error.PropertyReadOnly",
    "org.freedesktop.DBus.Error.AccessDenied",
];

/// Calls per run.
fn calls() -> u32 {
    std::env::var("GPU_AGENT_FUZZ_CALLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(300)
}

/// The run's seed: `GPU_AGENT_FUZZ_SEED`, or the clock.
fn seed() -> u64 {
    std::env::var("GPU_AGENT_FUZZ_SEED")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("clock after 1970")
                .as_nanos() as u64
        })
}

/// A mock host whose two A100s can be split into MIG instances.
const HOST: &str = r#"
[[gpu]]
model = "A100-SXM4-40GB"
count = 2
speed = 1.0

[[gpu]]
model = "T4"
speed = 0.25
"#;

/// mig-parted files: valid ones, for this host, and broken ones.
const MIG_FILES: &[&str] = &[
    "version: v1\nmig-configs:\n  split:\n    - devices: [1]\n      mig-enabled: true\n      mig-devices: {\"3g.20gb\": 2}\n",
    "version: v1\nmig-configs:\n  whole:\n    - devices: [1]\n      mig-enabled: false\n",
    "version: v1\nmig-configs:\n  sevens:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"1g.5gb\": 7}\n",
    "version: v1\nmig-configs:\n  bad:\n    - devices: [0]\n      mig-enabled: true\n      mig-devices: {\"9g.99gb\": 1}\n",
    "version: v1\nmig-configs:\n  ci:\n    - devices: [0]\n      mig-enabled: true\n      mig-devices: {\"1c.3g.20gb\": 2}\n",
    "version: v2\n",
    "mig-configs: [",
    "",
];

/// Strings that break readers, and strings that mean something.
const STRINGS: &[&str] = &[
    "",
    " ",
    "t",
    "t0",
    "t1",
    "t2",
    "t-1",
    "t99999999999999999999",
    "all",
    "queued",
    "running",
    "succeeded",
    "fifo",
    "greedy-eft",
    "sos",
    "nope",
    "split",
    "whole",
    "sevens",
    "bad",
    "ci",
    "lost",
    "xid 79",
    "xid 13",
    "xid",
    "fail SetClocks",
    "fail",
    "wait",
    "refuse",
    "default",
    "é",
    "\"",
    "{}",
    "[",
    "\n",
    "-1",
    "1e309",
    "NaN",
    "inf",
];

/// Numbers that break readers, and ordinary ones.
const NUMBERS: &[f64] = &[
    0.0,
    -0.0,
    1.0,
    2.5,
    10.0,
    60.0,
    3600.0,
    -1.0,
    1e9,
    1e300,
    -1e300,
    f64::MAX,
    f64::MIN_POSITIVE,
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
];

/// Small and hostile u32 values.
const INDICES: &[u32] = &[0, 1, 2, 3, 4, 7, 64, 4096, u32::MAX];

/// Draws call arguments.
struct Gen<'a> {
    rng: &'a mut StdRng,
    /// Ids of tasks the daemon answered with.
    ids: &'a [String],
}

impl Gen<'_> {
    fn pick<T: Copy>(&mut self, pool: &[T]) -> T {
        pool[self.rng.random_range(0..pool.len())]
    }

    fn chance(&mut self, p: f64) -> bool {
        self.rng.random_bool(p)
    }

    fn string(&mut self) -> String {
        match self.rng.random_range(0..10) {
            0 if !self.ids.is_empty() => self.ids[self.rng.random_range(0..self.ids.len())].clone(),
            1 => "x".repeat(self.rng.random_range(200..70_000)),
            2 => format!("t{}", self.rng.random_range(0..400)),
            _ => self.pick(STRINGS).to_string(),
        }
    }

    fn number(&mut self) -> f64 {
        if self.chance(0.5) {
            self.rng.random_range(0.0..100.0)
        } else {
            self.pick(NUMBERS)
        }
    }

    fn index(&mut self) -> u32 {
        if self.chance(0.7) {
            self.rng.random_range(0..5)
        } else {
            self.pick(INDICES)
        }
    }

    /// A value of a random type.
    fn any(&mut self) -> OwnedValue {
        let v = match self.rng.random_range(0..6) {
            0 => Value::from(self.string()),
            1 => Value::from(self.number()),
            2 => Value::from(self.index()),
            3 => Value::from(self.chance(0.5)),
            4 => Value::from(vec![self.string()]),
            _ => Value::from(vec![self.index(), self.index()]),
        };
        v.try_into().expect("an owned value")
    }

    /// A dictionary with some of `keys` (typed by `value`), maybe an
    /// unknown key, and maybe a value of the wrong type.
    fn dict(
        &mut self,
        keys: &[&str],
        mut value: impl FnMut(&mut Self, &str) -> OwnedValue,
    ) -> HashMap<String, OwnedValue> {
        let mut dict = HashMap::new();
        for key in keys {
            if self.chance(0.75) {
                let v = if self.chance(0.05) {
                    self.any()
                } else {
                    value(self, key)
                };
                dict.insert(key.to_string(), v);
            }
        }
        if self.chance(0.05) {
            dict.insert(self.string(), self.any());
        }
        dict
    }

    fn submit_spec(&mut self) -> HashMap<String, OwnedValue> {
        let keys = [
            "workload",
            "mem_gb",
            "deadline",
            "weight",
            "gpus",
            "name",
            "requeue",
            "client_token",
            "app",
            "command",
        ];
        let mut dict = self.dict(&keys, |g, key| {
            let v = match key {
                "workload" | "weight" => Value::from(g.rng.random_range(0.1..20.0)),
                "mem_gb" => Value::from(g.rng.random_range(0.0..45.0)),
                "deadline" => Value::from(g.rng.random_range(0.0..600.0)),
                "gpus" => Value::from(g.pick(&[1u32, 1, 1, 2, 3, 0, 9])),
                "requeue" => Value::from(g.chance(0.5)),
                "command" => Value::from(vec!["/bin/true".to_string()]),
                "app" => Value::from(g.pick(&["default", "nope"]).to_string()),
                _ => Value::from(g.string()),
            };
            v.try_into().expect("an owned value")
        });
        // Half of them well-formed, so that tasks run and can be cancelled.
        if self.chance(0.5) {
            for key in ["workload", "mem_gb", "deadline", "weight"] {
                let v = self.rng.random_range(0.5..20.0);
                dict.insert(key.into(), owned(v));
            }
            for key in ["command", "app", "gpus", "name"] {
                dict.remove(key);
            }
        } else if let Some(key) =
            ["workload", "mem_gb", "deadline", "weight"].get(self.rng.random_range(0..8))
        {
            let n = self.pick(NUMBERS);
            dict.insert(key.to_string(), owned(n));
        }
        dict
    }

    fn adopt_spec(&mut self) -> HashMap<String, OwnedValue> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock after 1970")
            .as_secs_f64();
        self.dict(
            &["devices", "external_id", "owner_uid", "app", "deadline"],
            |g, key| {
                let v = match key {
                    "devices" => Value::from(vec![g.index()]),
                    "external_id" => Value::from(format!("slurm:{}", g.rng.random_range(0..20))),
                    "owner_uid" => Value::from(g.pick(&[0u32, 1000, u32::MAX])),
                    "deadline" => Value::from(now + g.rng.random_range(-100.0..3600.0)),
                    _ => Value::from(g.string()),
                };
                v.try_into().expect("an owned value")
            },
        )
    }

    fn mig_options(&mut self) -> HashMap<String, OwnedValue> {
        self.dict(&["on_busy", "timeout_s", "reject_stranded"], |g, key| {
            let v = match key {
                "on_busy" => Value::from(g.pick(&["wait", "refuse", "x"]).to_string()),
                "timeout_s" => Value::from(g.number()),
                _ => Value::from(g.chance(0.5)),
            };
            v.try_into().expect("an owned value")
        })
    }

    fn params(&mut self) -> HashMap<String, OwnedValue> {
        let keys = ["alpha", "rule", "iterations", "solver", "theta", "model"];
        self.dict(&keys, |g, _| g.any())
    }
}

/// One call: object path, interface, member and arguments.
struct Call {
    path: String,
    interface: String,
    member: &'static str,
    args: Vec<OwnedValue>,
}

impl Call {
    fn new(path: &str, interface: &str, member: &'static str, args: Vec<OwnedValue>) -> Call {
        Call {
            path: path.into(),
            interface: interface.into(),
            member,
            args,
        }
    }
}

fn owned<'a>(v: impl Into<Value<'a>>) -> OwnedValue {
    v.into().try_into().expect("an owned value")
}

/// A random call of one of the daemon's methods.
fn draw(g: &mut Gen) -> Call {
    let agent = |member, args| Call::new(AGENT[1], AGENT[2], member, args);
    let mut call = match g.rng.random_range(0..26) {
        0..=4 => agent("Submit", vec![owned(g.submit_spec())]),
        5 | 6 => agent("Cancel", vec![owned(g.string())]),
        7 => agent("GetTask", vec![owned(g.string())]),
        8 => agent("ListTasks", vec![owned(g.string())]),
        9 => agent(
            "ListTasksPage",
            vec![
                owned(g.string()),
                owned(g.pick(&[0u64, 1, 5, u64::MAX])),
                owned(g.pick(&[0u32, 1, 10, 10_000, 10_001, u32::MAX])),
            ],
        ),
        10 => agent(
            g.pick(&["CountTasks", "ListPolicies", "Metrics", "Reload"]),
            vec![],
        ),
        11 => agent("SetPolicy", vec![owned(g.string())]),
        12 => agent(
            "SetPolicyWithParameters",
            vec![owned(g.string()), owned(g.params())],
        ),
        13 => agent("DescribePolicy", vec![owned(g.string())]),
        14 => agent("GetMigLayout", vec![owned(g.index())]),
        15 => agent("ExportMigConfig", vec![owned(g.string())]),
        16 => {
            let yaml = g.pick(MIG_FILES);
            agent(
                "AssertMigConfig",
                vec![owned(yaml.to_string()), owned(g.string())],
            )
        }
        17 | 18 => {
            let yaml = g.pick(MIG_FILES);
            let name = if g.chance(0.7) { "" } else { g.pick(STRINGS) };
            agent(
                "ApplyMigConfig",
                vec![
                    owned(yaml.to_string()),
                    owned(name.to_string()),
                    owned(g.mig_options()),
                ],
            )
        }
        19 => agent("CancelMigChange", vec![owned(g.index())]),
        20 => agent(
            "SetDeviceOnline",
            vec![owned(g.index()), owned(g.chance(0.7))],
        ),
        21 => agent("Adopt", vec![owned(g.adopt_spec())]),
        22 => agent("Release", vec![owned(g.string())]),
        23 => match g.rng.random_range(0..2) {
            0 => Call::new(
                AGENT[1],
                "org.gpuagent.Mock1",
                "InjectFault",
                vec![owned(g.index()), owned(g.string())],
            ),
            _ => Call::new(
                AGENT[1],
                "org.gpuagent.Mock1",
                "Repair",
                vec![owned(g.index())],
            ),
        },
        24 => {
            let path = format!("{}/gpu/{}", AGENT[1], g.index());
            let member = g.pick(&["Get", "GetAll", "Set"]);
            let interface = g
                .pick(&["org.gpuagent.Device1", "org.gpuagent.Agent1", "x.y"])
                .to_string();
            let mut args = vec![owned(interface)];
            if member != "GetAll" {
                let name = g.pick(&["Name", "Online", "Health", "Policy", "Nope"]);
                args.push(owned(name.to_string()));
            }
            if member == "Set" {
                args.push(owned(Value::new(g.any())));
            }
            Call::new(&path, "org.freedesktop.DBus.Properties", member, args)
        }
        _ => {
            let (interface, member) = g.pick(&[
                ("org.freedesktop.DBus.Introspectable", "Introspect"),
                ("org.freedesktop.DBus.Peer", "Ping"),
                ("org.freedesktop.DBus.Peer", "GetMachineId"),
                ("org.freedesktop.DBus.ObjectManager", "GetManagedObjects"),
                ("org.gpuagent.Agent1", "NoSuchMethod"),
            ]);
            Call::new(AGENT[1], interface, member, vec![])
        }
    };
    // Now and then the wrong arguments: one too many, one too few, or
    // one of another type.
    if g.chance(0.1) {
        match g.rng.random_range(0..3) {
            0 => call.args.push(g.any()),
            1 => {
                call.args.pop();
            }
            _ if !call.args.is_empty() => {
                let i = g.rng.random_range(0..call.args.len());
                call.args[i] = g.any();
            }
            _ => call.args.push(g.any()),
        }
    }
    call
}

/// What came of one call.
#[derive(Debug)]
enum Outcome {
    /// Success, with the reply's body when it is a string (Submit's id).
    Answered(Option<String>),
    /// A documented error.
    Named(String),
    /// An error name the API does not document.
    Unnamed(String, String),
    /// zbus's own error, from an interface only zbus serves (see the
    /// module documentation).
    Zbus,
    /// No answer within [`ANSWER_LIMIT`], or the connection broke.
    Lost(String),
}

fn send(d: &Daemon, call: &Call) -> Outcome {
    let zbus_serves = [
        "org.freedesktop.DBus.Introspectable",
        "org.freedesktop.DBus.Peer",
    ]
    .contains(&call.interface.as_str());
    let conn = d.conn().clone();
    let mut body = StructureBuilder::new();
    for arg in &call.args {
        body = body.append_field(Value::from(arg.try_clone().expect("clone")));
    }
    let reply = d.block_on(async move {
        let (path, interface) = (call.path.as_str(), Some(call.interface.as_str()));
        let destination = Some(AGENT[0]);
        let sent = match body.build() {
            Ok(body) => {
                tokio::time::timeout(
                    ANSWER_LIMIT,
                    conn.call_method(destination, path, interface, call.member, &body),
                )
                .await
            }
            // A structure needs a field: a call without arguments.
            Err(_) => {
                tokio::time::timeout(
                    ANSWER_LIMIT,
                    conn.call_method(destination, path, interface, call.member, &()),
                )
                .await
            }
        };
        sent
    });
    match reply {
        Err(_) => Outcome::Lost(format!("no answer within {ANSWER_LIMIT:?}")),
        Ok(Ok(message)) => Outcome::Answered(message.body().deserialize::<String>().ok()),
        Ok(Err(zbus::Error::MethodError(name, message, _))) => {
            let name = name.to_string();
            if name.starts_with("org.gpuagent.Agent1.Error.")
                || STANDARD_ERRORS.contains(&name.as_str())
            {
                Outcome::Named(name)
            } else if name == "org.freedesktop.zbus.Error" && zbus_serves {
                Outcome::Zbus
            } else {
                Outcome::Unnamed(name, message.unwrap_or_default())
            }
        }
        Ok(Err(e)) => Outcome::Lost(e.to_string()),
    }
}

#[test]
fn daemon_fuzz_every_call_is_answered_or_refused_by_name() {
    let (n, seed) = (calls(), seed());
    let mut rng = StdRng::seed_from_u64(seed);
    let mut d = Daemon::start_with(Settings {
        host: Some(HOST.into()),
        ..Settings::default()
    });
    let mut ids: Vec<String> = Vec::new();
    let (mut answered, mut zbus_own, mut unnamed) = (0u32, 0u32, Vec::new());
    let mut named: BTreeMap<String, u32> = BTreeMap::new();
    for i in 0..n {
        let call = draw(&mut Gen {
            rng: &mut rng,
            ids: &ids,
        });
        let what = format!(
            "call {i} (seed {seed}): {}.{} on {}",
            call.interface, call.member, call.path
        );
        match send(&d, &call) {
            Outcome::Answered(id) => {
                answered += 1;
                if call.member == "Submit" {
                    ids.push(id.expect("Submit answers an id"));
                }
            }
            Outcome::Named(name) => *named.entry(name).or_default() += 1,
            Outcome::Zbus => zbus_own += 1,
            Outcome::Unnamed(name, message) => unnamed.push(format!("{what}: {name}: {message}")),
            Outcome::Lost(why) => panic!(
                "{what}: {why}; the daemon's log ends:\n{}",
                tail(&d.stderr())
            ),
        }
    }
    let refused: u32 = named.values().sum();
    println!(
        "fuzz bus: {n} calls (seed {seed}), 0 crashes, {answered} answered, {refused} refused with a named error, {} unnamed, {zbus_own} zbus's own error from its standard interfaces, {} tasks acknowledged",
        unnamed.len(),
        ids.len()
    );
    for (name, count) in &named {
        println!("fuzz bus:   {count:>7} {name}");
    }
    assert!(
        unnamed.is_empty(),
        "errors the API does not name ({}):\n{}",
        unnamed.len(),
        unnamed
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );

    // Still serving, and nothing acknowledged lost across a kill -9.
    let proxy = d.proxy();
    d.block_on(proxy.count_tasks()).expect("CountTasks answers");
    drop(proxy);
    d.kill9();
    d.restart();
    let proxy = d.proxy();
    for id in &ids {
        if let Err(e) = d.block_on(proxy.get_task(id)) {
            panic!("task {id}, acknowledged, is gone after a restart: {e}");
        }
    }
    drop(proxy);
    let status = d.terminate();
    assert!(
        status.success(),
        "SIGTERM ends the daemon with status 0, not {status}; its log ends:\n{}",
        tail(&d.stderr())
    );
}

/// The last 40 lines of `text`.
fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}
