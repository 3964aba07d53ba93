//! `sos` through the real `gpuctl simulate`: the published workload decided
//! job for job as the published software baseline decides it (`model =
//! baseline`), a hand-computed instance of the paper's rule on two unrelated
//! devices (`model = paper`), and the `alpha` parameter.

use std::io::Write;
use std::process::{Command, Stdio};

use crate::harness::{failure, gpuctl, success, write, Sim, SOS};
use crate::import::shared;

// Two equal devices; the trace's `runtimes` make them unrelated.
const HOST: &str = "[[gpu]]\nmodel = \"A100-SXM4-40GB\"\ncount = 2\nspeed = 1\n";

/// Runs `gpuctl simulate --policy sos ARGS --json --schedule` and returns
/// (metrics, the schedule's id,gpu,start,end rows).
fn simulate(trace: &str, args: &[&str]) -> (serde_json::Value, Vec<String>) {
    let sim = Sim::new(&[SOS], HOST, trace);
    let schedule = sim.path("schedule.csv");
    let mut all = vec![
        "--policy",
        "sos",
        "--param",
        "model=paper",
        "--json",
        "--schedule",
        &schedule,
    ];
    all.extend_from_slice(args);
    let metrics = serde_json::from_str(&success(&sim.run(&all))).unwrap();
    let rows = std::fs::read_to_string(schedule)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| l.split(',').take(4).collect::<Vec<_>>().join(","))
        .collect();
    (metrics, rows)
}

#[test]
fn sos_by_hand() {
    // alpha = 0.5. cost_i = w_J (p_iJ + Σ_{K ahead} iota_K p_iK) + p_iJ Σ_{K behind} w_K iota_K;
    // "done" is virtual work done, iota_K = (p_iK - done_K) / p_iK.
    //
    // t=0    a (w 2, p 4|6): both empty: cost_0 = 2*4 = 8, cost_1 = 2*6 = 12 → device 0.
    //        V0 = [a]; a's alpha-point: 0 + 2 = 2.
    // t=1    b (w 1, p 6|2). Device 0: a (ratio 1/2) is ahead of b (1/6), done 1:
    //        cost_0 = 1*(6 + 3) = 9. Device 1 empty: cost_1 = 1*2 = 2 → device 1.
    //        V1 = [b]; alpha-point 1 + 1 = 2.
    // t=1.5  c (w 6, p 3|4), ratio 2 on device 0, 1.5 on device 1: ahead of everything.
    //        Device 0: a done 1.5, iota 2.5/4: cost_0 = 6*3 + 3*(2*0.625) = 21.75.
    //        Device 1: b done 0.5, iota 1.5/2: cost_1 = 6*4 + 4*(1*0.75) = 27 → device 0.
    //        c overtakes a, which keeps its 1.5 done: V0 = [c, a]; c's alpha-point 1.5 + 1.5 = 3.
    // t=2    b reaches its alpha-point: device 1's queue → b runs on 1 from 2 to 4.
    // t=3    c reaches its alpha-point: device 0's queue → c runs on 0 from 3 to 6.
    //        a is the head again with 0.5 to go: alpha-point 3.5.
    //        d (w 1, p 2|8) arrives after that: device 0: a's ratio 1/2 ties with d's and
    //        a came first: cost_0 = 1*(2 + 2.5) = 4.5; device 1 empty: cost_1 = 8 → device 0.
    //        V0 = [a, d].
    // t=3.5  a → device 0's queue, behind c: a runs on 0 from 6 to 10. d is the head:
    //        alpha-point 3.5 + 1 = 4.5.
    // t=4    b finishes. e (w 1, p 5|1): device 0: d (ratio 1/2) is ahead of e (1/5), done
    //        0.5: cost_0 = 1*(5 + 1.5) = 6.5; device 1 empty: cost_1 = 1 → device 1;
    //        alpha-point 4 + 0.5 = 4.5.
    // t=4.5  d and e reach their alpha-points (device order): d joins device 0's queue
    //        behind a (runs 10 to 12), e runs on the idle device 1 from 4.5 to 5.5.
    let trace = "id,arrival,workload,mem_gb,deadline,weight,runtimes\n\
        a,0,1,1,100,2,4;6\n\
        b,1,1,1,100,1,6;2\n\
        c,1.5,1,1,100,6,3;4\n\
        d,3,1,1,100,1,2;8\n\
        e,4,1,1,100,1,5;1\n";
    let (m, rows) = simulate(trace, &[]);
    assert_eq!(
        rows,
        ["b,1,2,4", "c,0,3,6", "e,1,4.5,5.5", "a,0,6,10", "d,0,10,12"]
    );
    // twct = 2*(10-0) + 1*(4-1) + 6*(6-1.5) + 1*(12-3) + 1*(5.5-4).
    assert_eq!(m["twct"].as_f64(), Some(60.5));
    assert_eq!(m["makespan"].as_f64(), Some(12.0));
}

