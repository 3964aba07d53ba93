//! Start-up and configuration: signals from the first instruction, and
//! configuration errors that name file, line and key, each OS error once;
//! calls with the wrong arguments get `org.freedesktop.DBus.Error.InvalidArgs`.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use gpu_agent_dbus::private_bus::PrivateBus;

use crate::daemon::{host_file, spec, Daemon, Settings, AGENT};
use crate::harness::{artefacts, plugin_dir, FIFO, GREEDY_EFT};

/// `gpu-agentd --mock … --session` on `bus` with `extra` arguments.
fn gpu_agentd(bus: &PrivateBus, state: &std::path::Path, extra: &[&str]) -> Command {
    let mut command = Command::new(artefacts().join("gpu-agentd"));
    command
        .arg("--mock")
        .arg(host_file())
        .arg("--session")
        .arg("--state-dir")
        .arg(state)
        .args(extra)
        .env("DBUS_SESSION_BUS_ADDRESS", bus.address())
        .env_remove("JOURNAL_STREAM")
        .env_remove("NOTIFY_SOCKET")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    command
}

/// Runs a daemon that is expected to refuse to start.
fn refused(extra: &[&str]) -> (Output, String) {
    let bus = PrivateBus::start().expect("a private bus");
    let state = tempfile::tempdir().unwrap();
    let out = gpu_agentd(&bus, state.path(), extra)
        .output()
        .expect("gpu-agentd runs");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    (out, stderr)
}

#[test]
fn daemon_startup_hangups_while_starting_are_deferred_not_fatal() {
    let bus = PrivateBus::start().expect("a private bus");
    let state = tempfile::tempdir().unwrap();
    let plugins = plugin_dir(&[FIFO, GREEDY_EFT]);
    let mut child = gpu_agentd(&bus, state.path(), &["--plugin-dir"])
        .arg(plugins.path())
        .spawn()
        .expect("gpu-agentd starts");
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    // Until main's first instruction the default action applies (the loader
    // runs before it); from there on, a SIGHUP must never kill it.
    let status = format!("/proc/{}/status", child.id());
    let catches_hangup = || {
        std::fs::read_to_string(&status)
            .ok()
            .and_then(|s| {
                let mask = s.lines().find_map(|l| l.strip_prefix("SigCgt:"))?;
                u64::from_str_radix(mask.trim(), 16).ok()
            })
            .is_some_and(|mask| mask & 1 != 0)
    };
    let caught_by = Instant::now() + Duration::from_secs(10);
    while !catches_hangup() {
        assert!(
            Instant::now() < caught_by,
            "gpu-agentd never handled SIGHUP"
        );
        std::thread::yield_now();
    }
    // SIGHUPs from the first microseconds of its life until it serves.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dbus = rt.block_on(async {
        let conn = zbus::connection::Builder::address(bus.address())
            .unwrap()
            .build()
            .await
            .unwrap();
        zbus::fdo::DBusProxy::new(&conn).await.unwrap()
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut sent = 0;
    loop {
        if nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).is_ok() {
            sent += 1;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("gpu-agentd died of a SIGHUP while starting: {status}");
        }
        if rt
            .block_on(dbus.name_has_owner(AGENT[0].try_into().unwrap()))
            .unwrap_or(false)
        {
            break;
        }
        assert!(Instant::now() < deadline, "gpu-agentd did not start");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(sent > 0);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // The early ones became (at least) one reload once it was ready.
    let serving = stderr.find("serving org.gpuagent.Agent1").expect(&stderr);
    let reload = stderr.find("SIGHUP: reloading").expect(&stderr);
    assert!(reload > serving, "{stderr}");
}

#[test]
fn daemon_startup_unknown_configured_policy_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = plugin_dir(&[FIFO, GREEDY_EFT]);
    let config = dir.path().join("agent.toml");
    std::fs::write(&config, "cancel_grace_s = 1\n\npolicy = \"nosuch\"\n").unwrap();
    let (_, stderr) = refused(&[
        "--config",
        config.to_str().unwrap(),
        "--plugin-dir",
        plugins.path().to_str().unwrap(),
    ]);
    assert_eq!(
        stderr,
        format!(
            "gpu-agentd: error: {}:3: policy: unknown policy \"nosuch\"; available: fifo, greedy-eft\n",
            config.display()
        )
    );
}

#[test]
fn daemon_startup_missing_plugin_dir_names_file_and_key_and_the_os_error_once() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agent.toml");
    std::fs::write(
        &config,
        "# plugins\nplugin_dir = \"/nonexistent/plugins\"\n",
    )
    .unwrap();
    let (_, stderr) = refused(&["--config", config.to_str().unwrap()]);
    assert_eq!(
        stderr,
        format!(
            "gpu-agentd: error: {}:2: plugin_dir: cannot read plugin directory /nonexistent/plugins: \
             No such file or directory (os error 2)\n",
            config.display()
        )
    );
    let (_, stderr) = refused(&["--plugin-dir", "/nonexistent/plugins"]);
    assert_eq!(
        stderr,
        "gpu-agentd: error: --plugin-dir: cannot read plugin directory /nonexistent/plugins: \
         No such file or directory (os error 2)\n"
    );
}

