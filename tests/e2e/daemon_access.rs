//! Authorisation on the caller's uid, as the bus reports it: an outsider may
//! only read; a member of `gpu-agent` may submit and cancel its own tasks,
//! whose commands run as that member; only root changes the policy.
//!
//! The clients run as other users through `setpriv`, so these tests need
//! root; they create (once, idempotently) the system users they run as.

use std::os::unix::fs::MetadataExt;
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Duration;

use gpu_agent_dbus::{TaskStatus, REDACTED};

use crate::daemon::{spec, Daemon, AGENT};

pub(crate) const OUTSIDER: &str = "gpuagent-outsider";
pub(crate) const MEMBER: &str = "gpuagent-member";
const MEMBER_GROUP: &str = "gpu-agent";
const ADMIN_GROUP: &str = "gpu-agent-admin";
const DENIED: &str = "org.gpuagent.Agent1.Error.AccessDenied";

/// A user the clients run as.
#[derive(Debug, Clone, Copy)]
pub(crate) struct As {
    pub(crate) uid: u32,
    pub(crate) gid: u32,
}

pub(crate) struct Users {
    pub(crate) outsider: As,
    pub(crate) member: As,
    member_group_gid: u32,
}

fn run(program: &str, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {program}: {e}"))
}

/// Runs `program args` and accepts exit status 9 ("already exists": another
/// test process made it first).
fn create(program: &str, args: &[&str]) {
    let out = run(program, args);
    assert!(
        out.status.success() || out.status.code() == Some(9),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn group_names(user: &str) -> Vec<String> {
    let out = run("id", &["-nG", user]);
    assert!(out.status.success(), "id -nG {user}");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

fn user(name: &str) -> As {
    let u = nix::unistd::User::from_name(name)
        .expect("passwd lookup")
        .unwrap_or_else(|| panic!("no user {name}"));
    As {
        uid: u.uid.as_raw(),
        gid: u.gid.as_raw(),
    }
}

/// The test users, created once.
pub(crate) fn users() -> &'static Users {
    static USERS: OnceLock<Users> = OnceLock::new();
    USERS.get_or_init(|| {
        if nix::unistd::Group::from_name(MEMBER_GROUP)
            .expect("group lookup")
            .is_none()
        {
            create("groupadd", &["--system", MEMBER_GROUP]);
        }
        let system_user = [
            "--system",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
        ];
        for name in [OUTSIDER, MEMBER] {
            if nix::unistd::User::from_name(name)
                .expect("passwd lookup")
                .is_none()
            {
                let mut args = system_user.to_vec();
                args.push(name);
                create("useradd", &args);
            }
        }
        if !group_names(MEMBER).iter().any(|g| g == MEMBER_GROUP) {
            create("usermod", &["--append", "--groups", MEMBER_GROUP, MEMBER]);
        }
        let outsider_groups = group_names(OUTSIDER);
        assert!(
            !outsider_groups
                .iter()
                .any(|g| g == MEMBER_GROUP || g == ADMIN_GROUP),
            "{OUTSIDER} is in {outsider_groups:?}; these tests need it outside"
        );
        let member_groups = group_names(MEMBER);
        assert!(
            !member_groups.iter().any(|g| g == ADMIN_GROUP),
            "{MEMBER} is in {member_groups:?}; these tests need it out of {ADMIN_GROUP}"
        );
        Users {
            outsider: user(OUTSIDER),
            member: user(MEMBER),
            member_group_gid: nix::unistd::Group::from_name(MEMBER_GROUP)
                .expect("group lookup")
                .expect("the group exists")
                .gid
                .as_raw(),
        }
    })
}

/// Whether the tests can switch users; says so when they cannot.
pub(crate) fn root_or_skip(test: &str) -> bool {
    let root = nix::unistd::geteuid().is_root();
    if !root {
        println!("{test}: skipped: it runs clients as other users and needs root");
    }
    root
}

/// Runs `program args` as `who` with only the bus address in its environment.
fn as_user(d: &Daemon, who: As, program: &str, args: &[&str]) -> Output {
    Command::new("setpriv")
        .arg(format!("--reuid={}", who.uid))
        .arg(format!("--regid={}", who.gid))
        .arg("--init-groups")
        .arg(program)
        .args(args)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("DBUS_SESSION_BUS_ADDRESS", d.address())
        .output()
        .expect("run setpriv")
}

/// `gdbus call` of an agent method as `who`: `Ok(stdout)` or `Err((error name, message))`.
fn gdbus(d: &Daemon, who: As, method: &str, args: &[&str]) -> Result<String, (String, String)> {
    let method = format!("{}.{method}", AGENT[2]);
    let mut all = vec![
        "call",
        "--session",
        "--dest",
        AGENT[0],
        "--object-path",
        AGENT[1],
        "--method",
        &method,
    ];
    all.extend_from_slice(args);
    let out = as_user(d, who, "gdbus", &all);
    let stdout = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if out.status.success() {
        return Ok(stdout);
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let error = stderr
        .split_once("GDBus.Error:")
        .unwrap_or_else(|| panic!("gdbus {method} failed without a D-Bus error: {stderr}"))
        .1
        .trim_end();
    let (name, message) = error.split_once(": ").unwrap_or((error, ""));
    Err((name.to_string(), message.to_string()))
}

/// `busctl --user --json=short ARGS` as `who`, asserting success.
fn busctl_json(d: &Daemon, who: As, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["--user", "--json=short"];
    all.extend_from_slice(args);
    let out = as_user(d, who, "busctl", &all);
    assert!(
        out.status.success(),
        "busctl {args:?} as uid {}: {}",
        who.uid,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("busctl JSON")
}

/// gdbus's text form of a Submit dictionary.
const SIMULATED: &str =
    "{'workload': <10.0>, 'mem_gb': <1.0>, 'deadline': <60.0>, 'weight': <1.0>}";
/// One that runs for good (1e6 units), until cancelled.
const LONG: &str = "{'workload': <1e6>, 'mem_gb': <1.0>, 'deadline': <60.0>, 'weight': <1.0>}";

/// The id in gdbus's `('t1',)`.
fn id_of(reply: &str) -> String {
    reply
        .strip_prefix("('")
        .and_then(|r| r.strip_suffix("',)"))
        .unwrap_or_else(|| panic!("not a task id reply: {reply}"))
        .to_string()
}

#[test]
fn daemon_access_outsider_may_only_read() {
    if !root_or_skip("daemon_access_outsider_may_only_read") {
        return;
    }
    let who = users().outsider;
    let d = Daemon::start();
    let roots = d.submit(&spec(1e6, 1.0, 60.0, 1.0)).expect("Submit");
    let before = d.tasks();

    let member_only = |what: &str| {
        format!(
            "uid {} may not {what}: that needs root or membership of group gpu-agent",
            who.uid
        )
    };
    assert_eq!(
        gdbus(&d, who, "Submit", &[SIMULATED]),
        Err((DENIED.into(), member_only("submit tasks")))
    );
    assert_eq!(
        gdbus(&d, who, "Cancel", &[&roots]),
        Err((DENIED.into(), member_only("cancel tasks")))
    );
    assert_eq!(
        gdbus(&d, who, "SetPolicy", &["greedy-eft"]),
        Err((
            DENIED.into(),
            format!(
                "uid {} may not change the policy: that needs root or membership of group gpu-agent-admin",
                who.uid
            )
        ))
    );
    // busctl shows the same refusal.
    let out = as_user(
        &d,
        who,
        "busctl",
        &[
            "--user", "call", AGENT[0], AGENT[1], AGENT[2], "Submit", "a{sv}", "4", "workload",
            "d", "10", "mem_gb", "d", "1", "deadline", "d", "60", "weight", "d", "1",
        ],
    );
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!("Call failed: {}\n", member_only("submit tasks"))
    );

    // Reading is open to everyone.
    let listed = busctl_json(
        &d,
        who,
        &["call", AGENT[0], AGENT[1], AGENT[2], "ListTasks", "s", ""],
    );
    assert_eq!(listed["data"][0].as_array().unwrap().len(), 1);
    assert_eq!(listed["data"][0][0]["id"]["data"], roots.as_str());
    let task = busctl_json(
        &d,
        who,
        &["call", AGENT[0], AGENT[1], AGENT[2], "GetTask", "s", &roots],
    );
    assert_eq!(task["data"][0]["owner_uid"]["data"], 0);
    let policy = busctl_json(
        &d,
        who,
        &["get-property", AGENT[0], AGENT[1], AGENT[2], "Policy"],
    );
    assert_eq!(policy["data"], "fifo");
    let metrics = busctl_json(&d, who, &["call", AGENT[0], AGENT[1], AGENT[2], "Metrics"]);
    assert_eq!(metrics["type"], "a{sv}");
    let uuid = busctl_json(
        &d,
        who,
        &[
            "get-property",
            AGENT[0],
            "/org/gpuagent/Agent1/gpu/0",
            "org.gpuagent.Device1",
            "Uuid",
        ],
    );
    assert!(uuid["data"].as_str().unwrap().starts_with("GPU-"));

    // Nothing changed.
    let after = d.tasks();
    assert_eq!(after.len(), before.len());
    assert_eq!(d.task(&roots).state, TaskStatus::Running);
    assert_eq!(d.block_on(d.proxy().policy()).unwrap(), "fifo");
}

#[test]
fn daemon_access_member_submits_and_cancels_its_own() {
    if !root_or_skip("daemon_access_member_submits_and_cancels_its_own") {
        return;
    }
    let users = users();
    let who = users.member;
    let d = Daemon::start();
    let roots = d.submit(&spec(1e6, 1.0, 60.0, 1.0)).expect("Submit");

    assert_eq!(
        gdbus(&d, who, "SetPolicy", &["greedy-eft"]),
        Err((
            DENIED.into(),
            format!(
                "uid {} may not change the policy: that needs root or membership of group gpu-agent-admin",
                who.uid
            )
        ))
    );
    assert_eq!(
        gdbus(&d, who, "Reload", &[]),
        Err((
            DENIED.into(),
            format!(
                "uid {} may not reload the configuration and plugins: that needs root or membership of group gpu-agent-admin",
                who.uid
            )
        ))
    );
    assert_eq!(
        gdbus(&d, who, "SetDeviceOnline", &["0", "false"]),
        Err((
            DENIED.into(),
            format!(
                "uid {} may not take GPUs offline or online: that needs root or membership of group gpu-agent-admin",
                who.uid
            )
        ))
    );
    assert_eq!(
        gdbus(
            &d,
            who,
            "Adopt",
            &["{'devices': <[uint32 1]>, 'external_id': <'slurm:1'>, 'owner_uid': <uint32 1000>, 'deadline': <4e9>}"]
        ),
        Err((
            DENIED.into(),
            format!(
                "uid {} may not adopt external tasks: that needs root or membership of group gpu-agent-admin",
                who.uid
            )
        ))
    );
    for (method, args) in [
        ("Release", &["t1"][..]),
        ("ReleaseWithEnd", &["t1", "failed"]),
    ] {
        assert_eq!(
            gdbus(&d, who, method, args),
            Err((
                DENIED.into(),
                format!(
                    "uid {} may not release external tasks: that needs root or membership of group gpu-agent-admin",
                    who.uid
                )
            )),
            "{method}"
        );
    }
    assert_eq!(
        gdbus(
            &d,
            who,
            "ApplyMigConfig",
            &["version: v1", "", "{'on_busy': <'refuse'>}"]
        ),
        Err((
            DENIED.into(),
            format!(
                "uid {} may not change MIG layouts: that needs root or membership of group gpu-agent-admin",
                who.uid
            )
        ))
    );
    assert_eq!(
        gdbus(&d, who, "CancelMigChange", &["0"]),
        Err((
            DENIED.into(),
            format!(
                "uid {} may not change MIG layouts: that needs root or membership of group gpu-agent-admin",
                who.uid
            )
        ))
    );
    let online = d.busctl_json(&[
        "get-property",
        AGENT[0],
        "/org/gpuagent/Agent1/gpu/0",
        "org.gpuagent.Device1",
        "Online",
    ]);
    assert_eq!(online["data"], true, "a refused drain changes nothing");
    assert_eq!(
        gdbus(&d, who, "Cancel", &[&roots]),
        Err((
            DENIED.into(),
            format!("task {roots} belongs to uid 0; only its owner or an admin may cancel it")
        ))
    );
    assert_eq!(d.task(&roots).state, TaskStatus::Running);

    // Its own task: submitted, owned, cancelled.
    let own = id_of(&gdbus(&d, who, "Submit", &[LONG]).expect("the member submits"));
    assert_eq!(d.task(&own).owner_uid, who.uid);
    assert_eq!(gdbus(&d, who, "Cancel", &[&own]), Ok("()".into()));
    assert_eq!(d.task(&own).state, TaskStatus::Cancelled);

    // Its command runs as the member, with the member's groups.
    let script = "{'workload': <10.0>, 'mem_gb': <1.0>, 'deadline': <60.0>, 'weight': <1.0>, \
                  'command': <['/bin/sh', '-c', 'id -u; id -g; id -G']>}";
    let id = id_of(&gdbus(&d, who, "Submit", &[script]).expect("the member submits"));
    let task = d.wait_state(&id, TaskStatus::Succeeded, Duration::from_secs(15));
    assert_eq!(task.owner_uid, who.uid);
    let log = d.state_dir().join("logs").join(format!("{id}.log"));
    let text = std::fs::read_to_string(&log).expect("the task's log");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert_eq!(lines[0], who.uid.to_string());
    assert_eq!(lines[1], who.gid.to_string());
    let groups: Vec<u32> = lines[2]
        .split_whitespace()
        .map(|g| g.parse().unwrap())
        .collect();
    assert!(groups.contains(&users.member_group_gid), "{text}");
    assert!(
        !groups.contains(&0),
        "root's group leaked into the task: {text}"
    );
    assert_eq!(
        std::fs::metadata(&log).unwrap().uid(),
        who.uid,
        "the log belongs to the task's user"
    );

    // Root (an admin) may cancel anyone's task.
    d.block_on(d.proxy().cancel(&roots)).expect("root cancels");
    assert_eq!(d.task(&roots).state, TaskStatus::Cancelled);
}

#[test]
fn daemon_access_secrets_only_for_the_owner_and_admins() {
    if !root_or_skip("daemon_access_secrets_only_for_the_owner_and_admins") {
        return;
    }
    let users = users();
    let d = Daemon::start();
    let mut secret = spec(10.0, 1.0, 60.0, 1.0);
    secret.command = vec!["/bin/sleep".into(), "30".into()];
    secret.env = [("API_TOKEN".to_string(), "hunter2".to_string())].into();
    let roots = d.submit(&secret).expect("Submit");

    // Root (an admin) sees everything, through the proxy as through busctl.
    assert_eq!(d.task(&roots).spec.env["API_TOKEN"], "hunter2");
    assert_eq!(d.task(&roots).spec.command, ["/bin/sleep", "30"]);

    // Others see the keys and the program, not the values or arguments.
    for who in [users.outsider, users.member] {
        let task = busctl_json(
            &d,
            who,
            &["call", AGENT[0], AGENT[1], AGENT[2], "GetTask", "s", &roots],
        );
        let dict = &task["data"][0];
        assert_eq!(dict["env"]["data"]["API_TOKEN"], REDACTED, "{dict}");
        assert_eq!(
            dict["command"]["data"],
            serde_json::json!(["/bin/sleep", REDACTED])
        );
        let listed = busctl_json(
            &d,
            who,
            &["call", AGENT[0], AGENT[1], AGENT[2], "ListTasks", "s", ""],
        );
        let text = listed.to_string();
        assert!(
            !text.contains("hunter2") && !text.contains("\"30\""),
            "{text}"
        );
    }

    // A member sees its own task whole.
    let own = "{'workload': <10.0>, 'mem_gb': <1.0>, 'deadline': <60.0>, 'weight': <1.0>, \
               'command': <['/bin/sleep', '5']>, 'env': <{'MINE': 'yes'}>}";
    let id = id_of(&gdbus(&d, users.member, "Submit", &[own]).expect("the member submits"));
    let task = busctl_json(
        &d,
        users.member,
        &["call", AGENT[0], AGENT[1], AGENT[2], "GetTask", "s", &id],
    );
    assert_eq!(task["data"][0]["env"]["data"]["MINE"], "yes");
    assert_eq!(
        task["data"][0]["command"]["data"],
        serde_json::json!(["/bin/sleep", "5"])
    );
    // And the outsider sees it redacted too.
    let task = busctl_json(
        &d,
        users.outsider,
        &["call", AGENT[0], AGENT[1], AGENT[2], "GetTask", "s", &id],
    );
    assert_eq!(task["data"][0]["env"]["data"]["MINE"], REDACTED);
    d.block_on(d.proxy().cancel(&roots)).expect("root cancels");
    d.block_on(d.proxy().cancel(&id)).expect("root cancels");
}

/// The `org.gpuagent.Agent1` methods each `<policy>` block of the installed
/// bus policy allows, by block (`context="default"`, `group="gpu-agent"`, …).
fn bus_policy_members(conf: &str) -> std::collections::BTreeMap<String, Vec<String>> {
    let mut blocks = std::collections::BTreeMap::new();
    for block in conf.split("<policy ").skip(1) {
        let (who, body) = block.split_once('>').expect("a <policy> tag");
        let body = &body[..body.find("</policy>").expect("</policy>")];
        let mut members: Vec<String> = body
            .split("<allow ")
            .filter(|a| a.contains("send_interface=\"org.gpuagent.Agent1\""))
            .filter_map(|a| a.split("send_member=\"").nth(1))
            .map(|m| m[..m.find('"').unwrap()].to_string())
            .collect();
        members.sort();
        blocks.insert(who.trim().to_string(), members);
    }
    blocks
}

/// The bus policy the packages install lets each caller reach exactly the
/// methods docs/dbus.md says it may call (the daemon checks every call
/// again, but a method the file forgets is refused by the bus first).
#[test]
fn bus_policy_file_grants_each_method_to_the_callers_docs_dbus_md_names() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let docs = std::fs::read_to_string(root.join("docs/dbus.md")).unwrap();
    let conf = std::fs::read_to_string(root.join("packaging/org.gpuagent.Agent1.conf")).unwrap();
    let (mut everyone, mut members, mut admins) = (Vec::new(), Vec::new(), Vec::new());
    // The first table: the members of org.gpuagent.Agent1.
    let table = docs
        .lines()
        .skip_while(|l| !l.starts_with("| member | signature | who may call |"))
        .take_while(|l| l.starts_with('|'));
    for row in table.filter(|l| l.starts_with("| `")) {
        let name = &row[3..];
        let Some(open) = name.find('(') else { continue };
        let (name, who) = (&name[..open], row.rsplit('|').nth(1).unwrap().trim());
        if name.contains(' ') || who.is_empty() {
            continue;
        }
        match who {
            "everyone" => everyone.push(name.to_string()),
            "root, the daemon's user, `gpu-agent`, `gpu-agent-admin`"
            | "its owner (a member), or an admin" => members.push(name.to_string()),
            "root, the daemon's user, `gpu-agent-admin`" => admins.push(name.to_string()),
            other => panic!("docs/dbus.md: {name}: who may call it? {other:?}"),
        }
    }
    let mut all_members: Vec<String> = members.iter().chain(&admins).cloned().collect();
    for list in [&mut everyone, &mut members, &mut all_members] {
        list.sort();
    }
    assert!(
        everyone.contains(&"ListTasksPage".to_string()),
        "{everyone:?}"
    );
    let blocks = bus_policy_members(&conf);
    assert_eq!(blocks[r#"context="default""#], everyone);
    assert_eq!(blocks[&format!(r#"group="{MEMBER_GROUP}""#)], members);
    assert_eq!(blocks[&format!(r#"group="{ADMIN_GROUP}""#)], all_members);
}