#[test]
fn alpha_sets_how_long_a_task_stays_virtual() {
    // x: cost_0 = 1*2 < cost_1 = 1*4 → device 0; it joins the queue at alpha * 2.
    let trace = "id,arrival,workload,mem_gb,deadline,weight,runtimes\nx,0,1,1,100,1,2;4\n";
    assert_eq!(simulate(trace, &[]).1, ["x,0,1,3"]);
    assert_eq!(simulate(trace, &["--param", "alpha=1"]).1, ["x,0,2,4"]);
    assert_eq!(
        simulate(trace, &["--param", "alpha=0.25"]).1,
        ["x,0,0.5,2.5"]
    );

    let sim = Sim::new(&[SOS], HOST, trace);
    let err = failure(&sim.run(&["--policy", "sos", "--param", "alpha=0"]));
    assert!(
        err.contains("policy sos: alpha: expected a number in (0, 1], got \"0\""),
        "{err}"
    );
    let err = failure(&sim.run(&["--policy", "sos", "--param", "model=hardware"]));
    assert!(
        err.contains("policy sos: model: expected one of baseline, paper, got \"hardware\""),
        "{err}"
    );
}

/// The published workload as the baseline program reads it. Its reader
/// (`ext_mem_host.cpp`) takes the file's first line for a header and reads
/// 100 batches of 100 lines, so it schedules lines 2 to 10,000 and then,
/// reading past the end, a 10,000th job made of the last number it read
/// (release tick 10561, as `uint8_t` 65: weight 65, every p_i 65). That job
/// is written here with alpha_i = floor(0.6 * 65) = 39, as the importer
/// requires; the baseline's 65 only changes when it leaves, after every
/// decision.
fn as_the_baseline_reads(workload: &str) -> String {
    let mut text: String = workload.lines().skip(1).map(|l| format!("{l}\n")).collect();
    text.push_str("65 65 65 65 65 65 39 39 39 39 39 10561\n");
    text
}

/// sha256 of `text`, by the system's `sha256sum`.
fn sha256(text: &str) -> String {
    let mut child = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run sha256sum");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()[..64].to_string()
}

#[test]
fn sos_sends_every_published_job_where_the_baseline_does() {
    let Some(path) = shared("sos/sim_5_machines.txt") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let input = write(
        dir.path(),
        "jobs.txt",
        &as_the_baseline_reads(&std::fs::read_to_string(path).unwrap()),
    );
    let at = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let (host, trace, schedule) = (at("host.toml"), at("trace.csv"), at("schedule.csv"));
    success(&gpuctl(&[
        "trace",
        "import",
        "sos",
        &input,
        "--out-host",
        &host,
        "--out-trace",
        &trace,
    ]));
    let plugins = crate::harness::plugin_dir(&[SOS]);
    success(&gpuctl(&[
        "simulate",
        "--host",
        &host,
        "--trace",
        &trace,
        "--policy",
        "sos",
        "--param",
        "sos:alpha=0.6",
        "--schedule",
        &schedule,
        "--json",
        "--plugin-dir",
        plugins.path().to_str().unwrap(),
    ]));
    // Job jN (line N of the input) → its device, in input order.
    let mut machine = vec![None; 10_000];
    for row in std::fs::read_to_string(&schedule).unwrap().lines().skip(1) {
        let mut cols = row.split(',');
        let (id, gpu) = (cols.next().unwrap(), cols.next().unwrap());
        let n: usize = id.strip_prefix('j').unwrap().parse().unwrap();
        assert!(
            machine[n - 1].replace(gpu.to_string()).is_none(),
            "{id} twice"
        );
    }
    let machine: Vec<String> = machine
        .into_iter()
        .enumerate()
        .map(|(i, m)| m.unwrap_or_else(|| panic!("j{} never ran", i + 1)))
        .collect();
    let counts: Vec<usize> = (0..5)
        .map(|d| machine.iter().filter(|m| **m == d.to_string()).count())
        .collect();
    assert_eq!(counts, [1973, 1402, 2664, 2391, 1570]);
    // The baseline's own list, made outside this project from
    // achieve-lab/TRETS_Software_SOS_Implementation (commit 250f5cb),
    // c_scheduler, unmodified:
    //   g++ -O2 -o sos ext_mem_host.cpp ext_mem_interface.cpp scheduler.cpp \
    //       cost_calculator.cpp job_info_update.cpp virtual_fifo.cpp
    //   ./sos sim_5_machines.txt out.txt
    //   head -n 10000 out.txt | awk '{print $2}' | sha256sum
    // (out.txt: one line per job in input order, `release machine popped_tick
    // p`, then the per-machine counts.)
    let list: String = machine.iter().map(|m| format!("{m}\n")).collect();
    assert_eq!(
        sha256(&list),
        "38ad66145a02c0e3678e13038be7187053250cc5c03f3d8f878ad191f8d104df"
    );
}