#[test]
fn daemon_startup_wrong_arguments_are_invalid_args() {
    let d = Daemon::start();
    let invalid = |args: &[&str], expected: &str| {
        let out = d.busctl(&[&["call", AGENT[0], AGENT[1], AGENT[2]], args].concat());
        assert!(!out.status.success(), "{args:?} was accepted");
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            format!("Call failed: {expected}\n"),
            "{args:?}"
        );
    };
    invalid(&["GetTask", "u", "5"], "expected (s), got (u)");
    invalid(&["GetTask", "ss", "t1", "t2"], "expected (s), got (ss)");
    invalid(&["Submit", "s", "x"], "expected (a{sv}), got (s)");
    invalid(&["SetPolicy", "ss", "fifo", "x"], "expected (s), got (ss)");
    invalid(
        &["SetPolicyWithParameters", "s", "fifo"],
        "expected (sa{sv}), got (s)",
    );
    invalid(&["GetMigLayout", "s", "0"], "expected (u), got (s)");
    invalid(&["SetDeviceOnline", "u", "0"], "expected (ub), got (u)");
    // Methods without arguments take none.
    for method in ["ListPolicies", "Metrics", "Reload"] {
        invalid(&[method, "s", "x"], "expected (), got (s)");
    }
    // The mock's control interface is checked the same way.
    let out = d.busctl(&[
        "call",
        AGENT[0],
        AGENT[1],
        "org.gpuagent.Mock1",
        "Repair",
        "s",
        "0",
    ]);
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "Call failed: expected (u), got (s)\n"
    );
    // The error's name, as a client library sees it.
    let conn = d.conn().clone();
    let got = d.block_on(async move {
        conn.call_method(
            Some(AGENT[0]),
            AGENT[1],
            Some(AGENT[2]),
            "GetTask",
            &(7u32,),
        )
        .await
    });
    assert_eq!(
        crate::daemon::dbus_error(got),
        (
            "org.freedesktop.DBus.Error.InvalidArgs".to_string(),
            "expected (s), got (u)".to_string()
        )
    );
    // Right arguments still work.
    for call in [&["ListPolicies"][..], &["GetMigLayout", "u", "0"]] {
        let out = d.busctl(&[&["call", AGENT[0], AGENT[1], AGENT[2]], call].concat());
        assert!(out.status.success(), "{call:?}: {out:?}");
    }
}

/// The standard interfaces the agent can serve strictly answer wrong
/// arguments by name too: `ObjectManager`, and `Properties` at the agent,
/// at each GPU and at each MIG instance a layout change adds (zbus's own
/// answered `org.freedesktop.zbus.Error`).
#[test]
fn daemon_startup_standard_interfaces_answer_wrong_arguments_invalid_args() {
    let d = Daemon::start();
    // GPU 0 (an A100) split in two: two new device objects.
    let split = "version: v1\nmig-configs:\n  a:\n    - devices: [0]\n      \
                 mig-enabled: true\n      mig-devices: {\"3g.20gb\": 2}\n";
    let proxy = d.proxy();
    let changing = d
        .block_on(proxy.apply_mig_config(split, "", Default::default()))
        .expect("ApplyMigConfig");
    assert_eq!(changing, [0]);
    crate::daemon::wait_for("GPU 0 split", Duration::from_secs(30), || {
        (d.mig_layout(0).state == "stable").then_some(())
    });
    let instance = gpu_agent_dbus::mig_device_path(0, 4);
    let gpu = gpu_agent_dbus::device_path(1);
    let call =
        |path: &str, interface: &str, member: &str, body: zbus::zvariant::Structure<'static>| {
            let (conn, path, interface, member) = (
                d.conn().clone(),
                path.to_string(),
                interface.to_string(),
                member.to_string(),
            );
            d.block_on(async move {
                conn.call_method(
                    Some(AGENT[0]),
                    path.as_str(),
                    Some(interface.as_str()),
                    member.as_str(),
                    &body,
                )
                .await
            })
        };
    let body = |fields: Vec<zbus::zvariant::Value<'static>>| {
        fields
            .into_iter()
            .fold(zbus::zvariant::StructureBuilder::new(), |b, f| {
                b.append_field(f)
            })
            .build()
            .expect("a body")
    };
    let invalid = |got: zbus::Result<zbus::message::Message>, message: &str| {
        assert_eq!(
            crate::daemon::dbus_error(got),
            (
                "org.freedesktop.DBus.Error.InvalidArgs".to_string(),
                message.to_string()
            )
        );
    };
    const PROPERTIES: &str = "org.freedesktop.DBus.Properties";
    for path in [AGENT[1], gpu.as_str(), instance.as_str()] {
        let got = call(
            path,
            PROPERTIES,
            "Get",
            body(vec![AGENT[2].into(), 5u32.into()]),
        );
        invalid(got, "expected (ss), got (su)");
        let got = call(path, PROPERTIES, "GetAll", body(vec!["x".into()]));
        invalid(
            got,
            "\"x\" is not an interface name: Invalid interface name. See \
             https://dbus.freedesktop.org/doc/dbus-specification.html#message-protocol-names-interface",
        );
    }
    let got = call(
        AGENT[1],
        "org.freedesktop.DBus.ObjectManager",
        "GetManagedObjects",
        body(vec![1u32.into()]),
    );
    invalid(got, "expected (), got (u)");
    // Right arguments still work, at the new instance too.
    let got = call(
        &instance,
        PROPERTIES,
        "Get",
        body(vec!["org.gpuagent.Device1".into(), "MigProfile".into()]),
    )
    .expect("Get");
    let value: zbus::zvariant::OwnedValue = got.body().deserialize().expect("a variant");
    assert_eq!(String::try_from(value).unwrap(), "3g.20gb");
}

