//! `gpuctl simulate` on MIG devices (docs/mig.md §6.1): a host file's
//! `mig = [...]` splits a GPU into instances that run the workload, gangs
//! stay on whole GPUs, and two host files compare side by side.

use crate::harness::{failure, success, write, Sim, GREEDY_EFT};

/// One A100-SXM4-40GB at speed 7 split into 3g.20gb, 2g.10gb, 2g.10gb:
/// first fit decreasing puts them at 4, 0 and 2, so device 0 is the split
/// GPU, 1 `0/mig/2g.10gb@0` and 2 `0/mig/2g.10gb@2` (9.625 GB, speed
/// 7 × 2/7 = 2), 3 `0/mig/3g.20gb@4` (19.5 GB, speed 3).
const MIG_HOST: &str = "[[gpu]]\nmodel = \"A100-SXM4-40GB\"\nspeed = 7\n\
                        mig = [\"3g.20gb\", \"2g.10gb\", \"2g.10gb\"]\n";

/// The same GPU whole.
const WHOLE_HOST: &str = "[[gpu]]\nmodel = \"A100-SXM4-40GB\"\nspeed = 7\n";

/// a fits only the 3g instance (15 GB); b and c any; d (30 GB) no instance;
/// e is a gang of two.
const TRACE: &str = "id,arrival,workload,mem_gb,deadline,weight,gpus\n\
                     a,0,42,15,100,1,1\n\
                     b,0,42,1,100,1,1\n\
                     c,0,42,1,100,1,1\n\
                     d,0,42,30,100,1,1\n\
                     e,0,42,1,100,1,2\n";

fn close(a: &serde_json::Value, b: f64) -> bool {
    a.as_f64()
        .is_some_and(|a| (a - b).abs() <= 1e-9 * b.abs().max(1.0))
}

#[test]
fn a_workload_runs_on_the_mig_devices_of_a_host_file() {
    let sim = Sim::new(&[GREEDY_EFT], MIG_HOST, TRACE);
    let schedule = sim.path("schedule.csv");
    let out = sim.run(&["--policy", "greedy-eft", "--json", "--schedule", &schedule]);
    let m: serde_json::Value = serde_json::from_str(&success(&out)).unwrap();
    // a: 3g only, 42 / 3 = 14 s. b: the 2g at 0 ends at 21, the 3g at 14 + 14 = 28
    // → 2g@0. c: the other 2g, 0..21.
    let rows: Vec<String> = std::fs::read_to_string(&schedule)
        .unwrap()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            format!("{},{},{},{},{},{}", f[0], f[1], f[2], f[3], f[8], f[15])
        })
        .collect();
    assert_eq!(
        rows,
        [
            "id,gpu,start,end,fc,device",
            "a,3,0,14,1,0/mig/3g.20gb@4",
            "b,1,0,21,1,0/mig/2g.10gb@0",
            "c,2,0,21,1,0/mig/2g.10gb@2",
        ]
    );
    assert_eq!(
        m["rejected"],
        serde_json::json!([
            {"id": "d", "reason": "needs 30 GB; the largest device has 19.5 GB"},
            {"id": "e", "reason": "needs 2 GPUs at once; the host has 0 not split into MIG instances (a gang never spans MIG devices)"},
        ])
    );
    // Each instance draws its share of the A100's 400 W (default profile):
    // 400 × 3/7 × 14 + 2 × 400 × 2/7 × 21 = 7200 J, and the 3g instance its
    // share of the 55 W idle power for 7 s: 165 J. Utilization: 56 busy
    // device-seconds on 3 devices over 21 s.
    assert!(close(&m["makespan"], 21.0), "{m}");
    assert!(close(&m["energy_run_j"], 7200.0), "{m}");
    assert!(close(&m["energy_idle_j"], 165.0), "{m}");
    assert!(close(&m["utilization"], 56.0 / 63.0), "{m}");
}

#[test]
fn two_host_files_compare_a_layout_with_the_whole_gpu() {
    let sim = Sim::new(&[GREEDY_EFT], MIG_HOST, TRACE);
    let whole = write(sim.work.path(), "whole.toml", WHOLE_HOST);
    let args = |json: bool| {
        let mut a = vec![
            "simulate",
            "--host",
            whole.as_str(),
            "--host",
            sim.host.as_str(),
            "--trace",
            sim.trace.as_str(),
            "--policy",
            "greedy-eft",
            "--plugin-dir",
            sim.plugins.path().to_str().unwrap(),
        ];
        if json {
            a.push("--json");
        }
        a
    };
    let out = crate::harness::gpuctl(&args(true));
    let reports: serde_json::Value = serde_json::from_str(&success(&out)).unwrap();
    let reports = reports.as_array().unwrap();
    assert_eq!(reports.len(), 2);
    assert_eq!(reports[0]["host"], whole.as_str());
    assert_eq!(reports[1]["host"], sim.host.as_str());
    // Whole: a, b, c, d one after another, 6 s each; e still needs two GPUs.
    assert!(close(&reports[0]["makespan"], 24.0));
    assert_eq!(reports[0]["rejected"].as_array().unwrap().len(), 1);
    assert!(close(&reports[1]["makespan"], 21.0));
    assert_eq!(reports[1]["rejected"].as_array().unwrap().len(), 2);
    // The table names each column's host above its policy.
    let table = success(&crate::harness::gpuctl(&args(false)));
    let mut lines = table.lines();
    let host = lines.next().unwrap();
    assert!(host.starts_with("host ") && host.contains(&whole) && host.contains(&sim.host));
    assert!(lines.next().unwrap().starts_with("policy "), "{table}");
    // One schedule cannot hold two hosts.
    let mut both = args(false);
    both.extend(["--schedule", "s.csv"]);
    assert_eq!(
        failure(&crate::harness::gpuctl(&both)).trim_end(),
        "gpuctl: error: --schedule needs exactly one --host (got 2)"
    );
}

#[test]
fn a_bad_mig_entry_names_the_file_line_and_key() {
    let sim = Sim::new(
        &[GREEDY_EFT],
        "[[gpu]]\nmodel = \"A100-SXM4-40GB\"\nspeed = 1\nmig = [\"3g.20gb\", \"3g.40gb\"]\n",
        TRACE,
    );
    let err = failure(&sim.run(&["--policy", "greedy-eft"]));
    assert!(
        err.contains(&format!(
            "{}:4: gpu[0].mig[1]: A100-SXM4-40GB: unknown MIG profile \"3g.40gb\"",
            sim.host
        )),
        "{err}"
    );
}