/// The systemd watchdog is pinged only while the engine thread answers its
/// heartbeat: a hung engine (a test hook parks it) stops the pings, so
/// systemd would restart the daemon.
#[test]
fn daemon_watchdog_pings_only_while_the_engine_answers() {
    use std::os::unix::net::UnixDatagram;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify");
    let socket = UnixDatagram::bind(&path).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut d = Daemon::start_with(Settings {
        env: vec![
            ("NOTIFY_SOCKET".into(), path.to_str().unwrap().into()),
            // A ping every 0.5 s.
            ("WATCHDOG_USEC".into(), "1000000".into()),
            ("GPU_AGENT_TEST_HANG_ON".into(), "hang".into()),
        ],
        ..Settings::default()
    });
    // The pings that come within `window`.
    let pings = |window: Duration| {
        let end = Instant::now() + window;
        let mut buf = [0u8; 4096];
        let mut n = 0;
        while Instant::now() < end {
            if let Ok(len) = socket.recv(&mut buf) {
                n += String::from_utf8_lossy(&buf[..len])
                    .lines()
                    .filter(|l| *l == "WATCHDOG=1")
                    .count();
            }
        }
        n
    };
    assert!(
        pings(Duration::from_secs(4)) >= 2,
        "a healthy engine earns pings"
    );
    let mut hang = spec(1.0, 1.0, 60.0, 1.0);
    hang.name = "hang".into();
    let client = d.new_client();
    let _never = d.spawn(async move { client.submit(hang.to_dict()).await });
    pings(Duration::from_millis(1500)); // one in flight may still land
    assert_eq!(pings(Duration::from_secs(3)), 0, "a hung engine earns none");
    assert!(
        d.stderr().contains("withholding the watchdog ping"),
        "{}",
        d.stderr()
    );
    d.kill9();
}

/// A daemon on a session bus reads no `/etc/gpu-agent/agent.toml` it was not
/// given: with the package installed, every daemon the tests started took
/// the host's settings. The file is put there in a mount namespace of the
/// daemon's own (a tmpfs overlay on /etc; the host's /etc is untouched),
/// naming a policy no plugin provides, which a daemon that read it would
/// refuse to start with. Needs root (mount); skipped otherwise.
#[test]
fn daemon_on_a_session_bus_reads_no_host_agent_toml() {
    if !nix::unistd::geteuid().is_root() {
        println!(
            "daemon_on_a_session_bus_reads_no_host_agent_toml: skipped: it mounts an overlay \
             on /etc in a namespace of its own and needs root"
        );
        return;
    }
    let bus = PrivateBus::start().expect("a private bus");
    let state = tempfile::tempdir().unwrap();
    let overlay = tempfile::tempdir().unwrap();
    let plugins = plugin_dir(&[FIFO]);
    let mut daemon = gpu_agentd(&bus, state.path(), &["--plugin-dir"]);
    daemon.arg(plugins.path());
    let script = "mount -t tmpfs tmpfs \"$0\"; mkdir -p \"$0/upper/gpu-agent\" \"$0/work\"; \
                  printf 'policy = \"nosuch\"\\n' > \"$0/upper/gpu-agent/agent.toml\"; \
                  mount -t overlay overlay \
                  -o \"lowerdir=/etc,upperdir=$0/upper,workdir=$0/work\" /etc; \
                  grep -q nosuch /etc/gpu-agent/agent.toml; exec \"$@\"";
    let mut child = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-ec", script])
        .arg(overlay.path())
        .arg(daemon.get_program())
        .args(daemon.get_args())
        .envs(daemon.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .env_remove("JOURNAL_STREAM")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("unshare runs");
    let owned = || {
        let out = Command::new("busctl")
            .args([
                "--user",
                "call",
                "org.freedesktop.DBus",
                "/org/freedesktop/DBus",
            ])
            .args(["org.freedesktop.DBus", "NameHasOwner", "s", AGENT[0]])
            .env("DBUS_SESSION_BUS_ADDRESS", bus.address())
            .output()
            .expect("run busctl");
        String::from_utf8_lossy(&out.stdout).trim() == "b true"
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let served = loop {
        if owned() {
            break true;
        }
        if child.try_wait().expect("wait").is_some() || Instant::now() > deadline {
            break false;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = child.kill();
    let out = child.wait_with_output().expect("reap gpu-agentd");
    assert!(
        served,
        "gpu-agentd did not serve: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
